"""TensorFlow without its start-up noise: the C++ runtime writes absl, oneDNN, CUDA-stub and CPU-feature lines
straight to file descriptor 2 while it loads (before Python's logging or `TF_CPP_MIN_LOG_LEVEL` apply to
them). `import_tensorflow` loads it with descriptor 2 captured and passes on every other line; in rlexp's own
processes also without the packages Keras imports for features rlexp doesn't use (`skip_keras_extras`), and
with MuJoCo's and the ALE's own messages off where they say nothing to act on (`quiet_libraries`)."""
from __future__ import annotations

import logging
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType

NOISE = re.compile(r"absl::InitializeLog|oneDNN custom operations|cudart_stub|cuda_platform|cuda_executor|cuInit|"
                   r"cpu_feature_guard|To enable the following instructions|Unable to register cu|computation_placer|"
                   r"TF-TRT Warning|XDG_RUNTIME_DIR")


@contextmanager
def filtered_stderr() -> Iterator[None]:
    """Capture what anything (C++ included) writes to descriptor 2; afterwards write back all but the noise."""
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:  # no descriptor 2 to capture
        yield
        return
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            lines = capture.read().decode(errors="replace").splitlines(keepends=True)
            kept = "".join(line for line in lines if not NOISE.search(line))
            if kept:
                sys.stderr.write(kept)
                sys.stderr.flush()


_started = False
_deferred = False
_without_extras = False

# What Keras (and TensorFlow's legacy Keras) import at their own import when installed, for features rlexp never
# uses: the scikit-learn wrappers (scikit-learn, SciPy), image plots (matplotlib, OpenCV), pandas inputs to `fit`
# and HDF5 model files (h5py). ~1 s of a 2-core machine's start; rlexp imports pandas and matplotlib itself where
# it needs them (rlexp's checkpoints are .npz files).
KERAS_EXTRAS = ("sklearn", "scipy", "matplotlib", "cv2", "pandas", "h5py")


def skip_keras_extras() -> None:
    """Have `import_tensorflow` import Keras without `KERAS_EXTRAS`: for rlexp's own processes (the command,
    the sweep launcher's forkserver), whose code uses none of the Keras features they serve. Those packages
    import as usual afterwards; the Keras features stay off in this process. Not for the Python API, whose
    users may want them."""
    global _without_extras
    _without_extras = True


@contextmanager
def imports_refused(modules: tuple[str, ...]) -> Iterator[None]:
    """While it lasts, importing one of `modules` (not imported yet) raises ImportError, as if not installed."""
    refused = [name for name in modules if name not in sys.modules]
    for name in refused:
        sys.modules[name] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        for name in refused:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]


@contextmanager
def start_deferred() -> Iterator[None]:
    """While it lasts, `import_tensorflow` imports without starting (no devices listed, no cuInit, thread
    pools still unset), whatever its caller asks: for a process that will fork (the sweep launcher's
    forkserver) while it imports modules that start TensorFlow on import."""
    global _deferred
    previous, _deferred = _deferred, True
    try:
        yield
    finally:
        _deferred = previous


# TensorFlow's module that loads its C++ library with RTLD_GLOBAL (for custom op libraries, which rlexp doesn't
# load): refused, the library loads with its symbols private, as on macOS. Global, its copy of LLVM takes the place
# of Mesa's inside llvmpipe, Mesa's software OpenGL (MuJoCo's frames through EGL or OSMesa without a GPU), which
# then crashes at its first frame (rlexp.envs.rendering).
GLOBAL_SYMBOLS = ("tensorflow.python.pywrap_dlopen_global_flags",)


def import_tensorflow(start: bool = True) -> None:
    """Import TensorFlow and Keras and (with `start`) enumerate devices, which calls cuInit, quietly, once per
    process, with TensorFlow's symbols private (`GLOBAL_SYMBOLS`). A process that will fork imports without
    starting (`start=False`, or under `start_deferred`)."""
    global _started
    start = start and not _deferred
    if _started or (not start and "tensorflow" in sys.modules):
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    refused = (*GLOBAL_SYMBOLS, *(KERAS_EXTRAS if _without_extras else ()))
    with filtered_stderr(), imports_refused(refused):
        import keras  # noqa: F401
        import tensorflow as tf

        if start:
            tf.config.list_physical_devices()
            _started = True


# MuJoCo's warnings about gymnasium's own model files (its XML uses compiler attributes MuJoCo deprecates): nothing
# a user can act on. Printed by MuJoCo's default handler on every model compile, which also writes MUJOCO_LOG.TXT.
MUJOCO_NOISE = re.compile(r"is deprecated and will be removed")


def mujoco_warning(message: str) -> None:
    """MuJoCo's warning handler in rlexp's processes: drops `MUJOCO_NOISE`, logs the rest as warnings."""
    if not MUJOCO_NOISE.search(message):
        logging.getLogger("rlexp").warning(f"MuJoCo warning: {message}")


def _quiet_mujoco(mujoco: ModuleType) -> None:
    mujoco.set_mju_user_warning(mujoco_warning)


def _quiet_ale(ale_py: ModuleType) -> None:
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)  # its banner, printed by every new emulator


_libraries_quiet = False


def quiet_libraries() -> None:
    """In rlexp's own processes (the command, the sweep launcher's forkserver): MuJoCo's warnings about gymnasium's
    model files and the ALE's start-up banner off, from when each library is imported (or now, if it is)."""
    global _libraries_quiet
    if _libraries_quiet:
        return
    _libraries_quiet = True
    import wrapt

    wrapt.when_imported("mujoco")(_quiet_mujoco)
    wrapt.when_imported("ale_py")(_quiet_ale)
