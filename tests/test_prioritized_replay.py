"""Prioritized replay in DQN: weighted losses, priorities from the updates' TD errors, and the CLI."""
import numpy as np
import pytest
import tensorflow as tf

from rlexp.agents import DQN
from rlexp.agents.dqn import q_targets
from rlexp.buffers import PrioritizedReplayBuffer
from rlexp.envs.make import make_envs
from test_cli import rlexp, run_dirs


def small_dqn(buffer, **kwargs):
    return DQN(make_envs("CartPole-v1", n_envs=1, seed=0, vectorization="sync"), buffer=buffer, seed=0, **kwargs)


def test_importance_weights_multiply_each_rows_huber_loss():
    agent = small_dqn(PrioritizedReplayBuffer(100, 8, 8))
    rng = np.random.default_rng(0)
    obs, next_obs = (rng.normal(size=(8, 4)).astype(np.float32) for _ in range(2))
    actions = rng.integers(0, 2, 8)
    rewards, terminated = np.ones(8, np.float32), (rng.random(8) < 0.3).astype(np.float32)
    weights = rng.random(8).astype(np.float32)
    targets = q_targets(rewards, terminated, agent.target(next_obs), agent.gamma)
    q = tf.gather(agent.model(obs), actions, batch_dims=1)
    per_row = tf.keras.losses.huber(targets[:, None], q[:, None], delta=1.0)  # Keras's Huber, row by row
    expected = float(tf.reduce_mean(weights * tf.reshape(per_row, [-1])))
    assert float(agent.loss(obs, actions, rewards, next_obs, terminated, weights)) == pytest.approx(expected, rel=1e-6)
    unweighted = float(agent.loss(obs, actions, rewards, next_obs, terminated))
    assert float(agent.loss(obs, actions, rewards, next_obs, terminated, np.ones(8, np.float32))) == \
        pytest.approx(unweighted, rel=1e-6)


@pytest.mark.parametrize("double", [False, True])
def test_an_update_sets_the_sampled_priorities_to_their_td_errors(double):
    buffer = PrioritizedReplayBuffer(max_size=200, initial_size=16, batch_size=16, alpha=0.6, priority_eps=0.01)
    agent = small_dqn(buffer, train_freq=40, gradient_steps=1, double=double, gamma=0.9)
    agent.max_steps = 1000
    agent.train_iteration()  # 40 env steps and an update phase
    buffer.data["terminated"][::3] = 1.0  # terminations beside bootstrapped rows in the next batch
    before = buffer.tree.leaves(np.arange(buffer.size)).copy()
    draws = []

    def recorded(beta):  # the batch the update uses, with the networks' outputs before the update
        batch = draw(beta)
        draws.append(batch | {"q": agent.model(batch["obs"]).numpy(), "next_q": agent.model(batch["next_obs"]).numpy(),
                              "next_q_target": agent.target(batch["next_obs"]).numpy()})
        return batch

    draw, agent.prioritized_batch = agent.prioritized_batch, recorded
    agent.learn_from_replay()
    (batch,) = draws
    assert batch["weights"].shape == (16,) and batch["indices"].shape == (16,)
    assert set(batch["terminated"]) == {0.0, 1.0}
    rows = np.arange(16)
    q = batch["q"][rows, batch["actions"]].astype(np.float64)
    if double:  # the online network picks a', the target network values it
        next_value = batch["next_q_target"][rows, batch["next_q"].argmax(axis=1)]
    else:
        next_value = batch["next_q_target"].max(axis=1)
    targets = batch["rewards"] + 0.9 * (1.0 - batch["terminated"]) * next_value.astype(np.float64)
    leaves = buffer.tree.leaves(np.arange(buffer.size))
    last = {i: k for k, i in enumerate(batch["indices"])}  # a transition drawn twice keeps its last error
    for i, k in last.items():
        assert leaves[i] == pytest.approx((abs(q[k] - targets[k]) + 0.01) ** 0.6, rel=1e-5)
    untouched = np.setdiff1d(np.arange(buffer.size), batch["indices"])
    np.testing.assert_array_equal(leaves[untouched], before[untouched])


class FixedDraws:
    """A stand-in for the buffer's generator: every uniform draw is `u`."""

    def __init__(self, u: float) -> None:
        self.u = u

    def random(self, shape) -> np.ndarray:
        return np.full(shape, self.u)


def test_each_batch_of_an_update_phase_is_drawn_and_weighted_with_the_priorities_its_predecessor_left():
    """Schaul et al. (2016), Algorithm 1: sample, weigh, update, then set the batch's priorities, batch after batch.
    The TD errors are fixed per transition; the expected draws (inverse CDF of the priorities at the stratified
    masses (k + u) total / batch_size) and weights (N P(i))^-beta / max_k (N P(k))^-beta are computed by hand."""
    alpha, beta, eps, u = 0.6, 0.4, 0.01, 0.37
    buffer = PrioritizedReplayBuffer(max_size=8, initial_size=8, batch_size=4, alpha=alpha, beta=beta, priority_eps=eps)
    agent = small_dqn(buffer, gradient_steps=4)
    agent.max_steps = 1000  # at step 0, beta is buffer.beta
    slots = np.arange(8, dtype=np.float32)
    obs = np.stack([slots, np.zeros(8), np.zeros(8), np.zeros(8)], axis=1).astype(np.float32)  # obs[0]: the slot
    next_obs = obs + np.float32(100.0)  # every column tells its slot: a column read from another one shows
    actions, rewards, terminated = np.arange(8) % 2, 10.0 * slots + 0.5, (np.arange(8) % 3 == 0).astype(np.float32)
    buffer.add(obs, actions, rewards.astype(np.float32), next_obs, terminated)
    buffer.rng = FixedDraws(u)
    td_errors = np.array([0.0, -3.0, 0.5, 2.0, -0.2, 1.0, 4.0, 0.1], np.float32)  # of the transition in each slot
    seen = []

    def record(batch_obs, batch_actions, batch_rewards, batch_next_obs, batch_terminated, weights):
        drawn = batch_obs[:, 0].astype(np.int64)
        for column, expected in ((batch_obs, obs), (batch_actions, actions), (batch_rewards, rewards),
                                 (batch_next_obs, next_obs), (batch_terminated, terminated)):
            np.testing.assert_array_equal(column, expected[drawn])
        seen.append((drawn, weights.copy()))
        return td_errors[drawn]

    def update_batch(batch):  # no gradient step: the TD errors above
        columns = [batch[k] for k in ("obs", "actions", "rewards", "next_obs", "terminated", "weights")]
        errors = tf.numpy_function(record, columns, tf.float32, stateful=True)
        errors.set_shape([4])
        return {"loss": tf.reduce_sum(errors), "td_errors": errors}

    agent.update_batch = update_batch
    agent.learn_from_replay()
    assert len(seen) == 4
    priorities = np.ones(8)  # stored transitions start at the largest priority so far, 1
    for drawn, weights in seen:
        scaled = priorities**alpha
        cumulative = np.cumsum(scaled)
        masses = (np.arange(4) + u) * cumulative[-1] / 4
        np.testing.assert_array_equal(drawn, np.searchsorted(cumulative, masses, side="right"))
        probabilities = scaled / scaled.sum()
        all_weights = (8 * probabilities) ** -beta
        np.testing.assert_allclose(weights, all_weights[drawn] / all_weights.max(), rtol=1e-6)
        priorities[drawn] = np.abs(td_errors[drawn].astype(np.float64)) + eps
    assert [list(d) for d, _ in seen[:2]] == [[0, 2, 4, 6], [1, 3, 6, 6]]  # the second batch follows the first's errors
    np.testing.assert_allclose(buffer.tree.leaves(np.arange(8)), priorities**alpha, rtol=1e-12)


@pytest.mark.e2e
def test_dqn_trains_with_prioritized_replay_through_the_cli(tmp_path):
    args = ["agent=dqn", "buffer=prioritized", "buffer.initial_size=200", "run.eval_episodes=1"]
    result = rlexp(tmp_path, *args, "run.max_steps=1500")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "done (max_steps)" in result.stdout
    (run,) = run_dirs(tmp_path)
    with np.load(run / "checkpoints" / "last.ckpt") as ckpt:
        priorities = ckpt["buffer/priorities"]
    assert len(priorities) == 1536 and len(np.unique(priorities)) > 100  # 6 x train_freq 256, updated from TD errors
    resumed = rlexp(tmp_path, f"+resume={run}", "run.max_steps=2000")
    assert resumed.returncode == 0 and "done (max_steps)" in resumed.stdout, resumed.stderr[-2000:]


@pytest.mark.e2e
def test_prioritized_replay_for_an_agent_without_it_is_one_line(tmp_path):
    result = rlexp(tmp_path, "agent=sac", "env=pendulum", "buffer=prioritized", "run.max_steps=100")
    assert result.returncode == 2
    assert "buffer=prioritized (prioritized replay) is supported by DQN and DQfD, not SAC" in result.stderr
    assert "Traceback" not in result.stdout + result.stderr and not run_dirs(tmp_path)
