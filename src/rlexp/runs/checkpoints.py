"""Checkpoint files as commands find them: which one +resume continues from (last.ckpt, or the previous one kept
beside it when last.ckpt is damaged), one line naming a damaged file and the complete one to use instead, and
what a failed write leaves to resume from."""
from __future__ import annotations

import json
import logging
import re
import zipfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from rlexp.errors import UserError

log = logging.getLogger("rlexp")

LAST, PREVIOUS, BEST = "last.ckpt", "previous.ckpt", "best.ckpt"
DAMAGED_SUFFIX = ".damaged"  # a damaged last.ckpt that resume moved aside (kept for inspection)
SERIES = re.compile(r"step_(\d+)\.ckpt$")
# what reading a truncated or corrupted .npz raises (zip directory missing, CRC mismatch, short read, ...)
READ_ERRORS = (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, zlib.error)


class DamagedCheckpoint(UserError):
    """A checkpoint that can't be read back whole; the message names the file and what to use instead."""


def read_state(path: str | Path) -> dict[str, Any]:
    """The JSON state stored in a checkpoint (agent name, steps, config, ...)."""
    try:
        with np.load(path) as data:
            return json.loads(bytes(data["state"]).decode())
    except READ_ERRORS as e:
        raise damaged(Path(path), e) from None


def read_arrays(path: str | Path) -> dict[str, np.ndarray]:
    """Every array of a checkpoint, read (and CRC-checked) in full."""
    try:
        with np.load(path) as data:
            return {name: data[name] for name in data.files}
    except READ_ERRORS as e:
        raise damaged(Path(path), e) from None


def is_complete(path: Path) -> bool:
    """Whether `path` holds a checkpoint whose every member reads back with its checksum."""
    try:
        with zipfile.ZipFile(path) as archive:
            return archive.testzip() is None and "state.npy" in archive.namelist()
    except READ_ERRORS:
        return False


def damaged(path: Path, error: BaseException) -> DamagedCheckpoint:
    """One line: `path` can't be read (and why), and the complete checkpoint of the same run to use instead."""
    reason = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    return DamagedCheckpoint(f"checkpoint {path} is not a readable rlexp checkpoint: damaged or truncated "
                             f"({reason}); {alternative(path)}")


def alternative(path: Path) -> str:
    """What to use instead of a damaged checkpoint: the run's kept previous one, else its newest step_<n>."""
    previous = path.with_name(PREVIOUS)
    if path.name != PREVIOUS and is_complete(previous):
        return f"{previous} (step {steps_of(previous):,}) is complete: pass that file instead (+resume falls back to it)"
    for series in sorted(path.parent.glob("step_*.ckpt"), key=series_step, reverse=True):
        if series != path and is_complete(series):
            return (f"{series} holds the weights at step {series_step(series):,}: start a new run from them with "
                    f"+init_from={series}")
    best = path.with_name(BEST)
    if path.name != BEST and is_complete(best):
        return f"{best} holds the run's best weights: start a new run from them with +init_from={best}"
    return "no complete checkpoint of this run is left: train it again"


def series_step(path: Path) -> int:
    match = SERIES.search(path.name)
    return int(match.group(1)) if match else -1


def steps_of(path: Path) -> int:
    return int(read_state(path).get("steps", 0))


def resume_checkpoint(run_dir: Path, key: str) -> Path | None:
    """The checkpoint +resume continues from: checkpoints/last.ckpt when it is complete; when it is damaged (or
    missing) the kept previous.ckpt, saying so (the damaged file is moved aside to last.ckpt.damaged); None when
    the run wrote no checkpoint yet. A damaged last.ckpt without a complete previous one is one line."""
    folder = run_dir / "checkpoints"
    last, previous = folder / LAST, folder / PREVIOUS
    if is_complete(last):
        return last
    if not last.exists() and not previous.exists():
        return None
    if is_complete(previous):
        if last.exists():
            aside = last.with_name(LAST + DAMAGED_SUFFIX)
            last.replace(aside)
            log.warning(f"warning: {last} is damaged (kept as {aside.name}): resuming from {previous} "
                        f"(step {steps_of(previous):,})")
        else:
            log.warning(f"warning: {last} is missing: resuming from {previous} (step {steps_of(previous):,})")
        return previous
    target = last if last.exists() else previous
    try:
        read_state(target)
        read_arrays(target)
    except DamagedCheckpoint as e:
        raise DamagedCheckpoint(f"{key}: {e}") from None
    raise DamagedCheckpoint(f"{key}: {damaged(target, ValueError('a member fails its checksum'))}")


CHECKPOINT_SHARE = 0.02  # the most of the training time that writing `last` checkpoints may take


def checkpoint_wait(interval: float, write_seconds: float) -> float:
    """Seconds from one `last` checkpoint to the next: `interval` (run.checkpoint_interval; 0: after every
    iteration), or where writing one took more than CHECKPOINT_SHARE of that (a replay buffer of hundreds of MB),
    `write_seconds / CHECKPOINT_SHARE`, so that checkpoints never slow training by more than that share."""
    if interval <= 0:
        return 0.0
    return max(float(interval), write_seconds / CHECKPOINT_SHARE)


def write_failure(error: OSError, run_dir: Path) -> str:
    """One line for a write that failed during training (disk full, permissions), true to what is on disk: the
    checkpoint +resume will continue from, or that there is none yet and +resume starts the run again."""
    what = f"could not write {error.filename or 'a file'}: {error.strerror or error}"
    if not (run_dir / ".hydra" / "config.yaml").exists():
        return f"{what}; nothing was trained yet: free space (or fix permissions) and run the command again"
    good = last_good(run_dir)
    if good is not None:
        return (f"{what}; {good[0]} (step {good[1]:,}) is intact: free space (or fix permissions), then continue "
                f"with python -m rlexp +resume={run_dir}")
    folder = run_dir / "checkpoints"
    weights = f" ({folder / BEST} holds weights only)" if (folder / BEST).exists() else ""
    return (f"{what}; the run has no checkpoint to resume from yet{weights}: free space (or fix permissions), then "
            f"python -m rlexp +resume={run_dir} trains it again from step 0")


def last_good(run_dir: Path) -> tuple[Path, int] | None:
    """The complete checkpoint +resume would continue from (last.ckpt, else previous.ckpt) and its step."""
    for name in (LAST, PREVIOUS):
        path = run_dir / "checkpoints" / name
        if is_complete(path):
            return path, steps_of(path)
    return None


def diverged(error: Exception, run_dir: Path) -> str:
    """One line for a run whose loss became NaN or infinite, naming the last good checkpoint (if there is one)."""
    good = last_good(run_dir)
    where = f"{good[0]} (step {good[1]:,}) holds the last good weights" if good else \
        "no checkpoint was written before it"
    return f"training diverged: {error}; {where}"
