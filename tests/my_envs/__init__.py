"""A user's own env package, as in the README's "Your own presets and envs": importing it registers
MyEnvs/Corridor-v0 with gymnasium (list it under `env.imports`)."""
from __future__ import annotations

import gymnasium as gym
import numpy as np


class Corridor(gym.Env):
    """Walk a corridor of `length` cells: reward 1 per step, whatever the action, and the episode ends after
    `length` steps, so every episode's return is exactly `length` (tests check wrappers against it)."""

    def __init__(self, length: int = 5, marker: str = "") -> None:
        self.length = int(length)
        if marker:  # tests see when and how often the env was made: one line per copy
            with open(marker, "a") as f:
                f.write("made\n")
        self.observation_space = gym.spaces.Box(0.0, 1.0, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.position = 0

    def _obs(self) -> np.ndarray:
        return np.array([self.position / self.length, 1.0], np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.position = 0
        return self._obs(), {}

    def step(self, action):
        self.position += 1
        return self._obs(), 1.0, self.position >= self.length, False, {}


gym.register(id="MyEnvs/Corridor-v0", entry_point="my_envs:Corridor", max_episode_steps=100)
