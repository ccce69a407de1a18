"""The NumPy-batched CartPole behaves like gymnasium's CartPole-v1 copies, with same-step restarts."""
import gymnasium as gym
import numpy as np
import pytest

from rlexp.envs import make_envs
from rlexp.errors import UserError


def test_vector_cartpole_matches_env_copies():
    n, limit = 4, 30
    batched = make_envs("CartPole-v1", n_envs=n, seed=0, vectorization="vector", max_episode_steps=limit)
    copies = [gym.make("CartPole-v1", max_episode_steps=limit) for _ in range(n)]
    for env, state in zip(copies, batched.state.T):
        env.reset(seed=0)
        env.unwrapped.state = state.copy()
    rng = np.random.default_rng(0)
    ends = truncations = 0
    for _ in range(200):
        actions = rng.integers(0, 2, n)
        obs, rewards, terminated, truncated, info = batched.step(actions)
        for i, env in enumerate(copies):
            o, r, term, trunc, _ = env.step(int(actions[i]))
            assert (r, term, trunc) == (rewards[i], terminated[i], truncated[i])
            if term or trunc:  # the batched env restarted: its last obs is in info; follow its new state
                np.testing.assert_allclose(info["final_obs"][i], o, rtol=1e-6, atol=1e-6)
                assert np.all(np.abs(obs[i]) <= 0.05)
                env.reset()
                env.unwrapped.state = batched.state[:, i].copy()
                ends, truncations = ends + 1, truncations + bool(trunc)
            else:
                np.testing.assert_allclose(obs[i], o, rtol=1e-6, atol=1e-6)
    assert ends > 10 and truncations > 0


def test_vector_needs_a_batched_env():
    with pytest.raises(UserError, match="vectorization=sync"):
        make_envs("Pendulum-v1", vectorization="vector")
    envs = make_envs("CartPole-v1", n_envs=2, vectorization="vector", render_mode="rgb_array")
    assert isinstance(envs, gym.vector.SyncVectorEnv)  # rendering uses env copies


def test_auto_vectorization_batches_only_where_it_pays():
    from rlexp.envs import SameStepCartPoleVectorEnv

    assert isinstance(make_envs("CartPole-v1", n_envs=8), SameStepCartPoleVectorEnv)
    assert isinstance(make_envs("CartPole-v1", n_envs=1), gym.vector.SyncVectorEnv)
    assert isinstance(make_envs("Pendulum-v1", n_envs=8), gym.vector.SyncVectorEnv)
