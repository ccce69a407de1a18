"""Job slots that never wait for each other: each job (one seed of a trial, or one confirmation run) is one call
of Hydra's launcher on a thread of its own, so the moment a job ends, pruned, failed or complete, its slot is
free for the next one. Any launcher works (rlexp_local forks a process per job; rlexp_slurm submits one)."""
from __future__ import annotations

import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import optuna


@dataclass
class Job:
    """One process to run: its overrides, Hydra job number and folder, and what it belongs to."""

    overrides: list[str]
    number: int
    subdir: str
    owner: Any = None          # the trial (or confirmation run) it is part of
    seed_index: int = 0        # 0: the trial's first seed, which reports to the pruner
    seed: int | None = None
    population: list[int] = field(default_factory=list)  # the seeds it trains as one population, if any
    pack: list[Any] = field(default_factory=list)  # several trials in one population: each one's `Running`
    started: float = 0.0       # wall-clock seconds (time.time()), set by Slots
    ended: float = 0.0
    result: Any = field(default=None, repr=False)

    @property
    def members(self) -> int:
        """The seeds the job trains for each of its trials (a population's several)."""
        return len(self.population) or 1

    @property
    def owners(self) -> list[Any]:
        """The trials (their `Running`) the job trains: a packed job's several, else its owner."""
        return list(self.pack) or [self.owner]


@dataclass
class Running:
    """A trial in flight: its jobs (one per seed) and how they ended."""

    trial: optuna.trial.Trial
    jobs: list[Job]
    pending: list[Job] = field(default_factory=list)   # seeds not started yet
    ended: list[Job] = field(default_factory=list)
    stop: bool = False                                   # pruned or failed: its other seeds need not run

    @property
    def finished(self) -> bool:
        return len(self.ended) == len(self.jobs)


def runs_in_process(launcher: Any) -> bool:
    """Whether the launcher runs a job inside this process (Hydra's basic launcher): one job at a time, on the main
    thread (a trial sets signal handlers and Hydra's per-job state)."""
    return type(launcher).__name__ == "BasicLauncher"


class Slots:
    """`n` job slots over `launcher`: start a job in a free slot, wait for the next to end. A launcher that runs
    jobs in this process has one slot, and a job runs to its end when started."""

    def __init__(self, launcher: Any, n: int) -> None:
        self.inline = runs_in_process(launcher)
        self.launcher, self.n = launcher, 1 if self.inline else n
        self.pool = ThreadPoolExecutor(max_workers=self.n, thread_name_prefix="rlexp-job")
        self.running: dict[Future, Job] = {}

    @property
    def free(self) -> int:
        return self.n - len(self.running)

    def start(self, job: Job) -> None:
        assert self.free > 0, "no free slot"
        job.started = time.time()
        if self.inline:
            future: Future = Future()
            future.set_result(self._run(job))
            self.running[future] = job
        else:
            self.running[self.pool.submit(self._run, job)] = job

    def _run(self, job: Job) -> Any:
        try:
            (result,) = self.launcher.launch([job.overrides], initial_job_idx=job.number)
        except Exception as e:  # noqa: BLE001 - a job whose process died (killed, out of memory) or a launcher fault
            result = e
        job.ended = time.time()
        return result

    def next_done(self) -> list[Job]:
        """Block until at least one running job ends; those that ended, with their `result` set."""
        if not self.running:
            return []
        done, _ = wait(list(self.running), return_when=FIRST_COMPLETED)
        jobs = []
        for future in done:
            job = self.running.pop(future)
            job.result = future.result()
            jobs.append(job)
        return sorted(jobs, key=lambda j: j.ended)

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


def trial_console(launcher: Any) -> bool:
    """Whether a trial's info lines may go to its console: not where the launcher runs it in another process
    on the sweep's own console (joblib's), which would interleave every trial's lines with the sweep's."""
    module = type(launcher).__module__
    return runs_in_process(launcher) or module.startswith(("hydra_plugins.rlexp_sweeper",
                                                           "hydra_plugins.hydra_submitit_launcher"))


def stopped_by_ctrl_c(result: Any) -> bool:
    """Whether a job ended because a Ctrl-C reached its process (a KeyboardInterrupt, raw or as TrialFailed's line)
    before it reached the sweep: the sweep was interrupted, not the trial failed."""
    error = result if isinstance(result, BaseException) else None
    if error is None and result is not None and getattr(result.status, "name", "") == "FAILED":
        error = result._return_value
    return isinstance(error, KeyboardInterrupt) or str(error or "").startswith("KeyboardInterrupt")


def steps_on_disk(run_dir: Path) -> int:
    """The env steps a trial's run dir shows it trained (its history's last step; 0 without one): what a failed
    or killed job counts against the study's step budget."""
    history = run_dir / "history.parquet"
    if not history.is_file():
        return 0
    try:
        import pyarrow.compute as pc

        from rlexp.runs.history import read_parquet

        steps = read_parquet(history, columns=["step"])["step"]
        return int(pc.max(steps).as_py() or 0) if len(steps) else 0
    except Exception:  # noqa: BLE001 - a history cut short by the kill
        return 0
