"""Replay buffers: wrap-around, initial size, frame sharing."""
import numpy as np
import pytest

from rlexp.buffers import FrameBuffer, GraphReplayBuffer, ReplayBuffer
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
