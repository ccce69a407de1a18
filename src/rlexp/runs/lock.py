"""One writer per run dir: training holds an exclusive lock (fcntl.flock) on `<run dir>/.train.lock`, which the
OS releases when the process ends however it ends, so a killed run never blocks the next +resume."""
from __future__ import annotations

import fcntl
import os
import shlex
import sys
import time
from pathlib import Path
from typing import IO

from rlexp.errors import UserError

LOCK_NAME = ".train.lock"


class RunLock:
    """The lock of one run dir, held from `acquire` until `release` (or the process's end)."""

    def __init__(self, run_dir: Path) -> None:
        self.path = Path(run_dir) / LOCK_NAME
        self.file: IO[str] | None = None

    def acquire(self, key: str) -> RunLock:
        """Take the lock, or raise one line naming the process that trains the run (`key`: the setting that
        named the run dir, e.g. +resume=<dir>)."""
        lock = open(self.path, "a+")
        try:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = read_holder(lock)
            lock.close()
            pid = holder[0] if holder[0].isdigit() else "?"
            command = f" ({holder[1]})" if len(holder) > 1 else ""
            raise UserError(f"{key}: process {pid}{command} is training this run; wait for it to end, or stop it "
                            f"(kill {pid}) and resume then") from None
        lock.seek(0)
        lock.truncate()
        lock.write(f"{os.getpid()}\n{current_command()}\n")
        lock.flush()
        self.file = lock
        return self

    def release(self) -> None:
        if self.file is not None:
            self.file.close()  # closing the descriptor releases the flock
            self.file = None


def read_holder(lock: IO[str], wait: float = 2.0) -> list[str]:
    """[pid, command] of the process holding the lock: it writes them just after taking the lock, so a process
    refused in between waits for them (up to `wait` seconds; then what is there)."""
    deadline = time.monotonic() + wait
    while True:
        lock.seek(0)
        text = lock.read()
        holder = text.strip().split("\n", 1)
        if (holder[0].isdigit() and len(holder) > 1 and text.endswith("\n")) or time.monotonic() > deadline:
            return holder
        time.sleep(0.02)


def current_command() -> str:
    """This process's command line as a user would type it (python -m rlexp ...)."""
    args = sys.argv[1:]
    program = "python -m rlexp" if sys.argv and sys.argv[0].endswith(("rlexp", "__main__.py")) else sys.argv[0]
    return " ".join([program, *(shlex.quote(arg) for arg in args)])
