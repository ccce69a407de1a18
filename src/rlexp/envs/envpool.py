"""Atari through EnvPool (C++ emulation and preprocessing on a thread pool) behind gymnasium's VectorEnv API.

EnvPool does in C++ what `make_envs(..., preprocess=True)` builds from gymnasium's wrappers (noop reset,
max-and-skip, grayscale, area resize, frame stack) and steps the envs on its own threads. It restarts a
finished episode on the *next* step; `EnvPoolAtari` resets it in the same step instead, like rlexp's other
vector envs (`info["final_obs"]` holds the last observation). With `life_loss`, `info["life_loss"]` flags the
steps that lose a life while the game goes on (as `rlexp.envs.wrappers.LifeLossInfo` does for gymnasium's envs).
"""
from __future__ import annotations

import os
import re
from typing import Any

import gymnasium as gym
import numpy as np

from rlexp.errors import UserError

_IDS = ((re.compile(r"^(\w+)NoFrameskip-v4$"), 0.0),  # v4: no sticky actions
        (re.compile(r"^ALE/(\w+)-v5$"), 0.25))         # ALE v5: sticky actions with probability 0.25


def envpool_installed() -> bool:
    try:
        import envpool  # noqa: F401
    except ImportError:
        return False
    return True


def envpool_task(env_id: str) -> tuple[str, float] | None:
    """(EnvPool task id, sticky-action probability) for a gymnasium Atari id EnvPool has, else None."""
    for pattern, sticky in _IDS:
        match = pattern.match(env_id)
        if match:
            import envpool

            task = f"{match.group(1)}-v5"
            return (task, sticky) if task in envpool.list_all_envs() else None
    return None


SEEDS = 2**31 - 1024  # EnvPool takes int32 seeds and gives env i seed + i


def available(env_id: str, noop_max: int) -> bool:
    """Whether `env_id` with these options can run on EnvPool here (EnvPool always does at least one no-op)."""
    return noop_max >= 1 and envpool_installed() and envpool_task(env_id) is not None


class EnvPoolAtari(gym.vector.VectorEnv):
    """`n_envs` EnvPool Atari envs with rlexp's Atari preprocessing, restarting episodes in the same step.

    `reset(seed=s)` gives what a pool built with seed s gives on its first reset (EnvPool seeds its envs
    only when it builds them; a pool is built again only when that is needed)."""

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}

    def __init__(self, env_id: str, n_envs: int, seed: int | None = None, *, frame_stack: int = 4,
                 screen_size: int = 84, noop_max: int = 30, max_frame: bool = True,
                 max_episode_steps: int | None = None, threads: int | None = None, life_loss: bool = False) -> None:
        if not envpool_installed():
            raise UserError('env.vectorization=envpool needs EnvPool: pip install "rlexp[envpool]" '
                            "(or use env.vectorization=sync)")
        found = envpool_task(env_id)
        if found is None:
            raise UserError(f"env.vectorization=envpool: EnvPool has no {env_id!r}; use env.vectorization=sync "
                            "(EnvPool runs Atari ids: <Game>NoFrameskip-v4, ALE/<Game>-v5)")
        if noop_max < 1:
            raise UserError(f"env.vectorization=envpool always does 1 to env.noop_max no-ops at reset; "
                            f"env.noop_max={noop_max} needs env.vectorization=sync")
        task, sticky = found
        frame_skip = 4 if max_frame else 1
        spec = gym.spec(env_id)
        limits = [int(n) for n in (max_episode_steps, spec.max_episode_steps,
                                   spec.kwargs.get("max_num_frames_per_episode")) if n]  # emulator frames
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        self.options = dict(num_envs=n_envs, stack_num=frame_stack, img_height=screen_size, img_width=screen_size,
                            noop_max=noop_max, frame_skip=frame_skip, repeat_action_probability=sticky,
                            use_fire_reset=False, episodic_life=False, reward_clip=False,
                            num_threads=threads or min(n_envs, cores))
        if limits:
            self.options["max_episode_steps"] = max(1, min(limits) // frame_skip)
        self.task, self.num_envs, self.spec, self.frame_stack = task, n_envs, spec, frame_stack
        self.life_loss, self._lives = life_loss, np.zeros(n_envs, np.int64)
        self._build(seed)
        shape = (screen_size, screen_size) if frame_stack == 1 else (frame_stack, screen_size, screen_size)
        self.single_observation_space = gym.spaces.Box(0, 255, shape, np.uint8)  # gymnasium's wrappers' shape
        self.single_action_space = self.pool.action_space
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, n_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, n_envs)
        self.structured_observation_space = None

    def _build(self, seed: int | None) -> None:
        import envpool

        if getattr(self, "pool", None) is not None:
            self.pool.close()
        self.seed = int(np.random.SeedSequence().generate_state(1)[0]) % SEEDS if seed is None else int(seed) % SEEDS
        self.pool = envpool.make_gymnasium(self.task, seed=self.seed, **self.options)
        self._untouched, self._first_obs = True, None

    def _frames(self, obs: np.ndarray) -> np.ndarray:
        return obs[:, 0] if self.frame_stack == 1 else obs

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        if seed is not None:
            if int(seed) % SEEDS == self.seed and self._first_obs is not None:  # nothing happened since
                self._lives[:] = self._first_lives
                return self._first_obs.copy(), {}
            if int(seed) % SEEDS != self.seed or not self._untouched:
                self._build(seed)
        obs, info = self.pool.reset()
        obs = self._frames(obs)
        self._lives[:] = info["lives"]
        if self._untouched:
            self._first_obs, self._first_lives = obs.copy(), self._lives.copy()
        else:
            self._first_obs = None
        self._untouched = False
        return obs, {}

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
        self._untouched, self._first_obs = False, None
        obs, rewards, terminated, truncated, pool_info = self.pool.step(np.asarray(actions))
        obs = self._frames(obs)
        done = terminated | truncated
        info: dict[str, Any] = {}
        if self.life_loss:
            info["life_loss"] = (pool_info["lives"] < self._lives) & ~done
            self._lives[:] = pool_info["lives"]
        if done.any():
            ids = np.flatnonzero(done)
            info |= {"final_obs": obs.copy(), "_final_obs": done}
            reset_obs, reset_info = self.pool.reset(ids)
            obs[ids] = self._frames(reset_obs)
            self._lives[ids] = reset_info["lives"]
        return obs, rewards.astype(np.float64), terminated, truncated, info

    def render(self) -> None:
        raise UserError("EnvPool envs don't render; play and videos use env.vectorization=sync")

    def close_extras(self, **kwargs: Any) -> None:
        self.pool.close()
