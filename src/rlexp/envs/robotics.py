"""gymnasium-robotics' goal-conditioned envs (Fetch, ...): importing this module registers their ids.

gymnasium-robotics 1.4.2 checks a joint's type with `numpy_int in (mujoco.mjtJoint.X, ...)`, which mujoco 3.17's
enums no longer equal (the enum's own `==` refuses NumPy integers), so every Fetch env fails its first reset. Its
`mujoco_utils` module gets plain integers for those joint types here; nothing else changes."""
from __future__ import annotations

import contextlib
import io
import types

import gymnasium as gym
import numpy as np

with contextlib.redirect_stderr(io.StringIO()):  # (its import prints a notice about its Adroit envs' rewards)
    import gymnasium_robotics
from gymnasium_robotics.utils import mujoco_utils  # noqa: E402

gym.register_envs(gymnasium_robotics)


class _IntegerJointTypes:
    """The mujoco module, with `mjtJoint`'s members as plain integers."""

    def __init__(self, module: types.ModuleType) -> None:
        self._module = module
        self.mjtJoint = types.SimpleNamespace(**{name: int(value) for name, value in
                                                 module.mjtJoint.__members__.items()})

    def __getattr__(self, name: str):
        return getattr(self._module, name)


_slide = mujoco_utils.mujoco.mjtJoint.mjJNT_SLIDE
if np.int32(int(_slide)) not in (_slide,):  # (the comparison gymnasium-robotics makes)
    mujoco_utils.mujoco = _IntegerJointTypes(mujoco_utils.mujoco)
