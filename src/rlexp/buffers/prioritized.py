"""Proportional prioritized replay on a sum-tree (`PrioritizedReplayBuffer`), and DQfD's with n-step returns
and demonstrations (`PrioritizedNStepReplayBuffer`)."""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from rlexp.buffers.replay import NStepReplayBuffer, ReplayBuffer
from rlexp.buffers.sumtree import SumTree
from rlexp.checks.memory import Need, human
from rlexp.errors import UserError


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
        """Hold `demos` (rlexp.envs.demos.Demonstrations) as the first leaves, at their loaded priorities if a
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
