"""Off-screen OpenGL for MuJoCo's frames (videos, jpg frames), on a laptop as on a server without a display.

MuJoCo renders through GLFW (a window: needs a display), EGL (a GPU's driver, or Mesa's software device) or OSMesa
(Mesa in software), chosen by MUJOCO_GL when `mujoco` is first imported. `offscreen_rendering` has rlexp choose
then: the user's own MUJOCO_GL or PYOPENGL_PLATFORM, else the first of EGL and OSMesa that renders in a short child
process (where a backend that crashes costs nothing), else GLFW where there is a display; with none of them, one
line naming the system package to install.

TensorFlow loads with its symbols private (rlexp.runtime.quiet.import_tensorflow): loaded globally, its copy of LLVM
replaces Mesa's inside llvmpipe, Mesa's software renderer, which then crashes at its first frame.
"""
from __future__ import annotations

import importlib.abc
import logging
import os
import re
import subprocess
import sys
from typing import Any, Sequence

from rlexp.errors import UserError

log = logging.getLogger("rlexp")

BACKENDS = ("egl", "osmesa")  # tried in this order; GLFW (MuJoCo's default) needs a display
INSTALL = "install OSMesa (Debian/Ubuntu: apt-get install libosmesa6) or, with a GPU's driver, EGL (libegl1)"
ARRAY_MODES = ("rgb_array", "rgb_array_list", "depth_array", "depth_array_list")
# a 64x64 context and MuJoCo's own GL resources (textures, fonts): what gymnasium's renderer makes first
PROBE = """
import mujoco
from OpenGL import GL
model = mujoco.MjModel.from_xml_string("<mujoco/>")
context = mujoco.GLContext(64, 64)
context.make_current()
resources = mujoco.MjrContext(model, mujoco.mjtFontScale.mjFONTSCALE_150)
print(GL.glGetString(GL.GL_RENDERER).decode())
resources.free()
context.free()
"""


def probe(backend: str, timeout: float = 60.0) -> str | None:
    """The OpenGL renderer's name (e.g. 'llvmpipe (LLVM 15.0.6, 256 bits)') if MuJoCo renders with `backend` in a
    child process, else None."""
    env = dict(os.environ, MUJOCO_GL=backend, PYOPENGL_PLATFORM=backend)
    try:
        result = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True,
                                timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = result.stdout.strip().splitlines()
    return lines[-1] if result.returncode == 0 and lines else None


def has_display() -> bool:
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def tensorflow_symbols_global() -> bool:
    """Whether TensorFlow was imported with its symbols global (by a script, before rlexp imported it)."""
    return sys.modules.get("tensorflow.python.pywrap_dlopen_global_flags") is not None


def choose_gl() -> str | None:
    """Set MUJOCO_GL (and PYOPENGL_PLATFORM) for off-screen frames unless the user set them; returns the backend
    (None: MuJoCo's default, GLFW). Raises a one-line UserError where nothing renders."""
    if os.environ.get("MUJOCO_GL"):
        return os.environ["MUJOCO_GL"]
    platform = os.environ.get("PYOPENGL_PLATFORM", "").lower()
    if platform:
        if platform in BACKENDS:
            os.environ["MUJOCO_GL"] = platform
            return platform
        return None
    for backend in BACKENDS:
        renderer = probe(backend)
        if renderer is None:
            continue
        if "llvmpipe" in renderer and tensorflow_symbols_global():
            raise UserError(f"MuJoCo renders with Mesa's llvmpipe here ({backend}), which crashes once TensorFlow "
                            "is imported with its symbols global, as this process did: import rlexp (and build its "
                            "envs or agents) before importing tensorflow yourself")
        os.environ["MUJOCO_GL"] = os.environ["PYOPENGL_PLATFORM"] = backend
        log.debug(f"MuJoCo renders off-screen with MUJOCO_GL={backend} ({renderer})")
        return backend
    if has_display():
        return None
    raise UserError(f"MuJoCo can't render frames here: no display, and neither EGL nor OSMesa renders; {INSTALL}, "
                    "or set MUJOCO_GL")


class _BeforeMuJoCo(importlib.abc.MetaPathFinder):
    """Calls `choose_gl` when `mujoco` is about to be imported, once armed; the import itself proceeds as usual
    (the finder stays in sys.meta_path: removed while Python walks that list, it would make Python skip the next)."""

    armed = False

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "mujoco" and self.armed:
            self.armed = False
            choose_gl()
        return None


_HOOK = _BeforeMuJoCo()


def offscreen_rendering(render_mode: str | None = "rgb_array") -> None:
    """For envs that render `render_mode` frames: MuJoCo's GL backend chosen (`choose_gl`) before `mujoco` is first
    imported, or now if it is imported already and has not rendered yet. Nothing for other render modes."""
    if render_mode not in ARRAY_MODES:
        return
    if "mujoco" not in sys.modules:
        if _HOOK not in sys.meta_path:
            sys.meta_path.insert(0, _HOOK)
        _HOOK.armed = True
    elif "OpenGL" not in sys.modules:  # gymnasium reads MUJOCO_GL when it makes its renderer
        choose_gl()


def render_failure(error: BaseException, warnings: Sequence[str] = ()) -> str:
    """One line for a MuJoCo env whose frames failed to render (e.g. a MUJOCO_GL that can't work here), with the
    first warning the GL library gave (GLFW says why it failed that way) or else the error."""
    reason = warnings[0] if warnings else (str(error).strip().splitlines() or [type(error).__name__])[0]
    reason = re.sub(r"^\(\d+\) b(['\"])(.*)\1$", r"\2", reason)  # GLFW's "(65550) b'X11: ...'"
    chosen = os.environ.get("MUJOCO_GL")
    setting = f"MUJOCO_GL={chosen}" if chosen else "MuJoCo's default OpenGL backend (GLFW, which needs a display)"
    return (f"MuJoCo could not render a frame with {setting} ({reason}); unset MUJOCO_GL and PYOPENGL_PLATFORM to "
            f"let rlexp pick EGL or OSMesa, or {INSTALL}")
