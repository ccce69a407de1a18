"""Uniform replay over a NumPy ring (`ReplayBuffer`), and with n-step returns (`NStepReplayBuffer`); the
check of the sizes every replay buffer takes."""
from __future__ import annotations

from typing import Any

import numpy as np

from rlexp.checks.memory import Need, space_bytes
from rlexp.errors import UserError


def _check_sizes(max_size: int, initial_size: int | None, batch_size: int) -> tuple[int, int, int]:
    """(max_size, transitions needed before `ready`, batch_size) as ints; the second is `initial_size` (None:
    batch_size), at least 1. A smaller initial_size than batch_size is SB3's learning_starts: batches are drawn
    with replacement from what is held."""
    from rlexp.checks.values import whole

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
