"""`act` takes one observation or a batch of them, as SB3's `predict`: one observation gives one action (no batch
axis), a batch one action per row, any other shape one `UserError` naming the expected shapes."""
import re

import gymnasium as gym
import numpy as np
import pytest

from rlexp.agents import A2C, ACER, DDPG, DQN, NAF, PPO, SAC, TD3, TRPO, VPG
from rlexp.buffers import ReplayBuffer
from rlexp.envs.make import make_envs
from rlexp.errors import UserError

TINY = {"layers": [{"type": "dense", "units": 8, "activation": "tanh"}, {"type": "dense", "output": True}]}
ON_POLICY = dict(n_steps=8)
PPO_KWARGS = dict(n_steps=8, mini_batches=1)
CONTINUOUS = ("Pendulum-v1", (1,), 3)
DISCRETE = ("CartPole-v1", (), 4)


@pytest.mark.parametrize("cls, kwargs, env", [
    (PPO, PPO_KWARGS, DISCRETE), (PPO, PPO_KWARGS, CONTINUOUS), (A2C, ON_POLICY, DISCRETE),
    (VPG, ON_POLICY, DISCRETE), (TRPO, PPO_KWARGS, CONTINUOUS), (ACER, {}, DISCRETE), (DQN, {}, DISCRETE),
    (DDPG, {}, CONTINUOUS), (TD3, {}, CONTINUOUS), (SAC, {}, CONTINUOUS), (NAF, {}, CONTINUOUS),
], ids=lambda x: x.__name__ if isinstance(x, type) else None)
def test_act_on_one_observation_gives_one_action(cls, kwargs, env):
    env_id, action_shape, obs_size = env
    buffer = ReplayBuffer(100, 10, 4) if cls.off_policy else None
    agent = cls(make_envs(env_id, n_envs=2, seed=0, vectorization="sync"), model=TINY, buffer=buffer, seed=0,
                **kwargs)
    batch = np.random.default_rng(0).uniform(-1, 1, (3, obs_size)).astype(np.float32)
    actions = agent.act(batch)
    assert actions.shape == (3, *action_shape)
    for i in range(3):
        one = agent.act(batch[i])
        assert one.shape == action_shape
        np.testing.assert_allclose(one, actions[i], rtol=1e-5)
    assert agent.act(batch[:1]).shape == (1, *action_shape)  # a batch of one keeps its axis
    np.testing.assert_allclose(agent.act(list(batch[0])), actions[0], rtol=1e-5)  # any array-like
    for wrong in (batch[0, :-1], batch[:, :-1], batch[None]):
        expected = (f"act: an observation of shape {np.shape(wrong)}; {cls.__name__} takes one of shape ({obs_size},) "
                    f"or a batch of shape (n, {obs_size})")
        with pytest.raises(UserError, match=f"^{re.escape(expected)}$"):
            agent.act(wrong)


def test_recurrent_act_on_one_observation_carries_the_state_as_a_batch_of_one():
    lstm = {"layers": [{"type": "lstm", "units": 8}, {"type": "dense", "output": True}]}
    agent = PPO(make_envs("CartPole-v1", n_envs=2, seed=0, vectorization="sync"), model=lstm, seed=0, **PPO_KWARGS)
    xs = np.random.default_rng(1).normal(size=(4, 4)).astype(np.float32)
    starts = [True, False, False, True]
    batched = [agent.act(x[None], np.array([s]))[0] for x, s in zip(xs, starts)]
    agent._act_states = None
    assert [agent.act(x, s) for x, s in zip(xs, starts)] == batched


def test_act_on_one_dict_observation_gives_one_action():
    import tests.space_envs  # noqa: F401 (registers the Spaces-* envs)

    agent = PPO(make_envs("Spaces-discrete-dict-v0", n_envs=2, seed=0), seed=0, **PPO_KWARGS)
    space = agent.structured_space
    space.seed(1)
    observations = [space.sample() for _ in range(3)]
    actions = agent.act(np.stack([gym.spaces.flatten(space, o) for o in observations]))  # as rlexp's envs give them
    assert actions.shape == (3,)
    for obs, action in zip(observations, actions):
        one = agent.act(obs)
        assert one.shape == () and one == action
    with pytest.raises(UserError, match=r"with parts of shapes \{'image': \(36, 36, 1\), 'vector': \(3,\)\}"):
        agent.act({"vector": observations[0]["vector"]})
