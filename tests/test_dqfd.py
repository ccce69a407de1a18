"""DQfD: the large-margin loss, n-step returns of demonstrations and of the replay, the demonstration share
of each batch, prioritized replay, updates from the first env step, its log lines, and Minari datasets
recorded and checked."""
import gymnasium as gym
import numpy as np
import pytest
import tensorflow as tf

from rlexp.agents import DQfD
from rlexp.agents.dqfd import large_margin_loss
from rlexp.buffers import NStepReplayBuffer, PrioritizedNStepReplayBuffer, PrioritizedReplayBuffer
from rlexp.envs.demos import DemoRecorder, load_demonstrations, n_step_targets
from rlexp.envs.make import make_envs
from rlexp.errors import UserError


def test_large_margin_loss_by_hand():
    q = np.array([[1.0, 2.0, 0.5], [3.0, 1.0, 2.8], [0.0, 0.0, 0.0]], np.float32)
    expert = np.array([0, 0, 2])
    # row 0: max(1, 2.5, 1.0) - 1 = 1.5; row 1: expert leads by more than the margin except action 2:
    # max(3, 1.5, 3.3) - 3 = 0.3; row 2: all equal: the margin itself
    np.testing.assert_allclose(large_margin_loss(q, expert, 0.5).numpy(), [1.5, 0.3, 0.5], rtol=1e-6)
    np.testing.assert_allclose(large_margin_loss(np.array([[5.0, 1.0]], np.float32), np.array([0]), 0.5).numpy(), [0.0])


def test_n_step_targets_by_hand():
    rewards = np.array([1.0, 2.0, 3.0, 4.0])
    next_obs = np.arange(4.0)[:, None] + 10  # 10, 11, 12, 13
    returns, bootstrap, discounts = n_step_targets(rewards, next_obs, np.array([0, 0, 0, 1], bool), 0.5, 2)
    np.testing.assert_allclose(returns, [1 + 0.5 * 2, 2 + 0.5 * 3, 3 + 0.5 * 4, 4])
    np.testing.assert_allclose(bootstrap[:, 0], [11, 12, 13, 13])
    np.testing.assert_allclose(discounts, [0.25, 0.25, 0.0, 0.0])  # the last two reach the termination
    _, _, truncated = n_step_targets(rewards, next_obs, np.zeros(4, bool), 0.5, 2)
    np.testing.assert_allclose(truncated, [0.25, 0.25, 0.25, 0.5])  # a truncated end bootstraps from its final obs


def test_replay_n_step_returns_follow_one_env_and_stop_at_episode_ends():
    buffer = NStepReplayBuffer(max_size=8, initial_size=1, batch_size=1)
    buffer.n, buffer.gamma, buffer.stride = 3, 0.5, 2
    # two envs, four steps: env 0 rewards 1, 2, 3, 4 (episode ends after its 2nd step), env 1 rewards 10..40
    for t in range(4):
        obs = np.array([[t], [100 + t]], np.float32)
        ends = np.array([t == 1, False])
        buffer.add(obs, np.zeros(2, int), np.array([t + 1.0, 10.0 * (t + 1)]), obs + 1, np.array([t == 1, False]), ends)
    out = buffer.n_step(np.array([0, 2, 1, 5, 7]))  # env 0 step 0, step 1, env 1 step 0, step 2, step 3
    np.testing.assert_allclose(out["n_step_returns"], [1 + 0.5 * 2, 2, 10 + 0.5 * 20 + 0.25 * 30, 30 + 0.5 * 40, 40])
    np.testing.assert_allclose(out["n_step_discounts"], [0.0, 0.0, 0.125, 0.25, 0.5])  # terminated / data ends
    np.testing.assert_allclose(out["n_step_obs"][:, 0], [2, 2, 103, 104, 104])


def record_cartpole_demos(directory, episodes=2):
    """Episodes of a hand-written CartPole controller (push towards the side the pole falls to) through the
    recorder, written as a Minari dataset."""
    envs = make_envs("CartPole-v1", n_envs=1, seed=0, vectorization="sync")
    recorder = DemoRecorder()
    obs, _ = envs.reset(seed=0)
    recorder.start(obs)
    while len(recorder.episodes) < episodes:
        actions = (obs[:, 2] + 0.5 * obs[:, 3] > 0).astype(np.int64)
        obs, rewards, terminated, truncated, info = envs.step(actions)
        recorder.step(actions, obs, rewards, terminated, truncated, info)
    return recorder, recorder.write(directory, "CartPole-v1", "controller")


def test_recorded_demonstrations_load_as_transitions(tmp_path):
    recorder, path = record_cartpole_demos(tmp_path)
    assert path == tmp_path / "rlexp" / "demos-v0"
    space = gym.make("CartPole-v1")
    demos = load_demonstrations(tmp_path, "CartPole-v1", space.observation_space, space.action_space, 0.9, 3, 10_000)
    first = recorder.episodes[0]
    T = len(first["actions"])
    assert demos.episodes == 2 and len(demos) == sum(len(e["actions"]) for e in recorder.episodes)
    np.testing.assert_allclose(demos.obs[:T], first["observations"][:-1])
    np.testing.assert_allclose(demos.next_obs[:T], first["observations"][1:])
    np.testing.assert_array_equal(demos.actions[:T], first["actions"])
    assert first["terminations"][-1] or first["truncations"][-1]
    assert demos.terminated[T - 1] == first["terminations"][-1] and demos.terminated[:T - 1].sum() == 0
    assert demos.n_step_returns[0] == pytest.approx(1 + 0.9 + 0.81)
    with pytest.raises(UserError, match="holds demonstrations already"):
        recorder.write(tmp_path, "CartPole-v1", "controller")


def test_wrong_or_missing_demonstrations_are_one_line(tmp_path):
    record_cartpole_demos(tmp_path / "cartpole")
    space = gym.make("Acrobot-v1")
    with pytest.raises(UserError, match="was recorded on CartPole-v1, not Acrobot-v1"):
        load_demonstrations(tmp_path / "cartpole", "Acrobot-v1", space.observation_space, space.action_space, 0.9, 3, 100)
    with pytest.raises(UserError, match="no Minari dataset there"):
        load_demonstrations(tmp_path / "nothing", "CartPole-v1", space.observation_space, space.action_space, 0.9, 3, 1)
    with pytest.raises(UserError, match="agent.demos is not set"):
        DQfD(make_envs("CartPole-v1", n_envs=1, seed=0))


def test_batches_hold_the_demonstration_share_and_pretraining_learns_the_expert(tmp_path):
    record_cartpole_demos(tmp_path, episodes=1)
    buffer = NStepReplayBuffer(max_size=1000, initial_size=40, batch_size=10)
    agent = DQfD(make_envs("CartPole-v1", n_envs=1, seed=0, vectorization="sync"), buffer=buffer, seed=0,
                 demos=str(tmp_path), demo_sampling_ratio=0.3, pretrain_steps=1000, train_freq=40, gradient_steps=2,
                 supervised_weight=1.0, lr=1e-3)
    assert agent.demo_rows == 3

    def supervised():
        return float(tf.reduce_mean(large_margin_loss(agent.model(agent.demos.obs), agent.demos.actions, 0.5)))

    before = supervised()
    agent.train_iteration()  # pre-training only: no env steps
    assert agent.pretrained and agent.steps == 0
    assert supervised() < 0.5 * before  # the demonstrated actions lead the others by more
    agent.train_iteration()  # 40 env steps: the replay is ready
    batch = agent.mixed_batches(2)
    np.testing.assert_array_equal(batch["expert"], [1, 1, 1, 0, 0, 0, 0, 0, 0, 0] * 2)
    assert {"n_step_returns", "n_step_obs", "n_step_discounts"} <= set(batch)
    metrics = agent.learn_from_replay()
    assert set(metrics) == {"loss", "td_loss", "n_step_loss", "supervised_loss"}
    assert all(np.isfinite(v) for v in metrics.values())


def test_resumed_n_step_returns_stop_at_the_restart():
    buffer = NStepReplayBuffer(max_size=8, initial_size=1, batch_size=1)
    buffer.n, buffer.gamma, buffer.stride = 3, 0.5, 1
    for t in range(3):
        buffer.add(np.array([[t]], np.float32), np.zeros(1, int), np.array([1.0]), np.array([[t + 1]], np.float32),
                   np.array([False]), np.array([False]))
    resumed = NStepReplayBuffer(max_size=8, initial_size=1, batch_size=1)
    resumed.n, resumed.gamma, resumed.stride = 3, 0.5, 1
    resumed.load_state_dict(buffer.state_dict())
    resumed.add(np.array([[10]], np.float32), np.zeros(1, int), np.array([5.0]), np.array([[11]], np.float32),
                np.array([False]), np.array([False]))
    out = resumed.n_step(np.array([1, 2]))
    # before the resume: 1 + 0.5 (then the cut), bootstrapping from the last stored next_obs; not 1 + 0.5 + 0.25 * 5
    np.testing.assert_allclose(out["n_step_returns"], [1.5, 1.0])
    np.testing.assert_allclose(out["n_step_obs"][:, 0], [3, 3])
    np.testing.assert_allclose(out["n_step_discounts"], [0.25, 0.5])


@pytest.mark.parametrize("key", ["normalize_obs", "normalize_reward", "clip_rewards"])
def test_dqfd_refuses_normalised_or_clipped_learning_from_raw_demonstrations(key):
    with pytest.raises(UserError, match=f"{key}=true is not supported by DQfD"):
        DQfD(make_envs("CartPole-v1", n_envs=1, seed=0), demos="anywhere", **{key: True})


def small_dqfd(demos, buffer, **kwargs):
    return DQfD(make_envs("CartPole-v1", n_envs=1, seed=0, vectorization="sync"), buffer=buffer, seed=0,
                demos=str(demos), pretrain_steps=50, train_freq=10, gradient_steps=2, **kwargs)


@pytest.mark.parametrize("prioritized", [True, False])
def test_updates_follow_the_first_env_steps_after_pretraining(tmp_path, prioritized):
    """The demonstrations fill the replay: no wait for initial_size (1000) own transitions."""
    record_cartpole_demos(tmp_path, episodes=1)
    cls = PrioritizedNStepReplayBuffer if prioritized else NStepReplayBuffer
    agent = small_dqfd(tmp_path, cls(max_size=2000, initial_size=1000, batch_size=8))
    agent.max_steps = 1000
    agent.train_iteration()  # pre-training
    assert agent.steps == 0 and int(agent.optimizer.iterations) == 50
    agent.train_iteration()
    assert agent.steps == 10 and int(agent.optimizer.iterations) == 52 and agent.first_update_step() == 0
    if prioritized:  # demonstrations and own transitions share the buffer; demonstrations with the bonus
        assert agent.buffer.held == len(agent.demos) + 10 and agent.buffer.offset == len(agent.demos)
        demo_leaves = agent.buffer.tree.leaves(np.arange(len(agent.demos)))
        updated = demo_leaves[demo_leaves != 1.0]  # 1: the initial priority, of those not drawn yet
        assert len(updated) > 50 and updated.min() >= (1.0 + 1e-3) ** 0.4  # |TD error| + eps + demo bonus
        assert set(agent.buffer.sample(200)["expert"]) == {0.0, 1.0}
    else:  # demonstrations only until the replay holds initial_size transitions
        np.testing.assert_array_equal(agent.mixed_batches(2)["expert"], np.ones(16))


def test_dqfd_defaults_to_prioritized_replay(tmp_path):
    agent = DQfD(make_envs("CartPole-v1", n_envs=1, seed=0), demos=str(tmp_path))
    assert type(agent.buffer) is PrioritizedNStepReplayBuffer and agent.prioritized
    with pytest.raises(UserError, match="buffer=dqfd .* or buffer=dqfd_uniform"):
        DQfD(make_envs("CartPole-v1", n_envs=1, seed=0), demos=str(tmp_path), buffer=PrioritizedReplayBuffer())


def test_importance_weights_scale_every_per_row_loss(tmp_path):
    record_cartpole_demos(tmp_path, episodes=1)
    agent = small_dqfd(tmp_path, NStepReplayBuffer(max_size=100, batch_size=8), l2_weight=0.0)
    batch = {k: tf.constant(v) for k, v in agent.demo_batch(8).items()}
    _, plain = agent.dqfd_loss(batch)
    _, doubled = agent.dqfd_loss(batch | {"weights": tf.fill([8], 2.0)})
    for key in ("td_loss", "n_step_loss", "supervised_loss", "loss"):
        assert float(doubled[key]) == pytest.approx(2 * float(plain[key]), rel=1e-6), key
    np.testing.assert_allclose(doubled["td_errors"].numpy(), plain["td_errors"].numpy())


def test_pretraining_draws_each_batch_once_the_previous_ones_priorities_are_set(tmp_path):
    record_cartpole_demos(tmp_path, episodes=1)
    buffer = PrioritizedNStepReplayBuffer(max_size=100, batch_size=8)
    agent = small_dqfd(tmp_path, buffer)  # 50 pre-training steps between two target syncs (every 1,000)
    events = []
    sample, update = buffer.sample, buffer.update_priorities
    buffer.sample = lambda n_batches=1, beta=None: events.append(("sample", n_batches)) or sample(n_batches, beta)
    buffer.update_priorities = lambda idx, errors: events.append(("update", len(idx))) or update(idx, errors)
    agent.train_iteration()
    assert events == [("sample", 1), ("update", 8)] * 50


def test_pretraining_and_the_loaded_demonstrations_are_logged(tmp_path, caplog):
    import logging

    record_cartpole_demos(tmp_path, episodes=2)
    agent = small_dqfd(tmp_path, PrioritizedNStepReplayBuffer(max_size=100, batch_size=8))
    with caplog.at_level(logging.INFO, logger="rlexp"):
        metrics = agent.train_iteration()
    lines = [r.getMessage() for r in caplog.records]
    n = len(agent.demos)
    assert f"demonstrations: {n:,} transitions of 2 episode(s) from {tmp_path} (demo_memory_capacity=10,000)" in lines
    (pretraining,) = [line for line in lines if line.startswith("pre-training:")]
    assert pretraining == (f"pre-training: 50 gradient steps on the demonstrations; loss {metrics['loss']:.4g} "
                           f"(supervised {metrics['supervised_loss']:.4g}), mean of the last 50")


def test_a_resumed_prioritized_run_keeps_the_priorities_of_demonstrations_and_own_transitions(tmp_path):
    record_cartpole_demos(tmp_path / "demos", episodes=1)
    agent = small_dqfd(tmp_path / "demos", PrioritizedNStepReplayBuffer(max_size=2000, batch_size=8))
    agent.max_steps = 1000
    agent.train_iteration(), agent.train_iteration()
    agent.save(tmp_path / "last.ckpt")
    held, saved = agent.buffer.held, agent.buffer.tree.leaves(np.arange(agent.buffer.held))
    assert len(np.unique(saved)) > 50
    resumed = small_dqfd(tmp_path / "demos", PrioritizedNStepReplayBuffer(max_size=2000, batch_size=8))
    resumed.load(tmp_path / "last.ckpt")
    assert resumed.pretrained and resumed.buffer.size == 10 and resumed.buffer.held == 10  # demonstrations: later
    assert len(resumed.demos) == len(agent.demos)  # loaded (by a resumed run's first update phase)
    assert resumed.buffer.held == held and resumed.buffer.max_priority == agent.buffer.max_priority
    np.testing.assert_array_equal(resumed.buffer.tree.leaves(np.arange(held)), saved)
    resumed.max_steps = 1000
    resumed.train_iteration()
    assert resumed.steps == 20 and int(resumed.optimizer.iterations) == 54
