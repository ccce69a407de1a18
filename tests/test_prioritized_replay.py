"""Prioritized replay in DQN: weighted losses, priorities from the updates' TD errors, and the CLI."""
import numpy as np
import pytest
import tensorflow as tf

from rlexp.agents import DQN
from rlexp.agents.dqn import q_targets
from rlexp.buffers import PrioritizedReplayBuffer
from rlexp.envs import make_envs
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


def test_an_update_phase_sets_the_sampled_priorities_to_their_td_errors():
    buffer = PrioritizedReplayBuffer(max_size=200, initial_size=16, batch_size=16, alpha=0.6, priority_eps=0.01)
    agent = small_dqn(buffer, train_freq=40, gradient_steps=1)
    agent.max_steps = 1000
    agent.train_iteration()  # 40 env steps; the update phase's batch went through `learn_from_replay` already
    before = buffer.tree.leaves(np.arange(buffer.size)).copy()
    batch = agent.sample_replay(1)
    assert batch["weights"].shape == (16,) and batch["indices"].shape == (16,)
    q = tf.gather(agent.model(batch["obs"]), batch["actions"], batch_dims=1).numpy()
    targets = q_targets(batch["rewards"], batch["terminated"], agent.target(batch["next_obs"]), agent.gamma).numpy()
    agent.run_updates(batch)
    leaves = buffer.tree.leaves(np.arange(buffer.size))
    drawn = np.zeros(buffer.size, bool)
    drawn[batch["indices"]] = True
    last = {i: k for k, i in enumerate(batch["indices"])}  # a transition drawn twice keeps its last error
    for i, k in last.items():
        assert leaves[i] == pytest.approx((abs(q[k] - targets[k]) + 0.01) ** 0.6, rel=1e-5)
    np.testing.assert_array_equal(leaves[~drawn], before[~drawn])


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
