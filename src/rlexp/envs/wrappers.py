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


class FrameSkip(gym.Wrapper):
    """Each action repeated `skip` times, the rewards summed, stopping at the episode's end (RL Zoo's FrameSkip:
    CarRacing's rows)."""

    def __init__(self, env: gym.Env, skip: int = 4) -> None:
        super().__init__(env)
        if isinstance(skip, bool) or not float(skip).is_integer() or int(skip) < 1:
            raise ValueError(f"skip={skip}: a whole number of 1 or more")
        self.skip = int(skip)

    def step(self, action):
        total = 0.0
        for _ in range(self.skip):
            obs, reward, terminated, truncated, info = self.env.step(action)
            total += float(reward)
            if terminated or truncated:
                break
        return obs, total, terminated, truncated, info


class ResizeObservation(gym.wrappers.ResizeObservation):
    """gymnasium's ResizeObservation, its shape given as a list (YAML's; RL Zoo's YAMLCompatResizeObservation)."""

    def __init__(self, env: gym.Env, shape: Sequence[int]) -> None:
        super().__init__(env, tuple(int(n) for n in shape))


class StackFramesLast(gym.ObservationWrapper):
    """The last `n_stack` image observations stacked along their last (channel) axis, zeros before an episode's
    first one, as SB3's VecFrameStack stacks channels-last images (RL Zoo's `frame_stack` without Atari's
    preprocessing: CarRacing's rows)."""

    def __init__(self, env: gym.Env, n_stack: int = 2) -> None:
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, gym.spaces.Box) or len(space.shape) != 3:
            raise ValueError(f"StackFramesLast stacks (H, W, C) images, got {space}")
        self.n_stack, self.channels = int(n_stack), space.shape[-1]
        low, high = (np.repeat(bound, self.n_stack, axis=-1) for bound in (space.low, space.high))
        self.observation_space = gym.spaces.Box(low=np.minimum(low, 0), high=high, dtype=space.dtype)
        self.stack = np.zeros(self.observation_space.shape, space.dtype)

    def reset(self, **kwargs):
        self.stack[...] = 0
        return super().reset(**kwargs)

    def observation(self, observation):
        self.stack = np.roll(self.stack, -self.channels, axis=-1)
        self.stack[..., -self.channels:] = observation
        return self.stack.copy()
