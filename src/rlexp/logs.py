"""Console and run-log plumbing: info on stdout, warnings and errors on stderr, each run's main.log."""
from __future__ import annotations

import logging
from pathlib import Path

LOG_FILE = "main.log"
FILE_FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] %(message)s"


class BelowWarning(logging.Filter):
    """Pass records below WARNING (the stdout handler's filter; stderr takes the rest)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno < logging.WARNING


def attach_run_log(run_dir: Path) -> logging.Handler:
    """Append this process's log records to <run dir>/main.log (a resumed run continues its own log)."""
    handler = logging.FileHandler(run_dir / LOG_FILE, mode="a", delay=True)
    handler.setFormatter(logging.Formatter(FILE_FORMAT))
    logging.getLogger().addHandler(handler)
    return handler


def detach_run_log(handler: logging.Handler) -> None:
    logging.getLogger().removeHandler(handler)
    handler.close()
