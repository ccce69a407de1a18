"""Replay of a population: each member's own buffer, sampled with its own generator.

Members step in lockstep, so their buffers hold the same number of transitions at the same slots; what differs is
the transitions and the draws. A sample for `G` gradient steps is laid out update by update, and within an update
member by member (`[G, N * batch_size]` rows), the layout a population's update step takes (member-major rows).
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from rlexp.buffers.graph import GraphReplayBuffer
from rlexp.buffers.replay import ReplayBuffer
from rlexp.checks.memory import Need

KEYS = ("obs", "actions", "rewards", "next_obs", "terminated")


def _interleave(parts: list[np.ndarray], n_batches: int) -> np.ndarray:
    """Members' samples [G * B, ...] each -> [G * N * B, ...]: update g holds every member's g-th batch."""
    stacked = np.stack([p.reshape(n_batches, -1, *p.shape[1:]) for p in parts], axis=1)  # [G, N, B, ...]
    return stacked.reshape(-1, *stacked.shape[3:])


def member_states(buffers: Any) -> dict[str, np.ndarray]:
    return {f"member_{n}/{k}": v for n in range(buffers.count) for k, v in buffers.member_state_dict(n).items()}


def load_member_states(buffers: Any, state: dict[str, np.ndarray]) -> None:
    for n in range(buffers.count):
        prefix = f"member_{n}/"
        buffers.load_member_state_dict(n, {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)})


class MemberReplayBuffers:
    """N `ReplayBuffer`s of the same sizes behind the replay API off-policy agents use: `add` takes the members'
    rows one block after another, `sample` draws each member's batches from its own buffer with its own generator
    (`rngs`, each the generator its single run samples with)."""

    def __init__(self, like: ReplayBuffer, rngs: Sequence[np.random.Generator]) -> None:
        self.max_size, self.initial_size, self.batch_size = like.max_size, like.initial_size, like.batch_size
        self.members = [ReplayBuffer(like.max_size, like.initial_size, like.batch_size) for _ in rngs]
        for buffer, rng in zip(self.members, rngs):
            buffer.rng = rng

    @property
    def count(self) -> int:
        return len(self.members)

    @property
    def size(self) -> int:
        return self.members[0].size

    @property
    def ready(self) -> bool:
        return self.members[0].ready

    def add(self, obs, actions, rewards, next_obs, terminated, dones=None) -> None:
        n = len(obs) // self.count
        for i, buffer in enumerate(self.members):
            rows = slice(i * n, (i + 1) * n)
            buffer.add(obs[rows], actions[rows], rewards[rows], next_obs[rows], terminated[rows])

    def sample(self, n_batches: int = 1) -> dict[str, np.ndarray]:
        samples = [buffer.sample(n_batches) for buffer in self.members]
        return {k: _interleave([s[k] for s in samples], n_batches) for k in samples[0]}

    def member_state_dict(self, member: int) -> dict[str, np.ndarray]:
        """Member `member`'s buffer as its single run's checkpoint holds it."""
        return self.members[member].state_dict()

    def state_dict(self) -> dict[str, np.ndarray]:
        """Every member's `member_state_dict`, its keys prefixed `member_<n>/` (a member's checkpoint holds its own)."""
        return member_states(self)

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        load_member_states(self, state)

    def load_member_state_dict(self, member: int, state: dict[str, np.ndarray]) -> None:
        self.members[member].load_state_dict(state)

    def memory_need(self, observation_space: Any, action_space: Any, n_envs: int, n_steps: int = 1) -> Need:
        one = self.members[0].memory_need(observation_space, action_space, n_envs // self.count, n_steps)
        return Need(one.what, one.nbytes * self.count, f"{self.count} members x {one.detail}", one.keys, one.fix)


class MemberGraphReplayBuffer(GraphReplayBuffer):
    """`MemberReplayBuffers` in TensorFlow variables ([N, max_size, ...] per column), stored to and sampled from
    inside a graph: each member's indices are drawn by its own generator (`graph_sample`'s `rng`, a
    `MemberGenerators`), as its single run's `GraphReplayBuffer` draws them."""

    def __init__(self, like: MemberReplayBuffers) -> None:
        self.count = like.count
        self.rngs = [buffer.rng for buffer in like.members]
        super().__init__(like.max_size, like.initial_size, like.batch_size)
        for member, buffer in enumerate(like.members):
            self.load_member_state_dict(member, buffer.state_dict())

    def _allocate(self, **example: np.ndarray) -> None:
        import tensorflow as tf

        self.data = {k: tf.Variable(tf.zeros((self.count, self.max_size, *v.shape[1:]), v.dtype), name=f"replay_{k}")
                     for k, v in example.items()}

    def graph_add(self, obs, actions, rewards, next_obs, terminated) -> None:
        """Each member's block of rows at the next slots of its own buffer (the same slots for every member)."""
        import tensorflow as tf

        batch = dict(obs=obs, actions=actions, rewards=rewards, next_obs=next_obs, terminated=terminated)
        n = int(obs.shape[0]) // self.count
        size, index = tf.unstack(self._counters.read_value())
        slots = (index + tf.range(n, dtype=tf.int64)) % self.max_size
        members = tf.range(self.count, dtype=tf.int64)
        where = tf.stack(tf.meshgrid(members, slots, indexing="ij"), axis=-1)  # [N, n, 2]
        writes = []
        for k, v in batch.items():
            rows = tf.reshape(tf.cast(v, self.data[k].dtype), [self.count, n, *v.shape[1:]])
            writes.append(self.data[k].scatter_nd_update(where, rows))
        with tf.control_dependencies(writes):
            self._counters.assign(tf.stack([tf.minimum(size + n, self.max_size), (index + n) % self.max_size]))

    def graph_sample(self, rows: int, rng) -> list:
        """[obs, actions, rewards, next_obs, terminated], `rows` per member drawn by each member's generator, laid
        out [rows / batch_size, N * batch_size] (see the module)."""
        import tensorflow as tf

        idx = tf.reshape(rng.uniform([self.count * rows], 0, self._counters[0], dtype=tf.int64), [self.count, rows])
        batches = rows // self.batch_size
        # (member, slot) pairs in the output's order [batches, N, batch_size]: gathered straight from the
        # variables (a ResourceGatherNd: no read of a whole buffer, which scatter updates make a copy)
        slots = tf.transpose(tf.reshape(idx, [self.count, batches, self.batch_size]), [1, 0, 2])
        members = tf.broadcast_to(tf.range(self.count, dtype=tf.int64)[None, :, None], tf.shape(slots))
        where = tf.reshape(tf.stack([members, slots], axis=-1), [-1, 2])
        return [self.data[k].gather_nd(where) for k in KEYS]

    def sample(self, n_batches: int = 1) -> dict[str, np.ndarray]:
        parts = []
        for member, rng in enumerate(self.rngs):
            idx = rng.integers(0, self.size, n_batches * self.batch_size)
            parts.append({k: v[member].numpy().take(idx, axis=0) for k, v in self.data.items()})
        return {k: _interleave([p[k] for p in parts], n_batches) for k in parts[0]}

    def member_state_dict(self, member: int) -> dict[str, np.ndarray]:
        state = {f"data/{k}": v[member, : self.size].numpy() for k, v in self.data.items()}
        return state | dict(size=np.int64(self.size), index=np.int64(self.index))

    def load_member_state_dict(self, member: int, state: dict[str, np.ndarray]) -> None:
        arrays = {k[5:]: v for k, v in state.items() if k.startswith("data/")}
        if arrays:
            if not self.data:
                self._allocate(**arrays)
            for k, v in arrays.items():
                self.data[k][member, : len(v)].assign(v)
        self.size, self.index = int(state["size"]), int(state["index"])

    def state_dict(self) -> dict[str, np.ndarray]:
        """Every member's `member_state_dict`, its keys prefixed `member_<n>/` (a member's checkpoint holds its own)."""
        return member_states(self)

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        load_member_states(self, state)

    def nbytes_per_transition(self) -> int:
        return int(sum(v.dtype.size * np.prod(v.shape[2:]) for v in self.data.values())) * self.count
