"""Environments: vectorised gymnasium envs (make_envs), EnvPool's Atari, graph envs, wrappers, observation
normalisation, off-screen rendering, playback and Minari demonstrations.

`from rlexp.envs import make_envs` (and the other names of rlexp.envs.make and rlexp.envs.spaces) is resolved
on first use: importing a submodule (rlexp.envs.wrappers, ...) does not import the others."""
from importlib import import_module
from typing import Any

_SPACES = ("SPACE_KINDS", "is_atari", "space_kind", "is_structured", "observation_parts", "is_image")


def __getattr__(name: str) -> Any:  # lazy: rlexp.envs.X paths (_target_s, user code) stay light to import
    if name.startswith("__"):
        raise AttributeError(name)
    module = import_module("rlexp.envs.spaces" if name in _SPACES else "rlexp.envs.members"
                           if name in ("make_member_envs", "member_envs") else "rlexp.envs.make")
    try:
        return getattr(module, name)
    except AttributeError:
        raise AttributeError(f"module 'rlexp.envs' has no attribute {name!r}") from None
