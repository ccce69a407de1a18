"""A user's own env wrapper, named in an env preset's `env.wrappers` (its module is under `env.imports`)."""
from __future__ import annotations

import gymnasium as gym


class ScaleReward(gym.RewardWrapper):
    """Multiply every reward by `scale`."""

    def __init__(self, env: gym.Env, scale: float = 1.0) -> None:
        super().__init__(env)
        self.scale = float(scale)

    def reward(self, reward: float) -> float:
        return self.scale * reward
