"""Replay buffers for off-policy agents: a general ring buffer, prioritized replay on a sum-tree, and a
frame-efficient one for Atari."""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from rlexp.errors import UserError
from rlexp.memory import Need, human, space_bytes


def _check_sizes(max_size: int, initial_size: int | None, batch_size: int) -> tuple[int, int, int]:
    """(max_size, transitions needed before `ready`, batch_size) as ints; the second is `initial_size` (None:
    batch_size), at least 1. A smaller initial_size than batch_size is SB3's learning_starts: batches are drawn
    with replacement from what is held."""
    from rlexp.checks import whole

    max_size, batch_size = whole("buffer.max_size", max_size, 1), whole("buffer.batch_size", batch_size, 1)
    initial = batch_size if initial_size is None else whole("buffer.initial_size", initial_size, 0)
    if batch_size > max_size:
        raise UserError(f"buffer.batch_size={batch_size} is greater than buffer.max_size={max_size}")
    if initial > max_size:
        raise UserError(f"buffer.initial_size={initial} is greater than buffer.max_size={max_size}; "
                        "lower initial_size or raise max_size")
    return max_size, max(initial, 1), batch_size


class ReplayBuffer:
    """Uniform replay over a numpy ring: the oldest transition is overwritten when full.

    Args:
        max_size: transitions kept.
        initial_size: transitions needed before `ready` (None: batch_size).
        batch_size: transitions per sampled batch.
    """

    def __init__(self, max_size: int = 10000, initial_size: int | None = None, batch_size: int = 32) -> None:
        self.max_size, self.initial_size, self.batch_size = _check_sizes(max_size, initial_size, batch_size)
        self.size = 0  # transitions held
        self.index = 0  # next slot to write
        self.rng = np.random.default_rng()
        self.data: dict[str, np.ndarray] = {}

    def _allocate(self, **example: np.ndarray) -> None:
        # np.zeros is lazily committed by the OS: memory grows as the buffer fills
        self.data = {k: np.zeros((self.max_size, *v.shape[1:]), v.dtype) for k, v in example.items()}

    @property
    def ready(self) -> bool:
        return self.size >= self.initial_size

    def add(self, obs: np.ndarray, actions: np.ndarray, rewards: np.ndarray, next_obs: np.ndarray,
            terminated: np.ndarray, dones: np.ndarray | None = None) -> None:
        """Store a batch of transitions (one per env). `next_obs` is the final observation at episode ends."""
        self._store(dict(obs=obs, actions=actions, rewards=rewards, next_obs=next_obs, terminated=terminated))

    def _store(self, batch: dict[str, np.ndarray]) -> None:
        obs, rewards, terminated = batch["obs"], batch["rewards"], batch["terminated"]
        if not self.data:
            self._allocate(**batch | dict(rewards=rewards.astype(np.float32), terminated=terminated.astype(np.float32)))
        n, start = len(obs), self.index
        # contiguous slots take slice writes, ~3x cheaper than fancy indexing (writes cast to the stored dtypes)
        slots = slice(start, start + n) if start + n <= self.max_size else (start + np.arange(n)) % self.max_size
        for key, value in batch.items():
            self.data[key][slots] = value
        self.index = int((self.index + n) % self.max_size)
        self.size = min(self.size + n, self.max_size)

    def sample(self, n_batches: int = 1) -> dict[str, np.ndarray]:
        """`n_batches * batch_size` transitions drawn uniformly (with replacement)."""
        idx = self.rng.integers(0, self.size, n_batches * self.batch_size)
        return {k: v.take(idx, axis=0) for k, v in self.data.items()}  # take: ~1.6x cheaper than v[idx]

    def state_dict(self) -> dict[str, np.ndarray]:
        state = {f"data/{k}": v[: self.size] for k, v in self.data.items()}
        state.update(size=np.int64(self.size), index=np.int64(self.index))
        return state

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        self.size, self.index = int(state["size"]), int(state["index"])
        arrays = {k[5:]: v for k, v in state.items() if k.startswith("data/")}
        if arrays:
            self._allocate(**arrays)
            for k, v in arrays.items():
                self.data[k][: len(v)] = v

    def nbytes_per_transition(self) -> int:
        return int(sum(v[0].nbytes for v in self.data.values()))

    EXTRA_BYTES = 8  # per transition besides observations and action: reward and terminated (float32)

    def memory_need(self, observation_space: Any, action_space: Any, n_envs: int, n_steps: int = 1) -> Need:
        """The replay storage `max_size` transitions will take (observation and next observation, action,
        reward, flags), estimated before it is allocated."""
        if n_envs > self.max_size:
            raise UserError(f"buffer.max_size={self.max_size} holds fewer transitions than one step of env.n_envs="
                            f"{n_envs} envs stores; raise buffer.max_size or lower env.n_envs")
        per = 2 * space_bytes(observation_space) + space_bytes(action_space) + self.EXTRA_BYTES
        return Need("replay storage", self.max_size * per, f"{self.max_size:,} transitions x {per} bytes",
                    f"buffer.max_size={self.max_size}", "buffer.max_size")


class NStepReplayBuffer(ReplayBuffer):
    """`ReplayBuffer` that also keeps where episodes end, and samples with n-step returns (DQfD): set `n`,
    `gamma` and `stride` (the number of envs: transitions of one env are that many slots apart) first."""

    n, gamma, stride = 1, 0.99, 1
    EXTRA_BYTES = 12  # reward, terminated and episode end (float32)

    def add(self, obs, actions, rewards, next_obs, terminated, dones=None) -> None:
        dones = terminated if dones is None else dones
        self._store(dict(obs=obs, actions=actions, rewards=rewards, next_obs=next_obs, terminated=terminated,
                         dones=np.asarray(dones, np.float32)))

    def sample(self, n_batches: int = 1) -> dict[str, np.ndarray]:
        idx = self.rng.integers(0, self.size, n_batches * self.batch_size)
        return {k: v.take(idx, axis=0) for k, v in self.data.items()} | self.n_step(idx)

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """As `ReplayBuffer`'s; each env's newest transition becomes an episode end (a resume restarts the
        envs), so n-step returns don't run on into the new episodes. Set `stride` first."""
        super().load_state_dict(state)
        if self.size and "dones" in self.data:
            newest = (self.index - 1 - np.arange(min(self.stride, self.size))) % self.max_size
            self.data["dones"][newest] = 1.0

    def n_step(self, idx: np.ndarray) -> dict[str, np.ndarray]:
        """For the transitions at `idx`: the return of up to n steps of the same env, stopping at an episode
        end, a termination (also a lost life, with env.life_loss_terminal) or the newest transition, the
        observation after them and the bootstrap discount (gamma^m, 0 after a termination)."""
        data, stride, n, gamma = self.data, self.stride, self.n, self.gamma
        age = (self.index - 1 - idx) % self.max_size  # 0: the newest transition
        returns, taken = np.zeros(len(idx)), np.zeros(len(idx), int)
        last, alive = idx.copy(), np.ones(len(idx), bool)
        for k in range(n):
            slot = (idx + k * stride) % self.max_size
            valid = alive & (age >= k * stride)
            returns += np.where(valid, gamma**k * data["rewards"][slot], 0.0)
            last, taken = np.where(valid, slot, last), taken + valid
            alive = valid & (data["dones"][slot] == 0) & (data["terminated"][slot] == 0)
        discounts = np.where(data["terminated"][last] > 0, 0.0, gamma**taken)
        return dict(n_step_returns=returns.astype(np.float32), n_step_obs=data["next_obs"][last],
                    n_step_discounts=discounts.astype(np.float32))


class SumTree:
    """Sums and minima of leaf values in two binary trees stored as arrays (node i's children are 2i and
    2i + 1; leaf j is node `first_leaf + j`), updated and searched for many leaves at once with NumPy."""

    def __init__(self, capacity: int) -> None:
        self.capacity = int(capacity)
        self.depth = max(self.capacity - 1, 0).bit_length()
        self.first_leaf = 1 << self.depth
        self.sums = np.zeros(2 * self.first_leaf)
        self.mins = np.full(2 * self.first_leaf, np.inf)  # an empty leaf never is the minimum

    @property
    def total(self) -> float:
        return float(self.sums[1])

    @property
    def min(self) -> float:
        return float(self.mins[1])

    def leaves(self, idx: np.ndarray) -> np.ndarray:
        return self.sums[self.first_leaf + np.asarray(idx, np.int64)]

    def update(self, idx: np.ndarray, values: np.ndarray) -> None:
        """Set leaves `idx` to `values` (a repeated index takes its last value), then their ancestors (a
        parent shared by several is written as often, with the same value: cheaper than deduplicating)."""
        sums, mins = self.sums, self.mins
        nodes = self.first_leaf + np.asarray(idx, np.int64)
        sums[nodes] = values
        mins[nodes] = values
        for _ in range(self.depth):
            left = nodes & -2
            right, nodes = left + 1, nodes >> 1
            sums[nodes] = sums[left] + sums[right]
            mins[nodes] = np.minimum(mins[left], mins[right])

    def find(self, masses: np.ndarray) -> np.ndarray:
        """For each mass in [0, total): the leaf j with sum(leaves < j) <= mass < sum(leaves <= j)."""
        nodes = np.ones(len(masses), np.int64)
        masses = np.asarray(masses, np.float64)
        for _ in range(self.depth):
            left = 2 * nodes
            left_sums = self.sums[left]
            right = masses >= left_sums
            masses = np.where(right, masses - left_sums, masses)
            nodes = left + right
        return nodes - self.first_leaf


class PrioritizedReplayBuffer(ReplayBuffer):
    """Proportional prioritized replay (Schaul et al. 2016) over the ring. Transition i is drawn with
    probability P(i) = p_i^alpha / sum_k p_k^alpha, p_i = |TD error| + priority_eps from its last update (new
    transitions: the largest priority so far), and comes with the importance-sampling weight
    w_i = (N P(i))^-beta / max_k (N P(k))^-beta (N: transitions held), which the agent multiplies into its
    per-sample loss. beta grows linearly to 1 over `beta_steps` env steps. Each batch is stratified: one draw
    from each of batch_size equal slices of the total priority.

    Args (besides `ReplayBuffer`'s):
        alpha: priority exponent (0: uniform).
        beta: importance-sampling exponent at the first step, annealed to 1.
        beta_steps: env steps over which beta reaches 1 (None: the run's max_steps).
        priority_eps: added to |TD error|, so that every transition can be drawn.
    """

    def __init__(self, max_size: int = 10000, initial_size: int | None = None, batch_size: int = 32,
                 alpha: float = 0.6, beta: float = 0.4, beta_steps: int | None = None,
                 priority_eps: float = 1e-6) -> None:
        super().__init__(max_size, initial_size, batch_size)
        if float(alpha) < 0:
            raise UserError(f"buffer.alpha={alpha} must be at least 0 (0: uniform replay)")
        if not 0 <= float(beta) <= 1:
            raise UserError(f"buffer.beta={beta} must be in [0, 1]")
        if beta_steps is not None and float(beta_steps) < 1:
            raise UserError(f"buffer.beta_steps={beta_steps} must be at least 1 (or null: run.max_steps)")
        if not float(priority_eps) > 0:
            raise UserError(f"buffer.priority_eps={priority_eps} must be positive")
        self.alpha, self.beta, self.priority_eps = float(alpha), float(beta), float(priority_eps)
        self.beta_steps = None if beta_steps is None else int(float(beta_steps))
        self.offset = 0  # leaves before the ring's (DQfD's demonstrations)
        self.max_priority = 1.0
        self._tree = SumTree(self.max_size)
        self._new: list[tuple[int, int]] = []  # (first slot, count) of each store not yet in the tree
        self._pending_head: np.ndarray | None = None  # loaded priorities of the leaves before the ring

    @property
    def tree(self) -> SumTree:
        """The priorities^alpha, the transitions stored since the last access included (set in one batch:
        a tree update per env step would cost more than the step)."""
        if self._new:
            slots = np.concatenate([(start + np.arange(n)) % self.max_size for start, n in self._new])
            self._new = []
            self._tree.update(self.offset + slots, np.full(len(slots), self.max_priority**self.alpha))
        return self._tree

    def memory_need(self, observation_space: Any, action_space: Any, n_envs: int, n_steps: int = 1) -> Need:
        """The ring's storage plus the sum and min trees (two float64 arrays of twice the leaves, a power of 2)."""
        need = super().memory_need(observation_space, action_space, n_envs, n_steps)
        tree = 32 << max(self.max_size - 1, 0).bit_length()
        return dataclasses.replace(need, nbytes=need.nbytes + tree, detail=f"{need.detail} + priorities {human(tree)}")

    @property
    def held(self) -> int:
        """Transitions that can be drawn (N)."""
        return self.offset + self.size

    def beta_at(self, steps: int, max_steps: int) -> float:
        """beta after `steps` env steps of a run of `max_steps` (or `beta_steps`): linear from `beta` to 1."""
        horizon = max(self.beta_steps or max_steps, 1)
        return self.beta + (1.0 - self.beta) * min(steps / horizon, 1.0)

    def _store(self, batch: dict[str, np.ndarray]) -> None:
        self._new.append((self.index, len(batch["obs"])))
        super()._store(batch)

    def sample_leaves(self, n_batches: int = 1) -> np.ndarray:
        """Leaves drawn in proportion to their values, stratified within each batch."""
        size = self.batch_size
        masses = (np.arange(size) + self.rng.random((n_batches, size))) * (self.tree.total / size)
        return np.minimum(self.tree.find(masses.ravel()), self.held - 1)  # rounding at the very end of the total

    def sample(self, n_batches: int = 1, beta: float | None = None) -> dict[str, np.ndarray]:
        """`n_batches * batch_size` transitions drawn in proportion to their priorities, with their `indices`
        (for `update_priorities`) and importance-sampling `weights` (with `beta`, None: the initial one)."""
        leaves = self.sample_leaves(n_batches)
        beta = self.beta if beta is None else float(beta)
        weights = (self.tree.min / self.tree.leaves(leaves)) ** beta  # (N P(i))^-beta / max_k (N P(k))^-beta
        return self.rows(leaves) | dict(indices=leaves, weights=weights.astype(np.float32))

    def rows(self, leaves: np.ndarray) -> dict[str, np.ndarray]:
        """The stored transitions at `leaves`."""
        return {k: v.take(leaves - self.offset, axis=0) for k, v in self.data.items()}

    def bonus(self, indices: np.ndarray) -> np.ndarray | float:
        """Priority added to the transitions at `indices` besides priority_eps."""
        return 0.0

    def update_priorities(self, indices: np.ndarray, td_errors: np.ndarray) -> None:
        """p = |TD error| + priority_eps (+ `bonus`) for the sampled `indices`; a repeated index takes its
        last error."""
        tree = self.tree  # the transitions stored before keep the largest priority until now
        indices = np.asarray(indices, np.int64)
        priorities = np.abs(np.asarray(td_errors, np.float64)) + self.priority_eps + self.bonus(indices)
        self.max_priority = max(self.max_priority, float(priorities.max(initial=0.0)))
        tree.update(indices, priorities**self.alpha)

    def state_dict(self) -> dict[str, np.ndarray]:
        return super().state_dict() | dict(priorities=self.tree.leaves(np.arange(self.held)),
                                           priority_offset=np.int64(self.offset),
                                           max_priority=np.float64(self.max_priority))

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """As `ReplayBuffer`'s, with the priorities (a checkpoint without them: all at the largest)."""
        super().load_state_dict(state)
        self.max_priority = float(state.get("max_priority", 1.0))
        priorities = state.get("priorities")
        if priorities is None:
            self._set_leaves(None, np.full(self.size, self.max_priority**self.alpha))
            return
        head = int(state.get("priority_offset", 0))
        self._set_leaves(np.asarray(priorities[:head]), np.asarray(priorities[head:head + self.size]))

    def _set_leaves(self, head: np.ndarray | None, own: np.ndarray) -> None:
        """A new tree of `offset` leaves (`head` if it fits, else the largest priority) and the ring's `own`;
        a `head` that does not fit yet is kept for when the leaves before the ring are set."""
        self._tree, self._new = SumTree(self.offset + self.max_size), []
        if head is not None and len(head) and not self.offset:
            self._pending_head = head
        if self.offset:
            fits = head is not None and len(head) == self.offset
            largest = np.full(self.offset, self.max_priority**self.alpha)
            self.tree.update(np.arange(self.offset), head if fits else largest)
        self.tree.update(self.offset + np.arange(len(own)), own)


class PrioritizedNStepReplayBuffer(PrioritizedReplayBuffer, NStepReplayBuffer):
    """DQfD's replay (Hester et al. 2017): prioritized, with n-step returns, and the demonstrations held for
    good as the leaves before the ring's, with `demo_bonus` added to their priorities. Batches carry `expert`
    (1 for demonstrations). Set `n`, `gamma` and `stride` as for `NStepReplayBuffer`, and call
    `attach_demonstrations` before sampling.

    Args (besides `PrioritizedReplayBuffer`'s, with the DQfD paper's defaults):
        demo_bonus: priority bonus of demonstrations (the paper's epsilon_d).
    """

    DEMO_KEYS = ("obs", "actions", "rewards", "next_obs", "terminated", "n_step_returns", "n_step_obs",
                 "n_step_discounts")

    def __init__(self, max_size: int = 10000, initial_size: int | None = None, batch_size: int = 32,
                 alpha: float = 0.4, beta: float = 0.6, beta_steps: int | None = None, priority_eps: float = 1e-3,
                 demo_bonus: float = 1.0) -> None:
        super().__init__(max_size, initial_size, batch_size, alpha, beta, beta_steps, priority_eps)
        if float(demo_bonus) < 0:
            raise UserError(f"buffer.demo_bonus={demo_bonus} must be at least 0")
        self.demo_bonus = float(demo_bonus)
        self.demos = None

    def attach_demonstrations(self, demos) -> None:
        """Hold `demos` (rlexp.demos.Demonstrations) as the first leaves, at their loaded priorities if a
        checkpoint held as many, else at the largest priority."""
        own = self.tree.leaves(self.offset + np.arange(self.size))
        head, self._pending_head = self._pending_head, None
        self.demos, self.offset = demos, len(demos)
        self._set_leaves(head, own)

    def bonus(self, indices: np.ndarray) -> np.ndarray:
        return np.where(indices < self.offset, self.demo_bonus, 0.0)

    def rows(self, leaves: np.ndarray) -> dict[str, np.ndarray]:
        """Demonstrations (leaves before `offset`) and own transitions with their n-step returns, in order."""
        expert = leaves < self.offset
        own_idx = leaves[~expert] - self.offset
        own = {}
        if len(own_idx):
            own = {k: self.data[k].take(own_idx, axis=0) for k in self.DEMO_KEYS[:5]} | self.n_step(own_idx)
        out = {}
        for key in self.DEMO_KEYS:
            reference = getattr(self.demos, key) if self.demos is not None else own[key]
            column = np.empty((len(leaves), *reference.shape[1:]), reference.dtype)
            if self.demos is not None:
                column[expert] = reference.take(leaves[expert], axis=0)
            if len(own_idx):
                column[~expert] = own[key]
            out[key] = column
        return out | {"expert": expert.astype(np.float32)}


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


class FrameBuffer:
    """Replay for stacked frames (N, H, W) that stores every frame once.

    Each env has its own ring of entries; an entry holds the newest frame of the observation after a
    transition, plus action, reward and `terminated`. Episode starts get an extra (non-sampleable) entry
    with the reset frame. Stacks are rebuilt at sampling time, repeating the first frame of an episode
    before its start (as gymnasium's FrameStackObservation pads at reset).
    """

    def __init__(self, max_size: int = 100000, initial_size: int | None = None, batch_size: int = 32) -> None:
        self.max_size, self.initial_size, self.batch_size = _check_sizes(max_size, initial_size, batch_size)
        self.rng = np.random.default_rng()
        self.n_envs = self.capacity = self.stack = 0
        self.size = 0  # sampleable transitions written (capped by the ring)

    def _allocate(self, obs: np.ndarray, actions: np.ndarray) -> None:
        self.n_envs, self.stack = len(obs), obs.shape[1]
        self.capacity = self.max_size // self.n_envs + 1
        if self.capacity <= self.stack + 1:
            raise UserError(f"buffer.max_size={self.max_size} is too small for {self.n_envs} envs with "
                            f"{self.stack} stacked frames")
        shape = (self.n_envs, self.capacity)
        self.frames = np.zeros((*shape, *obs.shape[2:]), np.uint8)
        self.actions = np.zeros((*shape, *actions.shape[1:]), actions.dtype)
        self.rewards = np.zeros(shape, np.float32)
        self.terminated = np.zeros(shape, np.float32)
        self.valid = np.zeros(shape, bool)  # a transition (not an episode-start entry)
        self.episode_start = np.zeros(shape, np.int64)  # absolute index of the entry's episode start
        self.written = np.zeros(self.n_envs, np.int64)  # absolute entries written per env
        self.need_start = np.ones(self.n_envs, bool)

    @property
    def ready(self) -> bool:
        return self.size >= self.initial_size

    def _write(self, env: int, frame: np.ndarray, action, reward: float, terminated: float, valid: bool) -> None:
        n = self.written[env]
        slot = n % self.capacity
        if valid:
            start = self.episode_start[env, (n - 1) % self.capacity]
        else:
            start = n
        self.frames[env, slot] = frame
        self.actions[env, slot] = action
        self.rewards[env, slot] = reward
        self.terminated[env, slot] = terminated
        self.valid[env, slot] = valid
        self.episode_start[env, slot] = start
        self.written[env] = n + 1

    def add(self, obs: np.ndarray, actions: np.ndarray, rewards: np.ndarray, next_obs: np.ndarray,
            terminated: np.ndarray, dones: np.ndarray | None = None) -> None:
        """Store one transition per env; `dones` (terminated or truncated) marks the end of an episode."""
        if not self.n_envs:
            self._allocate(obs, actions)
        dones = terminated if dones is None else dones
        for env in range(self.n_envs):
            if self.need_start[env]:
                self._write(env, obs[env, -1], 0, 0.0, 0.0, valid=False)
            self._write(env, next_obs[env, -1], actions[env], rewards[env], terminated[env], valid=True)
            self.need_start[env] = bool(dones[env])
        self.size = int(min(self.size + self.n_envs, self.max_size))

    def _stacks(self, env: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        offsets = np.arange(-self.stack, 1)  # frames n-stack .. n: obs uses the first `stack`, next_obs the last
        absolute = np.maximum(n[:, None] + offsets, self.episode_start[env, n % self.capacity][:, None])
        frames = self.frames[env[:, None], absolute % self.capacity]
        return frames[:, :-1], frames[:, 1:]

    def sample(self, n_batches: int = 1) -> dict[str, np.ndarray]:
        """`n_batches * batch_size` transitions drawn uniformly from the sampleable entries."""
        want = n_batches * self.batch_size
        envs, entries = [], []
        while sum(map(len, envs)) < want:
            env = self.rng.integers(0, self.n_envs, 2 * want)
            oldest = np.maximum(self.written[env] - self.capacity + self.stack + 1, 0)
            n = oldest + (self.rng.random(2 * want) * (self.written[env] - oldest)).astype(np.int64)
            keep = self.valid[env, n % self.capacity] & (n >= oldest)
            envs.append(env[keep]), entries.append(n[keep])
        env, n = np.concatenate(envs)[:want], np.concatenate(entries)[:want]
        obs, next_obs = self._stacks(env, n)
        slot = n % self.capacity
        return dict(obs=obs, actions=self.actions[env, slot], rewards=self.rewards[env, slot], next_obs=next_obs,
                    terminated=self.terminated[env, slot])

    def state_dict(self) -> dict[str, np.ndarray]:
        if not self.n_envs:
            return {"size": np.int64(0)}
        names = ("frames", "actions", "rewards", "terminated", "valid", "episode_start", "written")
        return {"size": np.int64(self.size), "stack": np.int64(self.stack),
                **{f"data/{k}": getattr(self, k) for k in names}}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        self.size = int(state["size"])
        if "data/frames" in state:
            for k, v in state.items():
                if k.startswith("data/"):
                    setattr(self, k[5:], np.array(v))
            self.n_envs, self.capacity = self.frames.shape[:2]
            self.stack = int(state["stack"])
            self.need_start = np.ones(self.n_envs, bool)  # envs are reset on resume

    def nbytes_per_transition(self) -> int:
        per_entry = self.frames[0, 0].nbytes + self.actions[0, 0].nbytes + 4 + 4 + 1 + 8
        return int(per_entry * self.n_envs * self.capacity / max(self.max_size, 1))

    def memory_need(self, observation_space: Any, action_space: Any, n_envs: int, n_steps: int = 1) -> Need:
        """The storage of `_allocate`: each env's ring of entries, each the newest frame of a stack (stored once)
        with its action, reward, terminated, valid flag and episode start."""
        entries = n_envs * (self.max_size // max(n_envs, 1) + 1)
        frame = space_bytes(observation_space) // max(int(observation_space.shape[0]), 1)
        per = frame + space_bytes(action_space) + 4 + 4 + 1 + 8
        return Need("replay storage", entries * per, f"{entries:,} frames (each stored once) x {per} bytes",
                    f"buffer.max_size={self.max_size}", "buffer.max_size")


class RolloutBuffer:
    """Replay of whole rollouts (ACER): each entry is n_steps x n_envs transitions with the behaviour
    policy's action probabilities; the oldest rollout is overwritten when full.

    Args:
        max_size: transitions kept (rounded down to whole rollouts, at least one).
        initial_size: transitions stored before replay starts (None: one rollout).
        batch_size: unused (a replay is one stored rollout); kept so buffer presets share their keys.
    """

    KEYS = ("obs", "actions", "rewards", "dones", "mu")

    def __init__(self, max_size: int = 50000, initial_size: int | None = None, batch_size: int = 1) -> None:
        from rlexp.checks import whole

        self.max_size, self.batch_size = whole("buffer.max_size", max_size, 1), whole("buffer.batch_size", batch_size, 1)
        self.initial_size = 0 if initial_size is None else whole("buffer.initial_size", initial_size, 0)
        if self.initial_size > self.max_size:
            raise UserError(f"buffer.max_size={self.max_size} must be at least 1 and at least "
                            f"buffer.initial_size={self.initial_size}")
        self.rng = np.random.default_rng()
        self.capacity = self.count = self.index = 0  # rollouts: slots, stored, next slot
        self.data: dict[str, np.ndarray] = {}
        self.transitions_per_rollout = 0

    @property
    def size(self) -> int:
        """Transitions held."""
        return self.count * self.transitions_per_rollout

    @property
    def ready(self) -> bool:
        return self.count > 0 and self.size >= self.initial_size

    def add(self, **rollout: np.ndarray) -> None:
        """Store one rollout: obs [T+1, N, ...] (with the final observations), actions, rewards, dones [T, N]
        and mu [T, N, actions]."""
        if not self.data:
            self.transitions_per_rollout = int(np.prod(rollout["actions"].shape[:2]))
            self.capacity = max(self.max_size // self.transitions_per_rollout, 1)
            self.data = {k: np.zeros((self.capacity, *rollout[k].shape), rollout[k].dtype) for k in self.KEYS}
        for k in self.KEYS:
            self.data[k][self.index] = rollout[k]
        self.index = (self.index + 1) % self.capacity
        self.count = min(self.count + 1, self.capacity)

    def sample(self) -> dict[str, np.ndarray]:
        """One stored rollout, uniformly."""
        i = int(self.rng.integers(0, self.count))
        return {k: v[i] for k, v in self.data.items()}

    def state_dict(self) -> dict[str, np.ndarray]:
        state = {f"data/{k}": v[: self.count] for k, v in self.data.items()}
        return state | {"count": np.int64(self.count), "index": np.int64(self.index)}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        arrays = {k[5:]: v for k, v in state.items() if k.startswith("data/")}
        if arrays and len(arrays["actions"]):
            self.data = {}
            self.add(**{k: v[0] for k, v in arrays.items()})
            for k, v in arrays.items():
                self.data[k][: len(v)] = v
        self.count, self.index = int(state.get("count", 0)), int(state.get("index", 0))

    def nbytes_per_transition(self) -> int:
        return int(sum(v[0].nbytes for v in self.data.values()) / max(self.transitions_per_rollout, 1))

    def memory_need(self, observation_space: Any, action_space: Any, n_envs: int, n_steps: int = 1) -> Need:
        """The storage of `add`: whole rollouts of `n_steps` x `n_envs` (observations with the final ones,
        actions, rewards, dones, the behaviour policy's probabilities of each action)."""
        rollout = n_steps * n_envs
        count = max(self.max_size // max(rollout, 1), 1)
        obs = space_bytes(observation_space)
        per_rollout = (n_steps + 1) * n_envs * obs + rollout * (space_bytes(action_space) + 8 + 4 *
                                                               int(getattr(action_space, "n", 1)))
        return Need("replay storage", count * per_rollout, f"{count:,} rollouts x {human(per_rollout)}",
                    f"buffer.max_size={self.max_size}", "buffer.max_size")
