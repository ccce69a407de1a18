"""Env wrappers that env presets can list under `env.wrappers` (besides gymnasium's own)."""
from __future__ import annotations

from typing import Sequence

import gymnasium as gym
import numpy as np

# where these wrappers were before rlexp.envs became a package: run dirs trained then and env presets copied by
# `mode=init` then name them `rlexp.wrappers.<Name>` (read as rlexp.envs.wrappers.<Name>)
LEGACY_PREFIX, PREFIX = "rlexp.wrappers.", "rlexp.envs.wrappers."


def current_target(target: str) -> str:
    """A wrapper's `_target_` as rlexp names it now (an earlier `rlexp.wrappers.X` is `rlexp.envs.wrappers.X`)."""
    return PREFIX + target[len(LEGACY_PREFIX):] if target.startswith(LEGACY_PREFIX) else target

# The velocity entries of classic-control and Box2D observations (RL Zoo's MaskVelocityWrapper table).
VELOCITY_INDICES = {
    "CartPole-v1": [1, 3],
    "CartPole-v0": [1, 3],
    "Pendulum-v1": [2],
    "MountainCar-v0": [1],
    "MountainCarContinuous-v0": [1],
    "LunarLander-v3": [2, 3, 5],
    "LunarLanderContinuous-v3": [2, 3, 5],
}


class MaskVelocity(gym.ObservationWrapper):
    """Zero the velocity entries of the observation, making the env partially observed (a policy needs
    memory to act well). `indices` picks the entries; by default they come from `VELOCITY_INDICES`."""

    def __init__(self, env: gym.Env, indices: Sequence[int] | None = None) -> None:
        super().__init__(env)
        env_id = env.spec.id if env.spec is not None else None
        if indices is None and env_id not in VELOCITY_INDICES:
            raise ValueError(f"MaskVelocity knows no velocity entries of {env_id}; give them as indices=[...] "
                             f"(known: {', '.join(VELOCITY_INDICES)})")
        self.mask = np.ones(env.observation_space.shape, np.float32)
        self.mask[list(VELOCITY_INDICES[env_id] if indices is None else indices)] = 0.0

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return (observation * self.mask).astype(observation.dtype, copy=False)


class LifeLossInfo(gym.Wrapper):
    """Flags each step that loses a life while the game goes on: `info["life_loss"]` (from ALE's
    `info["lives"]`). Agents end the value bootstrap there, as SB3's `terminal_on_life_loss` does, while
    episodes and their returns stay whole games (`env.life_loss_terminal`)."""

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self.lives = int(info.get("lives", 0))
        return obs, info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        lives = int(info.get("lives", 0))
        info["life_loss"] = lives < self.lives and not (terminated or truncated)
        self.lives = lives
        return obs, reward, terminated, truncated, info


def with_lost_lives(flags: np.ndarray, info: dict) -> np.ndarray:
    """`flags` (terminations, episode starts) with the lost lives a vector env flagged added: training ends
    the bootstrap there, and a recurrent policy's state restarts there in training and evaluation alike."""
    life_loss = info.get("life_loss")
    return flags if life_loss is None else flags | life_loss
