"""Returns / GAE and DQN targets against NumPy references."""
import numpy as np
import pytest
import tensorflow as tf

from rlexp.agents.dqn import DQN, huber, q_targets
from rlexp.agents.on_policy import gae
from rlexp.agents.on_policy import compute_gae
from rlexp.buffers import ReplayBuffer
from rlexp.envs.make import make_envs


def gae_by_forward_sums(rewards, values, dones, last_values, gamma, lam):
    """GAE by its definition, a forward sum over each future step of the rollout (no backward recursion):
    A_t = sum_{s >= t} (gamma lam)^(s - t) [no episode end in t..s-1] delta_s,
    delta_s = r_s + gamma (1 - d_s) V(s + 1) - V(s), with V(T) the last values."""
    T = len(rewards)
    next_values = np.concatenate([values[1:], last_values[None]])
    deltas = rewards + gamma * (1.0 - dones) * next_values - values
    adv = np.zeros_like(rewards)
    for t in range(T):
        alive = np.ones_like(last_values)  # 0 once an episode ended at some step in t..s-1
        for s in range(t, T):
            adv[t] += (gamma * lam) ** (s - t) * alive * deltas[s]
            alive = alive * (1.0 - dones[s])
    return adv, adv + values


@pytest.mark.parametrize("unroll", [64, 0], ids=["unrolled", "scan"])
def test_gae_matches_reference_with_episode_ends(monkeypatch, unroll):
    monkeypatch.setattr(gae, "GAE_UNROLL_STEPS", unroll)
    rng = np.random.default_rng(0)
    T, N = 7, 3
    rewards, values = rng.normal(size=(T, N)).astype(np.float32), rng.normal(size=(T, N)).astype(np.float32)
    dones = (rng.random((T, N)) < 0.3).astype(np.float32)
    last = rng.normal(size=N).astype(np.float32)
    adv, ret = tf.function(compute_gae)(rewards, values, dones, last, 0.97, 0.9)
    assert dones.any()  # episode ends cut the sums
    ref_adv, ref_ret = gae_by_forward_sums(rewards, values, dones, last, 0.97, 0.9)
    np.testing.assert_allclose(adv.numpy(), ref_adv, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ret.numpy(), ref_ret, rtol=1e-5, atol=1e-5)


def test_gae_lambda_one_is_discounted_return():
    rewards = np.ones((3, 1), np.float32)
    values = np.zeros((3, 1), np.float32)
    dones = np.zeros((3, 1), np.float32)
    _, ret = tf.function(compute_gae)(rewards, values, dones, np.array([10.0], np.float32), 0.5, 1.0)
    # G0 = 1 + .5 + .25 + .125 * 10
    np.testing.assert_allclose(ret.numpy()[:, 0], [1 + 0.5 + 0.25 + 1.25, 1 + 0.5 + 2.5, 1 + 5.0])


def test_dqn_targets_max_and_terminal():
    rewards = np.array([1.0, 2.0], np.float32)
    terminated = np.array([0.0, 1.0], np.float32)
    next_q_target = np.array([[1.0, 3.0], [5.0, 4.0]], np.float32)
    t = q_targets(rewards, terminated, next_q_target, 0.9).numpy()
    np.testing.assert_allclose(t, [1.0 + 0.9 * 3.0, 2.0])


def test_double_dqn_targets_use_online_argmax():
    rewards = np.zeros(2, np.float32)
    terminated = np.zeros(2, np.float32)
    next_q_target = np.array([[1.0, 3.0], [5.0, 4.0]], np.float32)
    next_q_online = np.array([[9.0, 0.0], [0.0, 9.0]], np.float32)  # picks action 0, then action 1
    t = q_targets(rewards, terminated, next_q_target, 1.0, next_q_online).numpy()
    np.testing.assert_allclose(t, [1.0, 4.0])


def test_huber_is_keras_huber_bit_for_bit():
    errors = np.array([-3.0, -1.0, -0.7, 0.0, 0.3, 1.0, 1.0001, 2.5], np.float32)
    keras_loss = tf.keras.losses.huber(np.zeros((8, 1), np.float32), errors[:, None]).numpy()
    np.testing.assert_array_equal(huber(tf.constant(errors)).numpy(), keras_loss)
    np.testing.assert_allclose(keras_loss, [2.5, 0.5, 0.245, 0.0, 0.045, 0.5, 0.5001, 2.0], rtol=1e-6)


def test_dqn_loss_picks_the_taken_actions_q_values():
    agent = DQN(make_envs("CartPole-v1", n_envs=1, seed=0), buffer=ReplayBuffer(100, 8, 8), seed=0)
    rng = np.random.default_rng(0)
    obs, next_obs = (rng.normal(size=(8, 4)).astype(np.float32) for _ in range(2))
    actions = rng.integers(0, 2, 8)
    rewards, terminated = np.ones(8, np.float32), (rng.random(8) < 0.3).astype(np.float32)
    targets = q_targets(rewards, terminated, agent.target(next_obs), agent.gamma)
    q = tf.gather(agent.model(obs), actions, batch_dims=1)  # the reference: gather, then Keras's Huber
    expected = tf.reduce_mean(tf.keras.losses.huber(targets[:, None], q[:, None]))
    assert agent.loss(obs, actions, rewards, next_obs, terminated).numpy() == expected.numpy()


def test_gae_unrolled_equals_scan_bit_for_bit(monkeypatch):
    rng = np.random.default_rng(1)
    T, N = 32, 8
    args = [rng.normal(size=(T, N)).astype(np.float32), rng.normal(size=(T, N)).astype(np.float32),
            (rng.random((T, N)) < 0.1).astype(np.float32), rng.normal(size=N).astype(np.float32), 0.98, 0.8]
    results = []
    for unroll in (64, 0):
        monkeypatch.setattr(gae, "GAE_UNROLL_STEPS", unroll)
        results.append([x.numpy() for x in tf.function(compute_gae)(*args)])
    for unrolled, scanned in zip(*results):
        np.testing.assert_array_equal(unrolled, scanned)
