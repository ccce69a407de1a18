"""Memory a run will take, estimated before anything is allocated, against what the machine has available:
rollout storage and the update's activations (on-policy agents), replay storage (off-policy agents); env
copies' in rlexp.envs.copies.
A run that can't fit is refused with one line naming the key, the estimate and the memory available."""
from __future__ import annotations

import logging
import math
import os
import resource
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from rlexp.errors import UserError

log = logging.getLogger("rlexp")

MEMINFO = "/proc/meminfo"
CGROUP_LIMITS = (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),  # cgroup v2
                 ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"))

@dataclass(frozen=True)
class Need:
    """One large allocation of a run: what it is, its estimated size, how it was counted, the keys that set it
    (as `key=value`) and the keys that shrink it."""

    what: str
    nbytes: int
    detail: str
    keys: str
    fix: str


def available_memory() -> int | None:
    """Bytes that new allocations can take: /proc/meminfo's MemAvailable (else the free pages sysconf counts),
    within the room left under the cgroup's memory limit and the process's data-size limit; None where none of
    them can be read."""
    available = _meminfo_available(MEMINFO)
    if available is None:
        try:
            available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            available = None
    for room in (cgroup_room(), data_limit_room()):
        if room is not None:
            available = room if available is None else min(available, room)
    return available


def data_limit_room(status: str = "/proc/self/status") -> int | None:
    """What the process's data-size limit (ulimit -d, RLIMIT_DATA) leaves beyond its data segment now."""
    limit = resource.getrlimit(resource.RLIMIT_DATA)[0]
    if limit == resource.RLIM_INFINITY:
        return None
    try:
        with open(status) as f:
            used = next((int(line.split()[1]) * 1024 for line in f if line.startswith("VmData:")), 0)
    except (OSError, ValueError, IndexError):
        used = 0
    return max(limit - used, 0)


def _meminfo_available(path: str) -> int | None:
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def cgroup_room() -> int | None:
    """The cgroup's memory limit less its usage, where a limit is set (cgroup v2, else v1)."""
    for limit_file, usage_file in CGROUP_LIMITS:
        try:
            with open(limit_file) as f:
                limit = f.read().strip()
            with open(usage_file) as f:
                usage = int(f.read().strip())
        except (OSError, ValueError):
            continue
        if limit == "max" or int(limit) >= 1 << 60:  # no limit (v1 writes a huge number)
            return None
        return max(int(limit) - usage, 0)
    return None


def human(nbytes: float) -> str:
    """1536 -> '1.5 KiB', 3 * 2**30 -> '3.0 GiB'."""
    units = ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB")
    power = 0
    while nbytes >= 1024 and power < len(units) - 1:
        nbytes, power = nbytes / 1024, power + 1
    return f"{nbytes:.0f} bytes" if power == 0 else f"{nbytes:.1f} {units[power]}"


def check_fits(needs: Sequence[Need], available: int | None = None) -> None:
    """Refuse the run (one line naming the largest need's keys) if its needs together exceed the available
    memory (default: `available_memory()`)."""
    needs = [need for need in needs if need.nbytes > 0]
    total = sum(need.nbytes for need in needs)
    available = available_memory() if available is None else available
    if not needs or available is None or total <= available:
        return
    largest = max(needs, key=lambda need: need.nbytes)
    parts = "; ".join(f"{need.what} {human(need.nbytes)}: {need.detail}" for need in needs)
    raise UserError(f"{largest.keys}: the run needs about {human(total)} of memory ({parts}), more than the "
                    f"{human(available)} available; lower {largest.fix}")


def space_bytes(space: Any) -> int:
    """Bytes of one sample of a gymnasium Box/Discrete/... space as rlexp stores it (vector observations as
    float32, images as uint8; discrete actions as int64)."""
    import numpy as np

    shape = tuple(getattr(space, "shape", ()) or ())
    dtype = np.dtype(getattr(space, "dtype", None) or np.int64)
    itemsize = 1 if dtype == np.uint8 else 8 if dtype.kind in "iu" else 4
    return itemsize * math.prod(shape)


def activation_floats(preset: Mapping[str, Any], obs_shape: Sequence[int], heads: int, image: bool = False) -> int:
    """Floats a model from `preset` keeps per input row for its gradient: each layer's output (the common
    layers once, the per-head layers once per head; an image's [0, 1]-scaled copy). Conv layers take (N, H, W)
    stacks (moved to channels-last) or (H, W[, C]) images."""
    shape = list(obs_shape)
    if len(shape) == 3 and shape[0] < shape[-1]:
        shape = [shape[1], shape[2], shape[0]]
    common, tower = math.prod(obs_shape) if image else 0, 0
    for spec in preset.get("layers") or []:
        kind = spec.get("type", "dense")
        if spec.get("output"):
            break
        if kind == "conv" and len(shape) >= 2:
            kernel, stride = int(spec.get("kernel", 1)), int(spec.get("stride", 1))
            same = spec.get("padding", "valid") == "same"
            shape = [-(-d // stride) if same else max((d - kernel) // stride + 1, 1) for d in shape[:2]]
            shape.append(int(spec.get("filters", 1)))
            size = math.prod(shape)
        elif kind in ("dense", "lstm", "gru"):
            size = int(spec.get("units") or 0) * {"lstm": 5, "gru": 4}.get(kind, 1)  # gates' inputs and the output
        else:  # flatten: a view of its input
            continue
        if spec.get("common"):
            common += size
        else:
            tower += size
    return common + tower * max(int(heads), 1)


def init_default(cls: type, name: str, default: Any = None) -> Any:
    """The default of keyword `name` in the nearest `__init__` of `cls`'s classes that has one."""
    import inspect

    for klass in cls.__mro__:
        if "__init__" in vars(klass):
            parameter = inspect.signature(klass.__init__).parameters.get(name)
            if parameter is not None and parameter.default is not parameter.empty:
                return parameter.default
    return default
