"""Crash-safe file writes: temporary file, fsync, atomic rename."""
from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Callable, IO, Iterator


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "wb") -> Iterator[IO]:
    """Open a temporary file next to `path`; on success it replaces `path` in one rename.

    A crash at any instant leaves either the old file or the new one, never a partial file.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, mode) as f:
            os.fchmod(f.fileno(), 0o666 & ~current_umask())  # mkstemp's 0600 opened up as open() would
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # make the rename itself durable
        dir_fd = os.open(path.parent, os.O_RDONLY)
        os.fsync(dir_fd)
        os.close(dir_fd)


PROC_STATUS = "/proc/self/status"


def current_umask() -> int:
    """The process's file-creation mask, read from /proc without changing it; where /proc is missing, read by
    setting a strict one for an instant and restoring it."""
    try:
        with open(PROC_STATUS) as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


def write_atomic(path: str | os.PathLike, writer: Callable[[IO], None]) -> None:
    """Call `writer(file)` on a temporary file, then atomically move it to `path`."""
    with atomic_write(path) as f:
        writer(f)


def remove_leftovers(*directories: str | os.PathLike) -> None:
    """Delete temporary files that a killed process left behind in atomic_write (never a complete file)."""
    for directory in directories:
        for tmp in Path(directory).glob(".*.tmp"):
            with contextlib.suppress(OSError):
                tmp.unlink()
