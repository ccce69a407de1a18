"""The sweeper's promises (docs/tuning.md) checked across many configurations: real sweeps through the CLI, with
the real launcher, storages and pruners, of a stand-in agent (tests/standin/standin.py) whose score is a known
function of its learning rate and steps. A seeded generator draws each case: run length, rollout size,
evaluations during training or not, pruner and its warm-up, seeds per trial, job slots, storage, a step budget,
the agent's warm-ups (searched: they differ between trials; an off-policy one that one trial draws past
max_steps), noise, scores whose ranking changes as trials train, and a Ctrl-C or a kill of the sweep at a
random moment, after which the same command continues the study; the stops and storages are paired so that the
first cases kill a sweep on a journal file, Ctrl-C one on SQLite, run one to its end and, where
RLEXP_TEST_POSTGRES names a server, kill one on PostgreSQL. The suite runs 4 cases; RLEXP_HARNESS_CASES=100 runs
more (9 cover every stop on every storage). After the study ends:

- no trial that trained `run.max_steps` is PRUNED;
- every score the study holds is the agent's score at the step it is recorded at, and every trial's rungs are
  the same steps, counted from trial 0's warm-up whatever its own (trials compared at equal steps);
- each finished trial records the steps it trained, and the step budget is a hard cap across kills (whole last
  rollouts included, no slack), as each trial's own ledger of the steps it trained shows;
- the baseline (trial 0's values) is never pruned and is trained to its end, interrupted or not;
- no trial is left RUNNING (a killed sweep's trials are reclaimed), on every storage, and without a step budget
  the study holds n_trials trials besides the interrupted ones (those were run again);
- the report's best is the study's best COMPLETE trial;
- the same command with the trials scored another way (objective, aggregate, seeds per trial) is refused in one
  line and adds nothing to the study.
Two sweepers started together on one study (test_two_workers_fill_one_study: a journal file, and PostgreSQL where
a server is given, else SQLite) fill it to n_trials, and each one's
final report names the best trial of those that had ended and every trial still running.
"""
from __future__ import annotations

import math
import os
import random
import re
import signal
import subprocess
import sys
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from forked_cli import Started
from rlexp.sweep import halving_rungs

STANDIN = Path(__file__).parent / "standin"
sys.path.insert(0, str(STANDIN))
from standin import score  # noqa: E402

BASELINE_LR = 1e-5  # far from the best (1e-3): a pruner would stop it
N_TRIALS = 6
EPISODE = 10        # the stand-in's episode length: every report step is an episode's end


@dataclass
class Case:
    max_steps: int
    rollout: int
    eval_interval: int
    pruner: str
    warmup_steps: int | None
    seeds: int
    n_jobs: int
    storage: str
    budget: int | None
    warmups: tuple[int, ...]  # the stand-in's warm-ups: searched where there are several (each trial draws its own)
    off_policy: bool          # the warm-up is an off-policy agent's (random steps, stopped at max_steps)
    noise: float
    episode_length: int
    crossing: float       # the stand-in's early leaders fall behind late in the run (see standin.score)
    stop: str | None      # None, "SIGINT" (Ctrl-C) or "SIGKILL" (the sweep killed)
    stop_after: float     # seconds after the first trial started

    def overrides(self, folder: Path, ledger: Path) -> list[str]:
        storage = {"sqlite": f"sqlite:///{folder}/study.db", "journal": f"journal:///{folder}/study.log",
                   "postgresql": os.environ.get("RLEXP_TEST_POSTGRES", "")}[self.storage]
        study = f"h{zlib.crc32(str(folder).encode())}"
        args = ["agent=standin", "env=cartpole", f"run.max_steps={self.max_steps}", "run.eval_episodes=2",
                f"run.eval_interval={self.eval_interval}", "env.n_envs=1", f"agent.rollout={self.rollout}",
                f"agent.warmup={self.warmup_override}", f"agent.off_policy={str(self.off_policy).lower()}",
                f"agent.noise={self.noise}", "agent.delay=0.05",
                f"agent.episode_length={self.episode_length}", f"agent.crossing={self.crossing}",
                f"agent.scale={self.max_steps}",
                f"agent.ledger={ledger}", "agent.lr=tag(log,interval(1e-5,1e-1))",
                f"hydra.sweeper.n_trials={N_TRIALS}", f"hydra.sweeper.n_jobs={self.n_jobs}",
                f"hydra.sweeper.seeds_per_trial={self.seeds}", f"hydra.sweeper.pruner={self.pruner}",
                "hydra.sweeper.warmup_trials=1", f"hydra.sweeper.storage={storage}",
                f"hydra.sweeper.study_name={study}", f"hydra.sweeper.baseline={{{self.baseline}}}",
                "hydra.sweeper.heartbeat_interval=1", "hydra.sweeper.grace_period=3"]
        if self.warmup_steps is not None:
            args.append(f"hydra.sweeper.warmup_steps={self.warmup_steps}")
        if self.budget is not None:
            args.append(f"hydra.sweeper.max_env_steps={self.budget}")
        return args

    @property
    def baseline(self) -> str:
        """Trial 0's values: the baseline's learning rate and, where they are searched, the second warm-up (the
        study's learning start, which the other trials' rungs count from)."""
        return f"agent.lr:{BASELINE_LR}" + (f",agent.warmup:{self.warmups[1]}" if len(self.warmups) > 1 else "")

    @property
    def warmup_override(self) -> str:
        return f"choice({','.join(map(str, self.warmups))})" if len(self.warmups) > 1 else str(self.warmups[0])

    @property
    def grid(self) -> int:
        """The steps between two reports: every trial reports at the multiples of it."""
        return self.eval_interval or self.max_steps // 10


STOPS_ON = [("SIGKILL", "journal"), ("SIGINT", "sqlite"), (None, "postgresql"), ("SIGKILL", "postgresql"),
            (None, "journal"), ("SIGKILL", "sqlite"), ("SIGINT", "journal"), ("SIGINT", "postgresql"),
            (None, "sqlite")]  # every stop on every storage; the first four have a kill and a run without a stop


def draw(number: int) -> Case:
    """Case `number`: its stop and storage from STOPS_ON in turn (PostgreSQL's where a server is given), a step budget
    in half the cases, no evaluations during training (the default: reports of the training mean) in every other
    case, and there rollouts that pass a report step on their way past max_steps and successive halving with its
    top rung at 9/10 of max_steps, inside the last rollout; in the other cases the median, Hyperband and successive
    halving in turn, and warm-ups that differ between trials (trial 0 the second, other trials shorter and longer
    ones), every other one an off-policy warm-up that one trial draws longer than max_steps; the rest drawn from a
    generator seeded with the number."""
    rng = random.Random(number)
    max_steps = rng.choice([600, 1000, 1500])
    seeds = rng.choice([1, 1, 2])
    pairs = [p for p in STOPS_ON if p[1] != "postgresql" or os.environ.get("RLEXP_TEST_POSTGRES")]
    stop, storage = pairs[number % len(pairs)]
    # a step budget of 3 trials, or of 2 and a quarter: two trials at once whose last rollouts pass max_steps
    budget = {1: 3 * max_steps * seeds, 2: (2 * max_steps + max_steps // 4) * seeds}.get(number % 4)
    return Case(max_steps=max_steps, rollout=rng.choice([250, 420] if number % 2 == 0 else [30, 90, 250, 420]),
                eval_interval=0 if number % 2 == 0 else rng.choice([100, 250]),
                pruner="halving" if number % 2 == 0 else ["median", "hyperband", "halving"][number // 2 % 3],
                warmup_steps=max_steps // 10 if number % 2 == 0 else rng.choice([None, 100]), seeds=seeds,
                n_jobs=rng.choice([1, 2]), storage=storage, budget=budget,
                warmups=(0,) if number % 2 == 0 else (0, 200, max_steps + 100) if number % 4 == 1
                else rng.choice([(0, 200), (100, 300)]), off_policy=number % 4 == 1,
                noise=rng.choice([0.0, 0.0, 3.0]),
                episode_length=rng.choice([10, 7, 33]), crossing=rng.choice([0.0, 3.0, 6.0]), stop=stop,
                stop_after=rng.uniform(0.5, 3.0))


def start(cwd: Path, args: list[str]) -> Started:
    """The CLI's sweep of the stand-in, in its own session (a Ctrl-C reaches it and its trials)."""
    env = dict(os.environ, RLEXP_STANDIN="1", TF_CPP_MIN_LOG_LEVEL="3",
               PYTHONPATH=os.pathsep.join([str(STANDIN), *filter(None, [os.environ.get("PYTHONPATH")])]))
    return Started(["--config-dir", str(STANDIN / "conf"), "-m", *args], cwd, env, new_session=True)


def sweep(cwd: Path, case: Case, ledger: Path, stop: bool, extra: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    process = start(cwd, [*case.overrides(cwd, ledger), *extra])
    command = process.args
    if stop and case.stop:
        started = time.monotonic() + 120
        while time.monotonic() < started and not ledger.exists():  # the first trial is training
            time.sleep(0.05)
        time.sleep(case.stop_after)
        if case.stop == "SIGINT":
            os.killpg(process.pid, signal.SIGINT)  # Ctrl-C reaches the sweep and its trials
        else:
            os.kill(process.pid, signal.SIGKILL)  # the sweep alone: its trials end when they see it gone
    out, err = process.communicate(timeout=600)
    return subprocess.CompletedProcess(command, process.returncode, out + err, err)


def load(folder: Path, case: Case, ledger: Path) -> optuna.Study:
    from rlexp.sweep.storage import make_storage

    args = case.overrides(folder, ledger)
    url = next(a.split("=", 1)[1] for a in args if a.startswith("hydra.sweeper.storage="))
    name = next(a.split("=", 1)[1] for a in args if a.startswith("hydra.sweeper.study_name="))
    return optuna.load_study(study_name=name, storage=make_storage(url))


def study_of(folder: Path, case: Case, ledger: Path) -> list[optuna.trial.FrozenTrial]:
    return load(folder, case, ledger).get_trials()


def rescored(case: Case) -> str:
    """The case's command with its trials scored another way."""
    if case.seeds > 1:
        return "hydra.sweeper.aggregate=iqm"
    return random.Random(case.max_steps).choice(["hydra.sweeper.objective=auc", "hydra.sweeper.seeds_per_trial=2"])


def ledger_steps(ledger: Path) -> dict[str, int]:
    """Steps each run dir trained, from the stand-in's own ledger (a line per training iteration)."""
    trained: dict[str, int] = {}
    if ledger.exists():
        for line in ledger.read_text().splitlines():
            run_dir, steps = line.rsplit(" ", 1)
            trained[run_dir] = max(trained.get(run_dir, 0), int(steps))
    return trained


@pytest.mark.parametrize("number", range(int(os.environ.get("RLEXP_HARNESS_CASES", 4))))
def test_the_sweepers_promises_hold(tmp_path, number):
    case = draw(number)
    ledger = tmp_path / "ledger.txt"
    first = sweep(tmp_path, case, ledger, stop=True)
    outputs = [first.stdout]
    if case.stop:
        if case.stop == "SIGKILL":
            time.sleep(4)  # past the grace period: the killed sweep's trials are stale
        again = sweep(tmp_path, case, ledger, stop=False)
        outputs.append(again.stdout)
        assert again.returncode == 0, f"{case}\n{again.stdout[-3000:]}"
    else:
        assert first.returncode == 0, f"{case}\n{first.stdout[-3000:]}"
    study = load(tmp_path, case, ledger)
    trials = study.get_trials()
    trained = ledger_steps(ledger)
    context = f"{case}\n" + "\n".join(o[-2500:] for o in outputs)

    # no trial is left RUNNING, and the study holds its trials (or the budget ended it)
    assert all(t.state != TrialState.RUNNING for t in trials), context
    counted = [t for t in trials if not (t.user_attrs.get("interrupted") or t.user_attrs.get("refused"))]
    if case.budget is None:
        assert len(counted) == N_TRIALS and all(t.state != TrialState.FAIL for t in counted), context
    # no trial that trained max_steps is PRUNED: a pruned seed stopped before max_steps
    for t in trials:
        if t.state == TrialState.PRUNED:
            seeds = [d for d in trained if f"/trial_{t.number}/" in d + "/" or d.endswith(f"/trial_{t.number}")]
            assert seeds and all(trained[d] < case.max_steps for d in seeds), (t.number, seeds, context)
    # each finished trial records the steps its seeds trained (a pruned one's too: the study's budget counts them)
    for t in counted:
        if t.state in (TrialState.COMPLETE, TrialState.PRUNED):
            seeds = [d for d in trained if d.endswith(f"/trial_{t.number}") or f"/trial_{t.number}/" in d]
            assert t.user_attrs.get("env_steps") == sum(trained[d] for d in seeds), (t.number, seeds, context)
    # trials are compared at equal steps: every report before max_steps, and every rung, is on the common grid; the
    # rungs are the same steps for every trial, counted from trial 0's warm-up whatever each trial's own; no trial
    # is judged before it; and (no noise, one linear piece) each score is the agent's own at that very step
    warmup = {t.number: t.params.get("agent.warmup", case.warmups[0]) for t in trials}
    start = study.user_attrs["learning_start"]
    assert start == warmup[0], (start, context)
    rung_steps = halving_rungs(case.max_steps, start, case.warmup_steps, case.grid)
    gap = case.grid + max(case.rollout, case.episode_length)  # between the measurements a report lies between
    median_from = case.warmup_steps if case.warmup_steps is not None else start + (case.max_steps - start) // 3
    for t in trials:
        lr = t.params.get("agent.lr", BASELINE_LR)
        rungs = {int(k[5:]): v for k, v in t.user_attrs.items() if re.fullmatch(r"rung_\d+", k)}
        assert set(rungs) <= set(rung_steps), (t.number, rungs, rung_steps, context)
        assert t.user_attrs.get("learning_start", start) == start, (t.number, context)  # where its pruner counted from
        if t.state == TrialState.PRUNED:
            at = t.user_attrs["pruned_at"]
            assert at > start and (at in rung_steps if case.pruner != "median" else at >= median_from), \
                (t.number, at, context)
        for step, value in [*t.intermediate_values.items(), *rungs.items()]:
            if step < case.max_steps:
                assert step % case.grid == 0, (t.number, step, context)
            w = warmup[t.number]
            if case.noise == 0 and (w == 0 or step + gap <= w or step - gap >= w):
                expected = score(lr, step, w, scale=case.max_steps, crossing=case.crossing)
                assert value == pytest.approx(expected, rel=1e-9, abs=1e-9), (t.number, step, value, context)
    # the budget is a hard cap across kills: what every seed trained, whole last rollouts included
    if case.budget is not None:
        assert sum(trained.values()) <= case.budget, (trained, context)
    # the baseline is never pruned, and is trained to its end, interrupted or not, while the budget holds a trial
    baseline = [t for t in trials if t.params.get("agent.lr") == BASELINE_LR]  # no sampled value is exactly it
    assert baseline and all(t.state != TrialState.PRUNED for t in baseline), context
    if not any(t.state == TrialState.COMPLETE for t in baseline):  # an interrupted one is run again, unless
        spent = re.search(r"budget is spent: ([\d,]+) of .*one more trial could train ([\d,]+)", outputs[-1])
        number = [int(g.replace(",", "")) for g in spent.groups()] if spent else None  # the cap wins: too few left
        assert case.stop and number and case.budget - number[0] < number[1], context
        assert not re.search(r"^trial +\d+ +(COMPLETE|PRUNED|FAIL)", outputs[-1], re.M), context  # (none ran first)
    # the report's best is the study's best complete trial
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    if complete:
        best = max(complete, key=lambda t: t.value)
        m = re.search(r"best: trial (\d+), objective (\S+)", outputs[-1])
        assert m and int(m.group(1)) == best.number, context
    # the same study scored another way: refused in one line, nothing added
    if case.stop is None:
        other = sweep(tmp_path, case, ledger, stop=False, extra=(rescored(case),))
        lines = [line for line in other.stderr.splitlines() if line.strip()]
        assert other.returncode != 0 and len(lines) == 1 and "scored its trials another way" in lines[0], \
            (other.returncode, other.stdout[-2000:], context)
        assert len(study_of(tmp_path, case, ledger)) == len(trials), context


def report_of(output: str) -> tuple[int, list[int]]:
    """A sweeper's final report: (the best trial it names, the trials it says are still running elsewhere)."""
    best = re.search(r"best: trial (\d+)", output)
    running = re.search(r"trial\(s\) ([\d, ]+) still running on another worker", output)
    assert best, output[-3000:]
    return int(best.group(1)), [int(n) for n in running.group(1).split(",")] if running else []


@pytest.mark.parametrize("storage", ["journal", "postgresql" if os.environ.get("RLEXP_TEST_POSTGRES") else "sqlite"])
def test_two_workers_fill_one_study(tmp_path, storage):
    """Two sweepers on one study, started together with one job slot each: the study ends with exactly n_trials
    trials, and each sweeper's report names the best of the trials not running when it ended, and those running."""
    case = Case(max_steps=600, rollout=30, eval_interval=100, pruner="median", warmup_steps=None, seeds=1, n_jobs=1,
                storage=storage, budget=None, warmups=(0,), off_policy=False, noise=0.0, episode_length=10,
                crossing=1.0, stop=None, stop_after=0.0)
    ledger = tmp_path / "ledger.txt"
    workers = [start(tmp_path, case.overrides(tmp_path, ledger)) for _ in range(2)]
    outputs = [w.communicate(timeout=600) for w in workers]
    context = "\n".join(out[-2500:] + err[-2500:] for out, err in outputs)
    assert all(w.returncode == 0 for w in workers), context
    trials = study_of(tmp_path, case, ledger)
    assert len(trials) == N_TRIALS and all(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in trials), \
        context
    for out, err in outputs:
        best, running = report_of(out + err)
        ended = [t for t in trials if t.state == TrialState.COMPLETE and t.number not in running]
        assert best == max(ended, key=lambda t: t.value).number, (best, running, context)
