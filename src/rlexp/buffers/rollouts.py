"""`RolloutBuffer`: replay of whole rollouts with the behaviour policy's probabilities (ACER)."""
from __future__ import annotations

from typing import Any

import numpy as np

from rlexp.checks.memory import Need, human, space_bytes
from rlexp.errors import UserError


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
        from rlexp.checks.values import whole

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
