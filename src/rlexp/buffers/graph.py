"""`GraphReplayBuffer`: uniform replay held in TensorFlow variables, stored to and sampled from inside a graph."""
from __future__ import annotations

import numpy as np

from rlexp.buffers.replay import ReplayBuffer


class GraphReplayBuffer(ReplayBuffer):
    """`ReplayBuffer` held in TensorFlow variables, so that a graph loop stores and samples with TF ops
    (`graph_add`, `graph_sample`) instead of calling back into Python. The NumPy API (`add`, `sample`,
    `state_dict`) works on the same variables. Off-policy agents swap their `ReplayBuffer` for one when
    they step a `GraphVectorEnv`.
    """

    def __init__(self, max_size: int = 10000, initial_size: int | None = None, batch_size: int = 32) -> None:
        import tensorflow as tf

        self._counters = tf.Variable([0, 0], dtype=tf.int64, name="replay_size_index")  # size, index
        super().__init__(max_size, initial_size, batch_size)

    @classmethod
    def like(cls, buffer: ReplayBuffer) -> GraphReplayBuffer:
        """An empty graph buffer with `buffer`'s sizes."""
        return cls(buffer.max_size, buffer.initial_size, buffer.batch_size)

    size = property(lambda self: int(self._counters[0]), lambda self, n: self._counters[0].assign(n))
    index = property(lambda self: int(self._counters[1]), lambda self, i: self._counters[1].assign(i))

    def _allocate(self, **example: np.ndarray) -> None:
        import tensorflow as tf

        self.data = {k: tf.Variable(tf.zeros((self.max_size, *v.shape[1:]), v.dtype), name=f"replay_{k}")
                     for k, v in example.items()}

    def add(self, obs, actions, rewards, next_obs, terminated, dones=None) -> None:
        import tensorflow as tf

        batch = dict(obs=obs, actions=actions, rewards=rewards, next_obs=next_obs, terminated=terminated)
        if not self.data:
            self._allocate(**{k: np.asarray(v, np.float32 if k in ("rewards", "terminated") else None)
                              for k, v in batch.items()})
        self.graph_add(*(tf.convert_to_tensor(v) for v in batch.values()))

    def graph_add(self, obs, actions, rewards, next_obs, terminated) -> None:
        """`add` with tensors (inside a graph too): one transition per env at the next slots."""
        import tensorflow as tf

        batch = dict(obs=obs, actions=actions, rewards=rewards, next_obs=next_obs, terminated=terminated)
        n = int(obs.shape[0])
        size, index = tf.unstack(self._counters.read_value())
        slots = ((index + tf.range(n, dtype=tf.int64)) % self.max_size)[:, None]
        writes = [self.data[k].scatter_nd_update(slots, tf.cast(v, self.data[k].dtype)) for k, v in batch.items()]
        with tf.control_dependencies(writes):
            self._counters.assign(tf.stack([tf.minimum(size + n, self.max_size), (index + n) % self.max_size]))

    def graph_sample(self, rows: int, rng) -> list:
        """[obs, actions, rewards, next_obs, terminated]: `rows` transitions drawn uniformly (with replacement)
        with the `tf.random.Generator` `rng`, inside a graph."""
        import tensorflow as tf

        idx = rng.uniform([rows], 0, self._counters[0], dtype=tf.int64)
        return [tf.gather(self.data[k], idx) for k in ("obs", "actions", "rewards", "next_obs", "terminated")]

    def sample(self, n_batches: int = 1) -> dict[str, np.ndarray]:
        idx = self.rng.integers(0, self.size, n_batches * self.batch_size)
        return {k: v.numpy().take(idx, axis=0) for k, v in self.data.items()}

    def state_dict(self) -> dict[str, np.ndarray]:
        state = {f"data/{k}": v[: self.size].numpy() for k, v in self.data.items()}
        state.update(size=np.int64(self.size), index=np.int64(self.index))
        return state

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        arrays = {k[5:]: v for k, v in state.items() if k.startswith("data/")}
        if arrays:
            self._allocate(**arrays)
            for k, v in arrays.items():
                self.data[k][: len(v)].assign(v)
        self.size, self.index = int(state["size"]), int(state["index"])

    def nbytes_per_transition(self) -> int:
        return int(sum(v.dtype.size * np.prod(v.shape[1:]) for v in self.data.values()))
