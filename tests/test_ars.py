"""ARS: the update direction and step on a hand-computed case, each candidate's one episode on an env whose returns
are worked out by hand, the policy's forward pass against a loop formulation, RL Zoo's ars.yml rows translated, and
bad input refused in one line."""
import os

import gymnasium as gym
import numpy as np
import pytest
import tensorflow as tf
from forked_cli import run_cli

from rlexp.agents import ARS
from rlexp.envs.make import make_envs
from rlexp.errors import UserError
from rlexp.presets.zoo import find_row, translate


class Push(gym.Env):
    """Observation [1]; reward: the action; episodes of 3 steps."""

    observation_space = gym.spaces.Box(-5.0, 5.0, (1,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([1.0], np.float32), {}

    def step(self, action):
        self.t += 1
        return np.array([1.0], np.float32), float(action[0]), self.t == 3, False, {}


gym.register("Push-v0", entry_point=Push)


class FixedNormal:
    """A generator stub whose normal draws are given."""

    def __init__(self, values):
        self.values = np.asarray(values, np.float32)

    def normal(self, shape, dtype=tf.float32):
        assert list(shape) == list(self.values.shape)
        return tf.constant(self.values)


def test_candidates_each_run_one_episode_with_their_own_weights():
    agent = ARS(make_envs("Push-v0", n_envs=2, seed=0), seed=0, alive_bonus_offset=-1.0)
    candidates = np.array([[0.5], [-0.25], [2.0]], np.float32)  # linear, no bias: the action is the weight
    returns = agent.run_candidates(candidates)
    # 3 steps each; 2.0 is clipped to the bound 1; the offset -1 a step is in the search's returns only
    np.testing.assert_allclose(returns, [1.5 - 3, -0.75 - 3, 3.0 - 3])
    assert agent.steps == 9
    assert [round(ret, 6) for _, ret, _ in agent._finished] == [1.5, -0.75, 3.0]


def test_the_update_steps_along_the_kept_directions_scaled_by_the_returns_std():
    agent = ARS(make_envs("Push-v0", n_envs=4, seed=0), seed=0, n_delta=2, n_top=1, lr=0.02, delta_std=0.1)
    agent.weights.assign([0.3])
    agent.tf_rng = FixedNormal([[1.0], [-2.0]])
    seen = []

    def returns(candidates):
        seen.append(candidates.copy())
        return np.array([1.0, 1.5, 3.0, 2.0])  # r+ = [1, 1.5], r- = [3, 2]

    agent.run_candidates = returns
    metrics = agent.train_iteration()
    np.testing.assert_allclose(seen[0][:, 0], [0.3 + 0.1, 0.3 - 0.2, 0.3 - 0.1, 0.3 + 0.2], rtol=1e-6)
    # kept: direction 0 (its better return, 3, beats direction 1's, 2); std of [1, 3] (n - 1) = sqrt(2)
    step = 0.02 / (np.sqrt(2.0) + 1e-6)
    assert metrics["return_std"] == pytest.approx(np.sqrt(2.0))
    np.testing.assert_allclose(agent.weights.numpy(), [0.3 + step * (1 - 3) * 1.0], rtol=1e-6)


def test_the_policy_is_the_mlp_its_weights_spell():
    agent = ARS(make_envs("Pendulum-v1", n_envs=2, seed=0), seed=0, net_arch=[5], with_bias=True,
                squash_output=True, zero_policy=False)
    weights = agent.weights.numpy()
    assert agent.n_params == 3 * 5 + 5 + 5 * 1 + 1
    obs = np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32)
    k1, b1 = weights[:15].reshape(3, 5), weights[15:20]
    k2, b2 = weights[20:25].reshape(5, 1), weights[25:26]
    expected = np.zeros((4, 1))
    for n in range(4):
        hidden = [max(0.0, sum(obs[n, i] * k1[i, j] for i in range(3)) + b1[j]) for j in range(5)]
        out = sum(hidden[j] * k2[j, 0] for j in range(5)) + b2[0]
        expected[n, 0] = -2.0 + (np.tanh(out) + 1) * 0.5 * 4.0  # Pendulum's torque bounds +-2
    np.testing.assert_allclose(agent.policy(tf.constant(obs)).numpy(), expected, rtol=1e-5, atol=1e-6)
    stacked = np.repeat(weights[None], 4, axis=0)
    np.testing.assert_allclose(agent.candidate_actions(stacked, obs), expected, rtol=1e-5, atol=1e-6)


def shipped(key):
    return translate(find_row("ars", key, atari=False, row=key))


def test_ars_rows():
    t = shipped("CartPole-v1")  # LinearPolicy: no bias, no squashing, from zero weights
    a = t["agent"]
    assert (a["n_delta"], a["n_top"], a["delta_std"], a["lr"]) == (2, None, 0.05, 0.02)
    assert (a["net_arch"], a["with_bias"], a["squash_output"], a["zero_policy"]) == ([], False, False, True)
    assert t["env"]["n_envs"] == 4 and t["run"]["max_steps"] == 50_000  # 2 x n_delta candidates side by side
    p = shipped("Pendulum-v1")
    a = p["agent"]
    assert (a["n_delta"], a["n_top"], a["delta_std"], a["lr"]) == (4, 1, 0.1, 0.018)
    assert (a["net_arch"], a["with_bias"], a["squash_output"], a["zero_policy"]) == ([16], True, True, False)
    assert a["normalize_obs"] is True and a["normalize_reward"] is False
    assert p["env"]["n_envs"] == 8 and p["run"]["max_steps"] == 2_000_000


@pytest.mark.parametrize("kwargs, says", [
    ({"n_delta": 2, "n_top": 3}, "agent.n_top=3: use a whole number from 1 to agent.n_delta=2"),
    ({"delta_std": 0}, "agent.delta_std=0: use a positive noise scale"),
    ({"net_arch": [0]}, r"agent.net_arch=\[0\]: use a list of layer sizes"),
])
def test_bad_ars_settings_are_refused(kwargs, says):
    with pytest.raises(UserError, match=says):
        ARS(make_envs("Push-v0", n_envs=2, seed=0), **kwargs)


def test_ars_trains_cartpoles_row_from_the_command_line(tmp_path):
    result = run_cli(["agent=ars", "env=cartpole", "run.max_steps=2e4", "seed=1"], tmp_path,
                     dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"), 300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "RL Zoo's row for ars+cartpole: ars.yml CartPole-v1" in result.stdout + result.stderr
    bad = run_cli(["agent=ars", "env=cartpole", "agent.n_top=9"], tmp_path, dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
                  300)
    assert bad.returncode != 0 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert "agent.n_top=9" in bad.stderr
