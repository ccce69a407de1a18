"""Atari through EnvPool (C++ emulation and preprocessing on a thread pool) behind gymnasium's VectorEnv API.

EnvPool does in C++ what `make_envs(..., preprocess=True)` builds from gymnasium's wrappers (noop reset,
max-and-skip, grayscale, area resize, frame stack) and steps the envs on its own threads. It restarts a
finished episode on the *next* step; `EnvPoolAtari` resets it in the same step instead, like rlexp's other
vector envs (`info["final_obs"]` holds the last observation).
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


class EnvPoolAtari(gym.vector.VectorEnv):
    """`n_envs` EnvPool Atari envs with rlexp's Atari preprocessing, restarting episodes in the same step."""

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}

    def __init__(self, env_id: str, n_envs: int, *, frame_stack: int = 4, screen_size: int = 84, noop_max: int = 30,
                 max_frame: bool = True, max_episode_steps: int | None = None, threads: int | None = None) -> None:
        found = envpool_task(env_id)
        if found is None:
            raise UserError(f"env.vectorization=envpool: EnvPool has no {env_id!r}; use env.vectorization=sync "
                            "(EnvPool runs Atari ids: <Game>NoFrameskip-v4, ALE/<Game>-v5)")
        task, sticky = found
        frame_skip = 4 if max_frame else 1
        spec = gym.spec(env_id)
        limit = max_episode_steps or spec.max_episode_steps or spec.kwargs.get("max_num_frames_per_episode")
        self.options = dict(num_envs=n_envs, stack_num=frame_stack, img_height=screen_size, img_width=screen_size,
                            noop_max=max(noop_max, 1), frame_skip=frame_skip, repeat_action_probability=sticky,
                            use_fire_reset=False, episodic_life=False, reward_clip=False,
                            num_threads=threads or min(n_envs, len(os.sched_getaffinity(0))))
        if limit:  # emulator frames, as gymnasium's time limits count them here
            self.options["max_episode_steps"] = max(1, int(limit) // frame_skip)
        self.task, self.num_envs, self.spec = task, n_envs, spec
        self.pool = self._make(seed=0)
        self.single_observation_space = self.pool.observation_space
        self.single_action_space = self.pool.action_space
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, n_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, n_envs)
        self.structured_observation_space = None

    def _make(self, seed: int) -> Any:
        import envpool

        return envpool.make_gymnasium(self.task, seed=seed, **self.options)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        if seed is not None:  # EnvPool seeds its envs when it builds them (env i gets seed + i)
            self.pool.close()
            self.pool = self._make(int(seed))
        obs, _ = self.pool.reset()
        return obs, {}

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
        obs, rewards, terminated, truncated, _ = self.pool.step(np.asarray(actions))
        done = terminated | truncated
        info: dict[str, Any] = {}
        if done.any():
            ids = np.flatnonzero(done)
            info = {"final_obs": obs.copy(), "_final_obs": done}
            obs[ids], _ = self.pool.reset(ids)
        return obs, rewards.astype(np.float64), terminated, truncated, info

    def render(self) -> None:
        raise UserError("EnvPool envs don't render; play and videos use env.vectorization=sync")

    def close_extras(self, **kwargs: Any) -> None:
        self.pool.close()
