"""QR-DQN and TQC: the quantile Huber loss on hand-computed cases, each agent's loss and targets against a NumPy
formulation written here from the papers (loops over rows, quantiles and samples), RL Zoo's qrdqn.yml and tqc.yml
rows translated against values worked out by hand, and bad input refused in one line."""
import itertools

import numpy as np
import pytest
import tensorflow as tf
from forked_cli import run_cli

from rlexp.agents import QRDQN, TQC
from rlexp.agents.quantiles import quantile_huber_loss
from rlexp.buffers import ReplayBuffer
from rlexp.envs.make import make_envs
from rlexp.errors import UserError
from rlexp.presets.zoo import find_row, translate


def rho(u: float, fraction: float) -> float:
    """The quantile Huber loss of one pair (kappa 1): |tau - 1{u < 0}| * huber(u)."""
    huber = 0.5 * u * u if abs(u) <= 1 else abs(u) - 0.5
    return abs(fraction - (u < 0)) * huber


def reference_loss(current: np.ndarray, target: np.ndarray, sum_over_quantiles: bool) -> np.ndarray:
    """Per row: over estimates i (fraction (i + 0.5) / N) and samples j, summed over i and averaged over j (QR-DQN)
    or averaged over both (TQC); `current` [rows, C, N] or [rows, N], `target` [rows, M]."""
    current = current if current.ndim == 3 else current[:, None, :]
    rows, critics, n = current.shape
    out = np.zeros(rows)
    for r in range(rows):
        terms = [[rho(target[r, j] - current[r, c, i], (i + 0.5) / n) for j in range(target.shape[1])]
                 for c, i in itertools.product(range(critics), range(n))]
        terms = np.array(terms).reshape(critics, n, -1)
        out[r] = terms.sum(axis=1).mean() if sum_over_quantiles else terms.mean()
    return out


def test_quantile_huber_loss_hand_computed():
    # estimates 0 and 1 at fractions 1/4 and 3/4, one sample 0.5: u = 0.5 and -0.5, huber 0.125 each, weights
    # |1/4 - 0| and |3/4 - 1|: 0.03125 each, summed over the estimates
    loss = quantile_huber_loss(tf.constant([[0.0, 1.0]]), tf.constant([[0.5]]))
    np.testing.assert_allclose(loss.numpy(), [0.0625])
    # past kappa the loss is linear: u = 3 -> huber 2.5, weight 1/2 (one estimate) -> 1.25; u = -3 -> 1.25 too
    loss = quantile_huber_loss(tf.constant([[0.0], [0.0]]), tf.constant([[3.0], [-3.0]]))
    np.testing.assert_allclose(loss.numpy(), [1.25, 1.25])
    # TQC's: averaged over 2 critics x 2 estimates x 1 sample; the second critic's estimates equal the sample
    loss = quantile_huber_loss(tf.constant([[[0.0, 1.0], [0.5, 0.5]]]), tf.constant([[[0.5]]]), sum_over_quantiles=False)
    np.testing.assert_allclose(loss.numpy(), [(0.0625 + 0.0) / 4])


def test_quantile_huber_loss_matches_the_loop_formulation():
    rng = np.random.default_rng(3)
    current, target = rng.normal(size=(5, 3, 4)).astype(np.float32), 2 * rng.normal(size=(5, 7)).astype(np.float32)
    for summed in (True, False):
        ours = quantile_huber_loss(tf.constant(current), tf.constant(target)[:, None, :], sum_over_quantiles=summed)
        np.testing.assert_allclose(ours.numpy(), reference_loss(current, target, summed), rtol=1e-5)
    ours = quantile_huber_loss(tf.constant(current[:, 0]), tf.constant(target))
    np.testing.assert_allclose(ours.numpy(), reference_loss(current[:, 0], target, True), rtol=1e-5)


def batch(rng, n, obs_dim, n_actions=None, action_dim=None):
    obs = rng.normal(size=(n, obs_dim)).astype(np.float32)
    actions = (rng.integers(0, n_actions, n) if n_actions else rng.uniform(-1, 1, (n, action_dim))).astype(
        np.int64 if n_actions else np.float32)
    return (obs, actions, rng.normal(size=n).astype(np.float32), rng.normal(size=(n, obs_dim)).astype(np.float32),
            (rng.uniform(size=n) < 0.3).astype(np.float32))


def test_qrdqn_loss_is_the_papers_against_the_target_networks_greedy_quantiles():
    agent = QRDQN(make_envs("Acrobot-v1", n_envs=1, seed=0), model="mlp", buffer=ReplayBuffer(100, 10, 8), seed=0,
                  n_quantiles=5, gamma=0.9)
    agent.target.set_weights([w * 1.3 for w in agent.model.get_weights()])  # a target unlike the online net
    obs, actions, rewards, next_obs, terminated = batch(np.random.default_rng(0), 64, 6, n_actions=3)
    loss, _ = agent._loss_and_errors(*(tf.constant(x) for x in (obs, actions, rewards, next_obs, terminated)))
    online = agent.model(obs).numpy().reshape(64, 5, 3)  # [rows, quantiles, actions]
    target = agent.target(next_obs).numpy().reshape(64, 5, 3)
    expected = []
    for r in range(64):
        best = int(np.argmax(target[r].mean(axis=0)))
        samples = rewards[r] + 0.9 * (1 - terminated[r]) * target[r, :, best]
        expected.append(reference_loss(online[r:r + 1, :, actions[r]], samples[None], True)[0])
    np.testing.assert_allclose(float(loss), np.mean(expected), rtol=1e-5)
    assert agent.q_values(obs).shape == (64, 3)
    np.testing.assert_allclose(agent.q_values(obs).numpy(), online.mean(axis=1), rtol=1e-6)
    np.testing.assert_allclose(agent.numpy_q_values(agent.model(obs).numpy()), online.mean(axis=1), rtol=1e-6)


def test_tqc_drops_the_largest_pooled_quantiles_and_averages_its_loss():
    agent = TQC(make_envs("Pendulum-v1", n_envs=1, seed=0), model="mlp", buffer=ReplayBuffer(100, 10, 8), seed=0,
                n_quantiles=4, n_critics=3, top_quantiles_to_drop_per_net=1, gamma=0.9, ent_coef=0.2)
    obs, actions, rewards, next_obs, terminated = batch(np.random.default_rng(1), 5, 3, action_dim=1)
    next_actions = np.random.default_rng(2).uniform(-1, 1, (5, 1)).astype(np.float32)
    next_log_prob = np.random.default_rng(3).normal(size=5).astype(np.float32)
    agent.sample = lambda o, rng=None: (tf.constant(next_actions), tf.constant(next_log_prob))
    targets = agent.critic_targets(tf.constant(rewards), tf.constant(next_obs), tf.constant(terminated),
                                   tf.constant(0.2)).numpy()
    assert targets.shape == (5, 9)  # 3 critics x (4 - 1) kept
    inputs = np.concatenate([next_obs, next_actions], axis=1)
    pooled = np.concatenate([c(inputs).numpy() for c in agent.target_critics], axis=1)  # [rows, 12]
    for r in range(5):
        kept = np.sort(pooled[r])[:9]
        expected = rewards[r] + 0.9 * (1 - terminated[r]) * (kept - 0.2 * next_log_prob[r])
        np.testing.assert_allclose(targets[r], expected, rtol=1e-5, atol=1e-6)
    loss = agent.critic_loss(tf.constant(obs), tf.constant(actions), tf.constant(targets)).numpy()
    current = np.stack([c(np.concatenate([obs, actions], axis=1)).numpy() for c in agent.critics], axis=1)
    np.testing.assert_allclose(loss, reference_loss(current, targets, False).mean(), rtol=1e-5)
    np.testing.assert_allclose(agent.actor_q(tf.constant(obs), tf.constant(actions)).numpy(),
                               current.mean(axis=(1, 2)), rtol=1e-5)


def shipped(algo, key):
    row = find_row(algo, key, atari=key == "atari", row=key)
    assert row is not None and row.key == key
    return translate(row)


def test_qrdqn_cartpole_row():
    t = shipped("qrdqn", "CartPole-v1")
    a, b = t["agent"], t["buffer"]
    assert t["run"]["max_steps"] == 50_000 and "double" not in a
    assert (a["lr"], a["lr_schedule"], a["gamma"], a["n_quantiles"]) == (2.3e-3, "constant", 0.99, 10)
    assert (a["train_freq"], a["gradient_steps"], a["target_sync_steps"]) == (256, 128, 10)
    assert (a["epsilon_start"], a["epsilon_end"], a["epsilon_decay_steps"]) == (1.0, 0.04, 8000)  # 0.16 x 50k
    assert a["grad_norm"] is None  # sb3-contrib's max_grad_norm: None
    assert a["optimizer"] == "adam" and a["opt_epsilon"] == pytest.approx(0.01 / 64)  # 0.01 / batch_size
    assert b == {"max_size": 100_000, "initial_size": 1000, "batch_size": 64}
    assert [layer.get("units") for layer in t["model"]["layers"]] == [256, 256, None]


def test_qrdqn_atari_row_and_default_network():
    t = shipped("qrdqn", "atari")
    a = t["agent"]
    assert (a["lr"], a["n_quantiles"], a["target_sync_steps"], a["epsilon_end"]) == (5e-5, 200, 10000, 0.01)
    assert a["epsilon_decay_steps"] == 250_000 and a["opt_epsilon"] == pytest.approx(0.01 / 32)
    assert t["env"]["preprocess"] is True and t["env"]["frame_stack"] == 4
    assert [layer["type"] for layer in t["model"]["layers"]][-2:] == ["dense", "dense"]  # NatureCNN's 512, the head
    assert t["buffer"]["_target_"] == "rlexp.buffers.FrameBuffer" and t["buffer"]["initial_size"] == 50_000


def test_tqc_rows():
    t = shipped("tqc", "LunarLanderContinuous-v3")
    a = t["agent"]
    assert (a["lr"], a["lr_schedule"], a["tau"], a["gamma"]) == (7.3e-4, "linear", 0.01, 0.99)
    assert (a["n_quantiles"], a["n_critics"], a["top_quantiles_to_drop_per_net"]) == (25, 2, 2)
    assert (a["ent_coef"], a["target_entropy"], a["log_std_init"]) == ("auto", "auto", -3.0)
    assert t["buffer"] == {"max_size": 1_000_000, "initial_size": 10_000, "batch_size": 256}
    assert [layer.get("units") for layer in t["model"]["layers"]] == [400, 300, None]
    p = shipped("tqc", "Pendulum-v1")
    assert (p["agent"]["lr"], p["run"]["max_steps"], p["buffer"]["batch_size"]) == (1e-3, 20_000, 256)
    assert [layer.get("units") for layer in p["model"]["layers"]] == [256, 256, None]  # TQC's default net_arch


@pytest.mark.parametrize("kwargs, says", [
    ({"n_quantiles": 0}, "agent.n_quantiles=0: use a whole number of 1 or more"),
    ({"n_quantiles": 4, "top_quantiles_to_drop_per_net": 4}, "keep at least one of each critic's agent.n_quantiles=4"),
    ({"n_critics": 1.5}, "agent.n_critics=1.5: use a whole number"),
])
def test_tqc_refuses_quantile_counts_out_of_range(kwargs, says):
    with pytest.raises(UserError, match=says):
        TQC(make_envs("Pendulum-v1", n_envs=1, seed=0), model="mlp", buffer=ReplayBuffer(100, 10, 8), **kwargs)


def test_bad_quantile_input_is_one_line_on_the_command_line(tmp_path):
    import os

    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    for args, says in ((["agent=qrdqn", "env=pendulum"], "agent=qrdqn does not support continuous actions"),
                       (["agent=qrdqn", "env=cartpole", "agent.n_quantiles=0"], "agent.n_quantiles=0"),
                       (["agent=tqc", "env=pendulum", "agent.top_quantiles_to_drop_per_net=30"],
                        "agent.top_quantiles_to_drop_per_net=30")):
        result = run_cli(args, tmp_path, env, 300)
        assert result.returncode != 0 and len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert says in result.stderr, result.stderr
    assert not (tmp_path / "outputs").exists()
