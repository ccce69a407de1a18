"""Hindsight Experience Replay (Andrychowicz et al. 2017) as SB3's HerReplayBuffer does it: transitions of finished
episodes are drawn uniformly, and a share of each batch gets a new desired goal, an achieved goal of the same
episode, with the reward the env's `compute_reward` gives for it."""
from __future__ import annotations

from typing import Callable

import numpy as np

from rlexp.buffers.replay import ReplayBuffer
from rlexp.errors import UserError

STRATEGIES = ("future", "final", "episode")


class HerReplayBuffer(ReplayBuffer):
    """`ReplayBuffer` of a goal-conditioned env's (flattened) observations, relabelled when sampled.

    Args (besides `ReplayBuffer`'s):
        n_sampled_goal: relabelled transitions per real one: a share n / (n + 1) of each batch is relabelled.
        goal_selection_strategy: where a new goal comes from: `future` (the achieved goal after this transition or
            a later one of its episode), `final` (after the episode's last transition), `episode` (after any of
            its transitions).

    The agent gives the goals' columns in the flattened observations and the env's `compute_reward`
    (`use_goals`); only transitions of finished episodes are drawn (an episode is finished once its last transition
    is stored), and an episode the ring overwrites in part is no longer drawn. A resumed run's envs start new
    episodes: the ones the checkpoint caught unfinished are never drawn.
    """

    def __init__(self, max_size: int = 10000, initial_size: int | None = None, batch_size: int = 32,
                 n_sampled_goal: int = 4, goal_selection_strategy: str = "future") -> None:
        super().__init__(max_size, initial_size, batch_size)
        if goal_selection_strategy not in STRATEGIES:
            raise UserError(f"buffer.goal_selection_strategy={goal_selection_strategy!r}: use one of "
                            f"{', '.join(STRATEGIES)}")
        if isinstance(n_sampled_goal, bool) or not float(n_sampled_goal).is_integer() or int(n_sampled_goal) < 0:
            raise UserError(f"buffer.n_sampled_goal={n_sampled_goal}: use a whole number of 0 or more (SB3's 4)")
        self.n_sampled_goal, self.strategy = int(n_sampled_goal), goal_selection_strategy
        self.her_ratio = 1 - 1.0 / (self.n_sampled_goal + 1)
        self.episode_start = np.zeros(self.max_size, np.int64)  # each slot's episode: its first slot
        self.episode_length = np.zeros(self.max_size, np.int64)  # and its length (0: unfinished or overwritten)
        self.stride = 0  # slots between an env's consecutive transitions (the envs stored per `add`)
        self.current_start: np.ndarray | None = None  # each env's running episode: its first slot
        self.achieved: slice | None = None
        self.desired: slice | None = None
        self.compute_reward: Callable[..., np.ndarray] | None = None

    def use_goals(self, achieved: slice, desired: slice, compute_reward: Callable[..., np.ndarray]) -> None:
        """The achieved and desired goals' columns of the flattened observations, and the env's
        `compute_reward(achieved_goal, desired_goal, info)` (batched)."""
        self.achieved, self.desired, self.compute_reward = achieved, desired, compute_reward

    def add(self, obs: np.ndarray, actions: np.ndarray, rewards: np.ndarray, next_obs: np.ndarray,
            terminated: np.ndarray, dones: np.ndarray | None = None) -> None:
        """Store one transition per env; `dones` flags the envs whose episode ends with it (terminated or
        truncated)."""
        n = len(obs)
        if self.current_start is None or self.stride != n:
            if self.size and self.stride != n:
                raise UserError(f"buffer=her: the replay holds transitions of {self.stride} envs; run with "
                                f"env.n_envs={self.stride}")
            self.stride, self.current_start = n, (self.index + np.arange(n)) % self.max_size
        slots = (self.index + np.arange(n)) % self.max_size
        for slot in slots[self.episode_length[slots] > 0]:  # an older episode overwritten: none of it is drawn
            self.episode_length[self.episode_slots(self.episode_start[slot], self.episode_length[slot])] = 0
        self.episode_start[slots], self.episode_length[slots] = self.current_start, 0
        super().add(obs, actions, rewards, next_obs, terminated, dones)
        ended = np.flatnonzero(np.asarray(dones if dones is not None else terminated, bool))
        for env in ended:
            start = self.current_start[env]
            length = ((slots[env] - start) % self.max_size) // self.stride + 1
            self.episode_length[self.episode_slots(start, length)] = length
            self.current_start[env] = (slots[env] + n) % self.max_size

    def episode_slots(self, start: int, length: int) -> np.ndarray:
        return (start + self.stride * np.arange(length)) % self.max_size

    def sample(self, n_batches: int = 1) -> dict[str, np.ndarray]:
        """`n_batches` batches of transitions drawn uniformly from finished episodes (with replacement), the first
        n_sampled_goal / (n_sampled_goal + 1) of each relabelled."""
        if self.compute_reward is None:
            raise RuntimeError("HerReplayBuffer.use_goals was not called")
        valid = np.flatnonzero(self.episode_length[:self.size] > 0)
        if not len(valid):
            raise UserError("buffer=her has no finished episode to sample from: set buffer.initial_size above the "
                            "env's episode length (RL Zoo's rows: 1000)")
        idx = self.rng.choice(valid, n_batches * self.batch_size)
        batch = {k: v.take(idx, axis=0) for k, v in self.data.items()}
        relabelled = int(self.her_ratio * self.batch_size)
        rows = (np.arange(n_batches)[:, None] * self.batch_size + np.arange(relabelled)).ravel()
        if len(rows):
            self.relabel(batch, rows, idx[rows])
        return batch

    def relabel(self, batch: dict[str, np.ndarray], rows: np.ndarray, slots: np.ndarray) -> None:
        """New desired goals for `rows` of `batch` (at buffer `slots`): the achieved goal after a transition of
        the same episode the strategy picks; their rewards recomputed by the env."""
        start, length = self.episode_start[slots], self.episode_length[slots]
        if self.strategy == "final":
            step = length - 1
        elif self.strategy == "future":
            step = self.rng.integers((slots - start) % self.max_size // self.stride, length)
        else:
            step = self.rng.integers(0, length)
        goals = self.data["next_obs"][(start + self.stride * step) % self.max_size, self.achieved]
        for key in ("obs", "next_obs"):
            batch[key][rows, self.desired] = goals
        achieved = batch["next_obs"][rows, self.achieved]
        batch["rewards"][rows] = self.compute_reward(achieved, goals, [{} for _ in rows])

    def state_dict(self) -> dict[str, np.ndarray]:
        state = super().state_dict()
        return state | {"her/episode_start": self.episode_start, "her/episode_length": self.episode_length,
                        "her/stride": np.int64(self.stride)}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        super().load_state_dict(state)
        if "her/episode_start" in state:
            self.episode_start[:] = state["her/episode_start"]
            self.episode_length[:] = state["her/episode_length"]
            self.stride = int(state["her/stride"])
        self.current_start = None  # (a resumed run's envs start new episodes: the unfinished ones are not drawn)

    def nbytes_per_transition(self) -> int:
        return super().nbytes_per_transition() + 16

    EXTRA_BYTES = ReplayBuffer.EXTRA_BYTES + 16  # each slot's episode start and length
