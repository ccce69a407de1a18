"""Where a study lives: SQLite (default), an Optuna journal file, or any SQLAlchemy URL (PostgreSQL for many
machines); the lock under which workers claim trials, and the heartbeat that tells a killed sweep's trials."""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import random
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import optuna
from optuna.trial import TrialState

from rlexp.errors import SweepError

log = logging.getLogger("rlexp.sweep")
JOURNAL = "journal:///"
SQLITE = "sqlite:///"


def journal_path(url: str) -> Path:
    return Path(url[len(JOURNAL):]).expanduser().resolve()


def check_writable_file(url: str, path: Path) -> None:
    """The storage file's folder exists (made if missing) and takes files: one line naming the key otherwise."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, probe = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".probe")
        os.close(handle)
        os.unlink(probe)
    except OSError as e:
        raise SweepError(f"hydra.sweeper.storage={url}: {path.parent} can't be written ({e.strerror or e}); use a "
                         "path in a writable folder") from None


def make_storage(url: str, heartbeat_interval: int | None = None, grace_period: int | None = None):
    """The study's storage. `journal:///study.log` (relative) or `journal:////abs/study.log`, as SQLite's URLs:
    Optuna's journal file (a shared filesystem, no server); anything else is an SQLAlchemy URL. SQLite and journal
    paths become absolute (trials run elsewhere), and SQLite waits for locks instead of failing."""
    if url.startswith(JOURNAL):
        from optuna.storages.journal import JournalFileBackend, JournalStorage

        path = journal_path(url)
        check_writable_file(url, path)
        try:
            return JournalStorage(JournalFileBackend(str(path)))
        except OSError as e:
            raise SweepError(f"hydra.sweeper.storage={url}: {e.strerror or e}; use journal:///<writable path>") from None
    engine_kwargs: dict[str, Any] = {}
    if url.startswith(SQLITE):
        path = Path(url[len(SQLITE):]).expanduser().resolve()
        check_writable_file(url, path)
        url = f"{SQLITE}{path}"
        engine_kwargs["connect_args"] = {"timeout": 120}
    import sqlalchemy.exc

    for attempt in range(6):
        try:
            return optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs, heartbeat_interval=heartbeat_interval,
                                              grace_period=grace_period)
        except (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.ProgrammingError, sqlalchemy.exc.OperationalError) as e:
            # two sweepers creating the schema of a fresh database at once: the loser retries
            error = e
            if attempt == 5 or not url.startswith(("sqlite", "postgresql")) or "could not connect" in str(e):
                break
            time.sleep(0.5 + random.random())
        except Exception as e:  # noqa: BLE001 - a bad URL, a missing driver, a server that is down
            error = e
            break
    raise SweepError(f"hydra.sweeper.storage={url}: {type(error).__name__}: {str(error).splitlines()[0]}; use "
                     "sqlite:///path/optuna.db, journal:///path/study.log or postgresql://user@host/db")


def storage_url(storage, url: str) -> str:
    """The URL a trial's process opens the same storage with."""
    if url.startswith(JOURNAL):
        return JOURNAL + str(journal_path(url))  # journal:////abs/path, as SQLite's
    return getattr(storage, "url", url)


@contextlib.contextmanager
def claim_lock(storage, url: str, study_name: str) -> Iterator[None]:
    """Held while a worker counts the study's trials and creates its next one, so that workers on one storage
    (processes or machines) never make more than n_trials trials nor run a grid point twice: a file lock beside
    a SQLite or journal file (fcntl; a journal on a shared filesystem), PostgreSQL's advisory lock, MySQL's
    GET_LOCK; other storages go without."""
    if url.startswith((JOURNAL, SQLITE)):
        path = journal_path(url) if url.startswith(JOURNAL) else Path(url[len(SQLITE):])
        lock_path = path.with_name(f".{path.name}.{study_name}.lock")
        with open(lock_path, "a+b") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
        return
    engine = getattr(storage, "engine", None)
    dialect = getattr(getattr(engine, "dialect", None), "name", "")
    if dialect not in ("postgresql", "mysql"):
        yield
        return
    import sqlalchemy

    key = int.from_bytes(hashlib.sha1(f"rlexp:{study_name}".encode()).digest()[:8], "big", signed=True)
    with engine.connect() as connection:
        if dialect == "postgresql":
            connection.execute(sqlalchemy.text("SELECT pg_advisory_lock(:k)"), {"k": key})
        else:
            connection.execute(sqlalchemy.text("SELECT GET_LOCK(:k, -1)"), {"k": str(key)})
        try:
            yield
        finally:
            if dialect == "postgresql":
                connection.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:k)"), {"k": key})
            else:
                connection.execute(sqlalchemy.text("SELECT RELEASE_LOCK(:k)"), {"k": str(key)})
            connection.commit()


HEARTBEAT_ATTR = "heartbeat"  # a running trial's last sign of life, where the storage keeps no heartbeat (journal)


class Heartbeat:
    """Records a heartbeat for the running trials so that a later sweeper can tell them from a killed one's: the
    storage's own (SQL databases), else the time in the trial's user attribute `heartbeat` (a journal file)."""

    def __init__(self, storage, interval: float) -> None:
        self.storage, self.interval, self.trial_ids = storage, interval, set()
        self.native = hasattr(storage, "record_heartbeat")
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(self.interval):
            self.beat()

    def beat(self) -> None:
        for trial_id in list(self.trial_ids):
            try:
                if self.native:
                    self.storage.record_heartbeat(trial_id)
                else:
                    self.storage.set_trial_user_attr(trial_id, HEARTBEAT_ATTR, time.time())
            except Exception as e:  # noqa: BLE001 - a missed heartbeat must not stop the sweep
                log.debug(f"heartbeat failed: {e}")

    def add(self, trial_id: int) -> None:
        self.trial_ids.add(trial_id)
        self.beat()

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()


def stale_trial_ids(storage, study_id: int, grace_period: float) -> list[int]:
    """RUNNING trials with no heartbeat for `grace_period` seconds: left by a sweeper that was killed. SQL storages
    keep heartbeats themselves; on others a trial's `heartbeat` attribute (or, without one, its start) tells."""
    if hasattr(storage, "_get_stale_trial_ids"):
        return list(storage._get_stale_trial_ids(study_id))
    now = time.time()
    stale = []
    for trial in storage.get_all_trials(study_id, deepcopy=False, states=(TrialState.RUNNING,)):
        last = trial.user_attrs.get(HEARTBEAT_ATTR)
        if last is None and trial.datetime_start is not None:
            last = trial.datetime_start.timestamp()
        if last is not None and now - float(last) > grace_period:
            stale.append(trial._trial_id)
    return stale
