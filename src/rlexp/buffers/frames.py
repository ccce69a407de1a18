"""`FrameBuffer`: replay of stacked frames that stores every frame once (Atari)."""
from __future__ import annotations

from typing import Any

import numpy as np

from rlexp.buffers.replay import _check_sizes
from rlexp.checks.memory import Need, space_bytes
from rlexp.errors import UserError


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
