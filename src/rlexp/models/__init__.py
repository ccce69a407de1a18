"""Models: Keras networks from conf/model presets, their NumPy mirrors for acting, and fused optimizers.

`rlexp.models.build_model` etc. (the names of rlexp.models.networks) resolve on first use (TensorFlow loads
then, not on `import rlexp.models`)."""
from importlib import import_module
from typing import Any


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    try:
        return getattr(import_module("rlexp.models.networks"), name)
    except AttributeError:
        raise AttributeError(f"module 'rlexp.models' has no attribute {name!r}") from None
