"""Replay buffers: wrap-around, initial size, frame sharing, prioritized replay."""
import numpy as np
import pytest
from scipy.stats import chisquare

from rlexp.buffers import (FrameBuffer, GraphReplayBuffer, PrioritizedNStepReplayBuffer, PrioritizedReplayBuffer,
                           ReplayBuffer, SumTree)
from rlexp.errors import UserError


def add_n(buffer, start, n):
    for i in range(start, start + n):
        x = np.array([[i]], np.float32)
        buffer.add(x, np.array([i]), np.array([float(i)]), x + 1, np.array([False]))


@pytest.mark.parametrize("cls", [ReplayBuffer, GraphReplayBuffer])
def test_ring_overwrites_oldest_when_full(cls):
    buffer = cls(max_size=5, initial_size=3, batch_size=2)
    add_n(buffer, 0, 2)
    assert not buffer.ready
    add_n(buffer, 2, 1)
    assert buffer.ready
    add_n(buffer, 3, 5)  # 8 written into 5 slots: 0, 1, 2 are gone
    assert buffer.size == 5
    assert sorted(np.asarray(buffer.data["actions"]).ravel().tolist()) == [3, 4, 5, 6, 7]
    sample = buffer.sample(50)
    assert sample["obs"].shape == (100, 1) and set(sample["actions"].ravel()) <= {3, 4, 5, 6, 7}
    np.testing.assert_array_equal(sample["next_obs"][:, 0], sample["obs"][:, 0] + 1)


def test_sizes_are_checked():
    with pytest.raises(UserError, match="initial_size"):
        ReplayBuffer(max_size=10, initial_size=20, batch_size=2)
    with pytest.raises(UserError, match="batch_size"):
        ReplayBuffer(max_size=10, batch_size=20)
    with pytest.raises(UserError, match="initial_size=-1 must be at least 0"):
        ReplayBuffer(max_size=10, initial_size=-1, batch_size=2)


def test_initial_size_below_batch_size_is_learning_starts():
    """SB3's learning_starts=100 with batches of 256: ready at 100 transitions, batches drawn with replacement."""
    buffer = ReplayBuffer(max_size=1000, initial_size=100, batch_size=256)
    add_n(buffer, 0, 99)
    assert buffer.initial_size == 100 and not buffer.ready
    add_n(buffer, 99, 1)
    assert buffer.ready and buffer.sample()["obs"].shape == (256, 1)
    assert ReplayBuffer(max_size=1000, batch_size=32).initial_size == 32  # null: one batch
    assert ReplayBuffer(max_size=1000, initial_size=0, batch_size=32).initial_size == 1


def test_sum_tree_sampling_frequencies_match_the_leaves():
    values = np.array([1.0, 2.0, 0.5, 4.0, 0.0, 3.0, 1.5])  # 7 leaves: a padded tree of 8
    tree = SumTree(7)
    tree.update(np.arange(7), np.ones(7))
    tree.update(np.arange(7), values)
    assert tree.total == pytest.approx(12.0) and tree.min == 0.0
    np.testing.assert_array_equal(tree.find(np.array([0.0, 0.99, 1.0, 3.49, 3.5, 7.49, 7.5, 11.99])),
                                  [0, 0, 1, 2, 3, 3, 5, 6])
    draws = tree.find(np.random.default_rng(0).random(120_000) * tree.total)
    counts = np.bincount(draws, minlength=7)
    assert counts[4] == 0
    keep = values > 0
    assert chisquare(counts[keep], 120_000 * values[keep] / values.sum()).pvalue > 1e-3


def test_sum_tree_nodes_hold_the_sums_and_minima_of_their_leaves_after_updates_with_repeats():
    rng = np.random.default_rng(0)
    tree, leaves = SumTree(37), np.zeros(64)  # 37 leaves: a padded tree of 64
    leaves[37:] = np.inf  # padding: never the minimum, as an empty leaf
    for _ in range(50):
        idx = rng.integers(0, 37, 16)  # repeats: the last value of an index stays
        values = rng.random(16)
        tree.update(idx, values)
        for i, value in zip(idx, values):  # in order: a repeated index keeps its last value
            leaves[i] = value
    for level in range(7):  # level 0: the root, a single range of 64 leaves; level 6: the leaves
        ranges = leaves.reshape(2**level, -1)
        sums = np.where(np.isinf(ranges), 0.0, ranges).sum(axis=1)
        np.testing.assert_allclose(tree.sums[2**level:2 ** (level + 1)], sums, rtol=1e-12)
        np.testing.assert_array_equal(tree.mins[2**level:2 ** (level + 1)], ranges.min(axis=1))


def test_prioritized_sampling_follows_priorities_to_the_alpha():
    buffer = PrioritizedReplayBuffer(max_size=8, batch_size=5, alpha=0.5, priority_eps=1.0)
    buffer.rng = np.random.default_rng(1)
    add_n(buffer, 0, 6)
    errors = np.array([0.0, 3.0, 8.0, 1.0, 15.0, 0.0])  # p = 1, 4, 9, 2, 16, 1; p^0.5 = 1, 2, 3, sqrt(2), 4, 1
    buffer.update_priorities(np.arange(6), errors)
    counts = np.zeros(6)
    for _ in range(40):
        counts += np.bincount(buffer.sample(200)["indices"], minlength=6)
    expected = np.array([1, 2, 3, np.sqrt(2), 4, 1])
    assert chisquare(counts, counts.sum() * expected / expected.sum()).pvalue > 1e-3


def test_importance_sampling_weights_by_hand():
    buffer = PrioritizedReplayBuffer(max_size=4, batch_size=4, alpha=1.0, priority_eps=0.5)
    add_n(buffer, 0, 4)
    buffer.update_priorities(np.arange(4), np.array([0.5, -1.5, 3.5, 0.5]))  # p = 1, 2, 4, 1; P = 1/8, 2/8, 4/8, 1/8
    # N P = 0.5, 1, 2, 0.5; (N P)^-0.5 = sqrt(2), 1, 1/sqrt(2), sqrt(2); divided by the largest, sqrt(2):
    expected = {0: 1.0, 1: 1 / np.sqrt(2), 2: 0.5, 3: 1.0}
    batch = buffer.sample(50, beta=0.5)
    for i, w in zip(batch["indices"], batch["weights"]):
        assert w == pytest.approx(expected[i], rel=1e-6)
    np.testing.assert_array_equal(batch["actions"].ravel(), batch["indices"])  # rows are the drawn transitions
    assert set(batch["indices"]) == {0, 1, 2, 3}
    ones = buffer.sample(3, beta=0.0)["weights"]
    np.testing.assert_array_equal(ones, np.ones(12, np.float32))


def test_priorities_update_to_the_td_error_plus_eps_and_new_transitions_get_the_largest():
    buffer = PrioritizedReplayBuffer(max_size=4, batch_size=2, alpha=1.0, priority_eps=0.01)
    add_n(buffer, 0, 3)
    np.testing.assert_array_equal(buffer.tree.leaves(np.arange(3)), [1.0, 1.0, 1.0])  # 1: nothing learned yet
    buffer.update_priorities(np.array([0, 2, 0]), np.array([0.3, -2.5, 0.7]))  # a repeated index: the last error
    np.testing.assert_allclose(buffer.tree.leaves(np.arange(3)), [0.71, 1.0, 2.51])
    add_n(buffer, 3, 2)  # the 5th overwrites slot 0
    np.testing.assert_allclose(buffer.tree.leaves(np.arange(4)), [2.51, 1.0, 2.51, 2.51])
    assert buffer.tree.total == pytest.approx(8.53)
    add_n(buffer, 5, 1)  # slot 1, stored before a larger priority comes in: keeps the largest of its time
    buffer.update_priorities(np.array([2]), np.array([4.0]))
    np.testing.assert_allclose(buffer.tree.leaves(np.arange(4)), [2.51, 2.51, 4.01, 2.51])


def test_demonstrations_get_the_demo_bonus_and_stay_for_good():
    from rlexp.envs.demos import Demonstrations

    demos = Demonstrations(obs=np.full((2, 1), -1.0, np.float32), actions=np.array([7, 8]),
                           rewards=np.ones(2, np.float32), next_obs=np.zeros((2, 1), np.float32),
                           terminated=np.zeros(2, np.float32), n_step_returns=np.ones(2, np.float32),
                           n_step_obs=np.zeros((2, 1), np.float32), n_step_discounts=np.ones(2, np.float32), episodes=1)
    buffer = PrioritizedNStepReplayBuffer(max_size=3, batch_size=3, alpha=1.0, priority_eps=0.001, demo_bonus=1.0)
    buffer.attach_demonstrations(demos)
    add_n(buffer, 0, 5)  # a ring of 3: the demonstrations are never overwritten
    assert buffer.held == 5 and buffer.offset == 2
    buffer.update_priorities(np.array([0, 1, 2, 3, 4]), np.array([0.5, 0.0, 0.5, 2.0, 0.0]))
    np.testing.assert_allclose(buffer.tree.leaves(np.arange(5)), [1.501, 1.001, 0.501, 2.001, 0.001])
    batch = buffer.sample(30)
    expert = batch["indices"] < 2
    np.testing.assert_array_equal(batch["expert"], expert.astype(np.float32))
    np.testing.assert_array_equal(batch["actions"][expert], np.where(batch["indices"][expert] == 0, 7, 8))
    # ring slots 0, 1, 2 hold the transitions 3, 4, 2
    np.testing.assert_array_equal(batch["actions"][~expert], np.array([3, 4, 2])[batch["indices"][~expert] - 2])
    assert {"n_step_returns", "n_step_obs", "n_step_discounts", "weights"} <= set(batch)


def test_beta_anneals_linearly_to_one():
    buffer = PrioritizedReplayBuffer(max_size=4, batch_size=1, beta=0.4)
    assert [buffer.beta_at(s, 1000) for s in (0, 500, 1000, 5000)] == pytest.approx([0.4, 0.7, 1.0, 1.0])
    assert PrioritizedReplayBuffer(max_size=4, batch_size=1, beta=0.6, beta_steps=100).beta_at(50, 1000) == \
        pytest.approx(0.8)
    with pytest.raises(UserError, match="buffer.beta=1.5 must be in"):
        PrioritizedReplayBuffer(beta=1.5)


def test_prioritized_state_roundtrip_keeps_the_priorities():
    buffer = PrioritizedReplayBuffer(max_size=4, batch_size=2, alpha=1.0, priority_eps=0.5)
    add_n(buffer, 0, 6)
    buffer.update_priorities(np.arange(4), np.array([0.5, 1.5, 2.5, 3.5]))
    other = PrioritizedReplayBuffer(max_size=4, batch_size=2, alpha=1.0, priority_eps=0.5)
    other.load_state_dict(buffer.state_dict())
    np.testing.assert_array_equal(other.tree.leaves(np.arange(4)), [1.0, 2.0, 3.0, 4.0])
    assert other.max_priority == 4.0 and other.tree.total == 10.0
    plain = PrioritizedReplayBuffer(max_size=4, batch_size=2)
    plain.load_state_dict(ReplayBuffer(max_size=4, batch_size=2).state_dict() | {"size": np.int64(0)})
    assert plain.tree.total == 0.0


@pytest.mark.parametrize("cls, other_cls", [(ReplayBuffer, ReplayBuffer), (GraphReplayBuffer, GraphReplayBuffer),
                                            (ReplayBuffer, GraphReplayBuffer), (GraphReplayBuffer, ReplayBuffer)])
def test_state_roundtrip(cls, other_cls):
    buffer = cls(max_size=4, batch_size=1)
    add_n(buffer, 0, 6)
    other = other_cls(max_size=4, batch_size=1)
    other.load_state_dict(buffer.state_dict())
    assert other.size == 4 and other.index == buffer.index
    np.testing.assert_array_equal(np.asarray(other.data["obs"]), np.asarray(buffer.data["obs"]))
    assert other.nbytes_per_transition() == buffer.nbytes_per_transition() == 4 * 4 + 8


def test_graph_buffer_stores_and_samples_in_a_graph_like_the_numpy_one():
    import tensorflow as tf

    graph, numpy = GraphReplayBuffer(max_size=7, batch_size=4), ReplayBuffer(max_size=7, batch_size=4)
    rng = np.random.default_rng(0)
    steps = [[rng.normal(size=(2, 3)).astype(np.float32), rng.normal(size=(2, 1)).astype(np.float32),
              rng.normal(size=2).astype(np.float32), rng.normal(size=(2, 3)).astype(np.float32),
              rng.random(2) < 0.5] for _ in range(6)]  # 12 transitions of 2 envs: wraps around 7 slots
    graph.add(*steps[0])
    numpy.add(*steps[0])
    tf_rng = tf.random.Generator.from_seed(0)

    @tf.function(autograph=False)
    def add_and_sample(*step):
        graph.graph_add(*step)
        return graph.graph_sample(8, tf_rng)

    for step in steps[1:]:
        batch = add_and_sample(*step)
        numpy.add(*step)
        held = {tuple(row) for row in numpy.data["obs"][: numpy.size]}
        assert {tuple(row) for row in batch[0].numpy()} <= held and batch[4].dtype == tf.float32
    assert (graph.size, graph.index) == (numpy.size, numpy.index) == (7, 5)
    for key, value in numpy.data.items():
        np.testing.assert_array_equal(graph.data[key].numpy(), value, err_msg=key)


class FakeStackedEnv:
    """Produces stacked frames like FrameStackObservation(padding 'reset'): frame value = global counter."""

    def __init__(self, n_envs, stack, rng):
        self.n, self.stack, self.rng, self.counter = n_envs, stack, rng, 0
        self.stacks = [self._reset() for _ in range(n_envs)]

    def _frame(self):
        self.counter += 1
        return np.full((3, 3), self.counter % 251, np.uint8)

    def _reset(self):
        f = self._frame()
        return [f] * self.stack

    def step(self):
        obs = np.stack([np.stack(s) for s in self.stacks])
        next_obs, terminated, dones = [], [], []
        for e in range(self.n):
            self.stacks[e] = self.stacks[e][1:] + [self._frame()]
            next_obs.append(np.stack(self.stacks[e]))
            done = self.rng.random() < 0.15
            terminated.append(done and self.rng.random() < 0.5)
            dones.append(done)
            if done:
                self.stacks[e] = self._reset()
        return obs, np.stack(next_obs), np.array(terminated), np.array(dones)


@pytest.mark.parametrize("n_envs", [1, 3])
def test_frame_buffer_rebuilds_the_exact_stacks(n_envs):
    rng = np.random.default_rng(0)
    env = FakeStackedEnv(n_envs, 4, rng)
    buffer = FrameBuffer(max_size=60, batch_size=16)
    buffer.rng = np.random.default_rng(1)
    seen = {}
    for t in range(200):  # several wrap-arounds
        obs, next_obs, terminated, dones = env.step()
        actions = np.arange(n_envs) + 10 * t
        buffer.add(obs, actions, actions.astype(np.float32), next_obs, terminated, dones)
        for e in range(n_envs):
            seen[int(actions[e])] = (obs[e], next_obs[e], float(terminated[e]))
    batch = buffer.sample(8)
    assert batch["obs"].shape == (128, 4, 3, 3)
    for i, a in enumerate(batch["actions"]):
        obs, next_obs, term = seen[int(a)]
        np.testing.assert_array_equal(batch["obs"][i], obs)
        np.testing.assert_array_equal(batch["next_obs"][i], next_obs)
        assert batch["terminated"][i] == term
    # each frame stored once: ~9 bytes of pixels per transition, not 2 * 4 * 9
    assert buffer.frames.nbytes <= 9 * (60 + 2 * n_envs)


def test_frame_buffer_state_roundtrip():
    rng = np.random.default_rng(0)
    env = FakeStackedEnv(2, 4, rng)
    buffer = FrameBuffer(max_size=40, batch_size=4)
    for t in range(30):
        obs, next_obs, terminated, dones = env.step()
        buffer.add(obs, np.array([t, t]), np.zeros(2, np.float32), next_obs, terminated, dones)
    other = FrameBuffer(max_size=40, batch_size=4)
    other.load_state_dict(buffer.state_dict())
    buffer.rng, other.rng = np.random.default_rng(5), np.random.default_rng(5)
    a, b = buffer.sample(2), other.sample(2)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
