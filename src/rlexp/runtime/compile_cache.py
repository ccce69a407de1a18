"""XLA programs kept between runs (run.compile_cache): TensorFlow's persistent compilation cache, in a folder
per TensorFlow version and CPU, so that a run whose graph was compiled before (the same command again, another
seed, a resumed run) loads it instead of compiling it (PPO CartPole's first call: ~1.3 s instead of ~2.5 s)."""
from __future__ import annotations

import hashlib
import logging
import os
import platform
from pathlib import Path

from rlexp.errors import UserError

log = logging.getLogger("rlexp")

FLAG = "--tf_xla_persistent_cache_directory"
LIMIT_BYTES = 512 * 2**20  # the oldest programs are deleted beyond this (one PPO CartPole program: ~3 MB)


def cpu_identity() -> str:
    """The CPU's model and instruction-set flags (XLA compiles for the host's instructions: a program compiled
    on another CPU could use instructions this one lacks, e.g. on a home directory shared across machines)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
        lines = [line for line in text.splitlines() if line.startswith(("model name", "flags"))]
        text = "\n".join(dict.fromkeys(lines))
    except OSError:
        text = platform.processor() or platform.machine()
    return text


def cache_dir(setting: object) -> Path | None:
    """The folder of run.compile_cache: auto -> $XDG_CACHE_HOME (or ~/.cache)/rlexp/xla/<TensorFlow version>-
    <CPU digest>; a path -> that path/<the same>; null or false -> None (no cache)."""
    if setting is None or setting is False:
        return None
    if setting is True or setting == "auto":
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rlexp" / "xla"
    elif isinstance(setting, str) and setting:
        base = Path(setting).expanduser()
    else:
        raise UserError(f"run.compile_cache={setting!r} must be auto, a folder, or null (no cache)")
    from importlib.metadata import version

    digest = hashlib.sha256(cpu_identity().encode()).hexdigest()[:12]
    return base / f"tf-{version('tensorflow')}-{digest}"


def configure_compile_cache(setting: object) -> Path | None:
    """Point TensorFlow's XLA cache at run.compile_cache's folder (made if missing, its oldest programs deleted
    beyond `LIMIT_BYTES`), unless TF_XLA_FLAGS names a cache folder already (the user's choice stands). Takes
    effect only before TensorFlow starts in this process (its first device listing reads its XLA flags): the
    task function calls it first. Returns the folder in use."""
    flags = os.environ.get("TF_XLA_FLAGS", "")
    if FLAG in flags:
        return Path(flags.split(FLAG, 1)[1].lstrip("= ").split()[0])
    try:
        folder = cache_dir(setting)
    except UserError:  # checks.check_settings names the key
        return None
    if folder is None:
        return None
    try:
        folder.mkdir(parents=True, exist_ok=True)
        prune(folder)
    except OSError as e:  # a read-only or full home: run without the cache
        log.warning(f"run.compile_cache: {folder} is not writable ({e.strerror}); XLA programs are compiled anew "
                    "(set run.compile_cache=<a writable folder>, or null)")
        return None
    os.environ["TF_XLA_FLAGS"] = f"{flags} {FLAG}={folder}".strip()
    return folder


def prune(folder: Path, limit: int = LIMIT_BYTES) -> None:
    """Delete the least recently written programs until the folder holds at most `limit` bytes."""
    files = sorted((f for f in folder.iterdir() if f.is_file()), key=lambda f: f.stat().st_mtime, reverse=True)
    total = 0
    for f in files:
        total += f.stat().st_size
        if total > limit:
            f.unlink(missing_ok=True)
