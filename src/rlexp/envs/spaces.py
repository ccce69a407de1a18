"""What kind of env an id or a space is: Atari or not (ale-py's games are registered here), the action space's
kind as agents declare it, structured (Dict/Tuple) and image observations."""
from __future__ import annotations

import gymnasium as gym
import numpy as np

try:  # ale-py registers the Atari ids (ROMs ship with it)
    import ale_py

    gym.register_envs(ale_py)
except ImportError:  # pragma: no cover - ale-py is a dependency
    pass


SPACE_KINDS = {gym.spaces.Discrete: "discrete", gym.spaces.Box: "continuous",
               gym.spaces.MultiDiscrete: "multi_discrete", gym.spaces.MultiBinary: "multi_binary"}


def is_atari(env_id: str) -> bool:
    """Whether `env_id` is registered as an ALE game (RL Zoo's test: ale_py's AtariEnv entry point)."""
    try:
        return "AtariEnv" in str(gym.spec(env_id).entry_point)
    except gym.error.Error:
        return False


def space_kind(space: gym.Space) -> str:
    """'discrete', 'continuous', 'multi_discrete' or 'multi_binary' (the action-space names agents declare)."""
    return SPACE_KINDS.get(type(space), type(space).__name__)


def is_structured(space: gym.Space) -> bool:
    """Dict or Tuple observations (flattened for the agent, split again by the model's per-key encoders)."""
    return isinstance(space, (gym.spaces.Dict, gym.spaces.Tuple))


def observation_parts(space: gym.Space, prefix: str = "") -> list[tuple[str, gym.Space]]:
    """The leaves of a Dict/Tuple space as (key path, space), in the order `gymnasium.spaces.flatten`
    concatenates them."""
    if isinstance(space, gym.spaces.Dict):
        return [part for key, sub in space.spaces.items() for part in observation_parts(sub, f"{prefix}{key}.")]
    if isinstance(space, gym.spaces.Tuple):
        return [part for i, sub in enumerate(space.spaces) for part in observation_parts(sub, f"{prefix}{i}.")]
    return [(prefix[:-1], space)]


def is_image(space: gym.Space) -> bool:
    """True for image-like observations (H, W[, C]) or stacked frames (N, H, W)."""
    return isinstance(space, gym.spaces.Box) and len(space.shape) >= 2 and space.dtype == np.uint8
