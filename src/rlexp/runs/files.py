"""Crash-safe file writes (temporary file, fsync, atomic rename), and checks that output folders can be written."""
from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Callable, IO, Iterator

from rlexp.errors import UserError


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "wb", keep: str | os.PathLike | None = None) -> Iterator[IO]:
    """Open a temporary file next to `path`; on success it replaces `path` in one rename.

    A crash at any instant leaves either the old file or the new one, never a partial file. With `keep`, the
    file `path` held until now stays as `keep` (a hard link made just before the rename; the older `keep` is
    removed before the write, so the disk never holds more than two copies beside the one being written).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if keep is not None and path.exists():
        Path(keep).unlink(missing_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, mode) as f:
            os.fchmod(f.fileno(), 0o666 & ~current_umask())  # mkstemp's 0600 opened up as open() would
            yield f
            f.flush()
            os.fsync(f.fileno())
        if keep is not None and path.exists():
            with contextlib.suppress(OSError):  # a filesystem without hard links keeps no previous file
                os.link(path, keep)
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(e, OSError) and e.filename in (None, tmp):
            e.filename = str(path)  # the file being written, not its temporary name
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


def write_atomic(path: str | os.PathLike, writer: Callable[[IO], None], keep: str | os.PathLike | None = None) -> None:
    """Call `writer(file)` on a temporary file, then atomically move it to `path` (see `atomic_write`)."""
    with atomic_write(path, keep=keep) as f:
        writer(f)


def remove_leftovers(*directories: str | os.PathLike) -> None:
    """Delete temporary files that a killed process left behind in atomic_write (never a complete file)."""
    for directory in directories:
        for tmp in Path(directory).glob(".*.tmp"):
            with contextlib.suppress(OSError):
                tmp.unlink()


def cannot_make_dir_in(directory: str | os.PathLike) -> str | None:
    """None if this process can make a directory in `directory` (tried: a temporary one made and removed at once,
    which also catches what permission bits don't show, such as /proc or a read-only mount), else why not."""
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".rlexp-check-", dir=directory))
    except OSError as e:
        return e.strerror or str(e)
    return None


def check_writable(target: Path, key: str) -> None:
    """`target` is a directory, or can be made as one: its nearest existing ancestor is a directory this process
    can write (permission bits, then a directory made and removed there). Makes nothing that stays."""
    if target.exists() and not target.is_dir():
        raise UserError(f"{key} is a file; pass a directory")
    existing = target
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise UserError(f"{key}: {existing} is a file, so {target} can't be made; pass a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UserError(f"{key}: {existing} is not writable; pick a directory you can write to")
    reason = cannot_make_dir_in(existing)
    if reason:
        raise UserError(f"{key}: {existing} can't hold a new directory ({reason}); pick a directory you can write to")
