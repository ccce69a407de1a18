"""Console and run-log plumbing: info on stdout, warnings and errors on stderr, each run's main.log."""
from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOG_FILE = "main.log"
FILE_FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] %(message)s"


class BelowWarning(logging.Filter):
    """Pass records below WARNING (the stdout handler's filter; stderr takes the rest)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno < logging.WARNING


def attach_run_log(run_dir: Path, *earlier: str) -> logging.Handler:
    """Append this process's log records to <run dir>/main.log (a resumed run continues its own log), after the
    `earlier` lines the run printed before its dir existed (the preset it uses)."""
    handler = logging.FileHandler(run_dir / LOG_FILE, mode="a", delay=True)
    handler.setFormatter(logging.Formatter(FILE_FORMAT))
    logger = logging.getLogger("rlexp")
    for line in earlier:
        handler.handle(logger.makeRecord(logger.name, logging.INFO, __file__, 0, line, None, None))
    logging.getLogger().addHandler(handler)
    return handler


def detach_run_log(handler: logging.Handler) -> None:
    logging.getLogger().removeHandler(handler)
    handler.close()


def console_handlers() -> list[logging.Handler]:
    """The command's console: plain messages, info on stdout, warnings and errors on stderr."""
    out, err = logging.StreamHandler(sys.stdout), logging.StreamHandler(sys.stderr)
    out.addFilter(BelowWarning())
    err.setLevel(logging.WARNING)
    for handler in (out, err):
        handler.setFormatter(logging.Formatter("%(message)s"))
    return [out, err]


@contextmanager
def verbosity(verbose: int, logger: logging.Logger | None = None) -> Iterator[None]:
    """rlexp's lines while it lasts (Stable-Baselines3's `verbose`): 0 warnings only; 1 also info lines (progress,
    evaluations), on the console as the command prints them where nothing has configured logging (no handler on
    the 'rlexp' logger or above it: a script, a notebook, a batch job); where something has, through its handlers."""
    logger = logger or logging.getLogger("rlexp")
    level, added = logger.level, []
    if verbose < 1:
        logger.setLevel(logging.WARNING)
    else:
        if not logger.hasHandlers():
            added = console_handlers()
        if logger.getEffectiveLevel() > logging.INFO:
            logger.setLevel(logging.INFO)
    for handler in added:
        logger.addHandler(handler)
    try:
        yield
    finally:
        for handler in added:
            logger.removeHandler(handler)
        logger.setLevel(level)


def quiet_shared_console() -> None:
    """In a trial of rlexp's sweeper that shares the sweep's console (a launcher such as joblib's, which neither
    runs it in the sweep's own process nor captures its output): its info lines go to its main.log only, so the
    console keeps the sweep's one line per trial; warnings and errors still show."""
    spec = os.environ.get("RLEXP_OPTUNA_TRIAL")
    if not spec or json.loads(spec).get("console", True):
        return
    for handler in logging.getLogger().handlers:
        if getattr(handler, "stream", None) is sys.stdout:
            handler.setLevel(logging.WARNING)
