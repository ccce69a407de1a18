"""The trial side of a sweep: the pruners, the reporter that feeds a trial's scores to them from inside its
process, and the metrics a trial returns.

Pruning only stops unfinished trials: a trial reports every score (the curves in the study), but the pruner is
asked only at reports after the study's learning start (an off-policy agent's random warm-up scores the same
whatever its hyperparameters; the study takes trial 0's, so that every trial has the same rungs) and before the
trial's last one (a trial that trained its full length is COMPLETE)."""
from __future__ import annotations

import binascii
import json
import logging
import math
import os
import time
from typing import Any, Callable, Mapping

import optuna
from optuna.trial import TrialState

from rlexp.errors import SweepError
from rlexp.sweep.ledger import LEARNING_START, TrialSteps, most_steps, study_learning_start
from rlexp.sweep.trials import REFERENCE_ATTR

log = logging.getLogger("rlexp.sweep")
TRIAL_ENV = "RLEXP_OPTUNA_TRIAL"  # JSON {storage, study, trial_id, pruner...} set for each trial's process
PRUNED_AT, DECIDED, LEADER_ENDED = "pruned_at", "decided_step", "leader_ended"
FOLLOWER_WAIT_S = 120.0  # how long a trial's other seed waits at a report for its first seed's decision there


# ----- the pruners ----------------------------------------------------------------------------------------
def halving_rungs(max_steps: int, learning_start: int, first: int | None, grid: int = 1) -> list[int]:
    """The steps where successive halving compares trials: learning_start + first x 1, 3, 9, ... before max_steps
    (a comparison at the trial's end would stop nothing), each moved up to the trials' next report mark (a multiple
    of `grid`), where every trial has a score at that very step. first=None: a ninth of the steps after learning
    starts, so the rungs are at 1/9 and 1/3 of them."""
    span = max_steps - learning_start
    first, grid = max(1, first if first else span // 9), max(1, grid)
    rungs, k = [], 0
    while learning_start + first * 3 ** k < max_steps:
        rung = -(-(learning_start + first * 3 ** k) // grid) * grid
        if rung < max_steps and rung not in rungs:
            rungs.append(rung)
        k += 1
    return rungs


class Halving(optuna.pruners.BasePruner):
    """Asynchronous successive halving (Optuna's SuccessiveHalvingPruner, reduction factor 3) at given rung steps,
    each trial scored by its report at the rung's very step (`PruningReporter` reports on a grid the rungs lie on).
    At each rung a trial goes on only if it is among the best 1/reduction_factor (at least one) of the trials
    that have reached that rung, itself included; a tie goes to the trial that got there first, so equal scores
    don't promote every trial. A rung where every trial scored the same ranks nothing (a sparse reward:
    MountainCar's -200 until a trial first reaches the goal), so the trial goes on to where they may differ.
    While fewer than `min_trials` trials have reached a rung, it goes on. A trial's rung scores are kept in its
    user attributes `rung_<step>` (trials.csv shows them)."""

    def __init__(self, rungs: list[int], reduction_factor: int = 3, min_trials: int = 1) -> None:
        self.rungs, self.reduction_factor, self.min_trials = list(rungs), reduction_factor, max(1, min_trials)

    def prune(self, study: optuna.Study, trial: optuna.trial.FrozenTrial,
              peers: Callable[[optuna.trial.FrozenTrial], bool] | None = None) -> bool:
        """Whether to stop `trial` at its last report; `peers`: the trials it is ranked with (all by default)."""
        step = trial.last_step
        if step is None:
            return False
        maximize = study.direction == optuna.study.StudyDirection.MAXIMIZE
        decided = study._storage.get_trial(trial._trial_id).user_attrs  # not the Trial's cached copy
        for rung in self.rungs:
            key = f"rung_{rung}"
            if step < rung:
                return False
            value = trial.intermediate_values.get(rung)
            if key in decided or value is None:
                continue  # decided at this rung already, or no score at its step (the trial's first came later)
            if math.isnan(value):
                return True
            arrived = time.time()
            study._storage.set_trial_user_attr(trial._trial_id, key, float(value))
            study._storage.set_trial_user_attr(trial._trial_id, f"{key}_at", arrived)
            others = [(t.user_attrs[key], t.user_attrs.get(f"{key}_at", 0.0))
                      for t in study.get_trials(deepcopy=False) if t.number != trial.number and key in t.user_attrs
                      and (peers is None or peers(t))]
            if len(others) + 1 < self.min_trials:
                continue
            if others and all(other == value for other, _ in others):
                continue  # the rung ranks nothing: longer trials may tell them apart
            ahead = sum(1 for other, at in others
                        if (other > value if maximize else other < value) or (other == value and at <= arrived))
            if ahead >= max(1, (len(others) + 1) // self.reduction_factor):
                return True
        return False


class Hyperband(optuna.pruners.BasePruner):
    """Hyperband (reduction factor 3) as brackets of `Halving` at the same rungs: bracket b ranks its trials from
    rung b on (the last bracket at none: its trials train to the end), each trial at its report at the rung's very
    step. A trial's bracket comes from the study's name and its number, weighted as Optuna's HyperbandPruner
    weighs them (most trials in the brackets that stop early). The baseline (REFERENCE_ATTR) is scored at every
    rung and ranked with the trials of every bracket."""

    def __init__(self, rungs: list[int]) -> None:
        self.brackets = [Halving(rungs[b:], 3, 1) for b in range(len(rungs) + 1)]
        n = len(self.brackets)
        self.weights = [math.ceil(n * 3 ** (n - 1 - b) / (n - b)) for b in range(n)]

    def bracket(self, study_name: str, number: int) -> int:
        left = binascii.crc32(f"{study_name}_{number}".encode()) % sum(self.weights)
        for b, weight in enumerate(self.weights):
            left -= weight
            if left < 0:
                return b
        return len(self.weights) - 1

    def prune(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> bool:
        if trial.user_attrs.get(REFERENCE_ATTR):
            return self.brackets[0].prune(study, trial)
        b = self.bracket(study.study_name, trial.number)
        return self.brackets[b].prune(study, trial, peers=lambda t: bool(t.user_attrs.get(REFERENCE_ATTR))
                                      or self.bracket(study.study_name, t.number) == b)


def make_pruner(name: str, warmup_trials: int, warmup_steps: int | None, max_steps: int = 0,
                learning_start: int = 0, grid: int = 1) -> optuna.pruners.BasePruner:
    """median: Optuna's MedianPruner, deciding after warmup_trials complete trials and warmup_steps env steps
    (None: a third of the steps after learning starts, as RL Zoo waits for a third of the evaluations);
    halving: `Halving` with its first rung warmup_steps after learning starts (None: a ninth of the steps
    after it; rungs on the report marks, multiples of `grid`), comparing once warmup_trials trials reached a rung;
    hyperband: `Hyperband` at halving's rungs: brackets of successive halving that start at growing rungs, the
    last of which prunes nothing; none. Every trial of a study is given the same `learning_start` (the study's,
    not its own warm-up): rungs compare trials at equal steps."""
    if name == "median":
        warmup = warmup_steps if warmup_steps is not None else learning_start + (max_steps - learning_start) // 3
        return optuna.pruners.MedianPruner(n_startup_trials=warmup_trials, n_warmup_steps=warmup)
    if name == "halving":
        return Halving(halving_rungs(max_steps, learning_start, warmup_steps, grid), 3, warmup_trials)
    if name == "hyperband":
        return Hyperband(halving_rungs(max_steps, learning_start, warmup_steps, grid))
    if name in ("none", None):
        return optuna.pruners.NopPruner()
    raise SweepError(f"hydra.sweeper.pruner={name} is unknown; use median, halving, hyperband or none")


# ----- inside a trial's process -------------------------------------------------------------------------
def trial_spec() -> dict[str, Any] | None:
    """What the sweeper told this trial's process (None outside rlexp's sweeps)."""
    spec = os.environ.get(TRIAL_ENV)
    return json.loads(spec) if spec else None


class PruningReporter(TrialSteps):
    """A tracker for a trial's process (and `TrialSteps`'s account of its steps). It reports a score to the study on
    a grid of steps that is the same in every trial: every `run.eval_interval` steps from the periodic evaluations,
    or else every max_steps / `reports` steps from the training mean return. A trial measures its score where its
    own rollouts or fused calls end (an on-policy rollout of 32,768 steps is evaluated after 65,536 steps), so the
    score at a grid step is interpolated linearly between the measurements on either side of it: trials are
    compared at equal steps whatever their rollout sizes. A grid step before a trial's first measurement gets no
    score. The pruner is asked only after the study's learning start (`study_learning_start`: the same for every
    trial, whatever its own warm-up, `learning_start`) and before max_steps, and stops the trial
    (optuna.TrialPruned) when it says so; the final evaluation is recorded, never judged.

    With several seeds per trial the first seed reports and decides; another seed at the same report waits for
    that decision (while the first seed runs) and stops where the first seed was pruned."""

    def __init__(self, spec: Mapping[str, Any], max_steps: int, eval_interval: int, learning_start: int = 0,
                 most: int | None = None) -> None:
        super().__init__(spec, most)
        self.on_eval = eval_interval > 0
        self.interval = int(eval_interval) if self.on_eval else max(1, max_steps // max(1, int(spec["reports"])))
        number = self.storage.get_trial(self.trial_id).number
        self.learning_start = study_learning_start(self.storage, self.url, self.study_name, number, learning_start)
        warmup = spec.get("warmup_steps")
        pruner = make_pruner(spec["pruner"], int(spec["warmup_trials"]), None if warmup is None else int(warmup),
                             max_steps, self.learning_start, grid=self.interval)
        study = optuna.load_study(study_name=spec["study"], storage=self.storage, pruner=pruner)
        self.leader = bool(spec.get("leader", True))
        self.reference = bool(spec.get("reference"))  # the baseline: scored at the rungs, never stopped
        self.max_steps, self.ended = max_steps, False
        self.trial = optuna.trial.Trial(study, self.trial_id)
        if self.leader:
            self.trial.set_user_attr("pid", os.getpid())
            self.trial.set_user_attr(LEARNING_START, self.learning_start)  # where its pruner counts from
        self.next_report = self.interval
        self.measured: tuple[int, float] | None = None  # the newest (step, score) before this one

    def end_of_training(self) -> None:
        """Training is over: what comes now (the final evaluation) is recorded, not judged."""
        self.ended = True

    def scalars(self, step: int, values: Mapping[str, float]) -> None:
        score = values.get("eval/mean_return" if self.on_eval else "episode/mean_return")
        if score is None or not math.isfinite(score):
            return
        if self.ended:
            if self.leader and self.on_eval and step not in self.trial_values():
                self.trial.report(float(score), step)
            return
        previous, self.measured = self.measured, (step, float(score))
        while self.next_report <= step:
            mark = self.next_report
            self.next_report += self.interval
            if mark == step:
                value = float(score)
            elif previous is None:
                continue  # before the trial's first score: not known there
            else:
                (before, then), now = previous, float(score)
                value = then + (now - then) * (mark - before) / (step - before)
            self.report(mark, value, trained=max(step, self.trained_steps))

    def report(self, mark: int, value: float, trained: int) -> None:
        """The trial's score at grid step `mark`, after it trained `trained` steps: recorded, and judged by the
        pruner before max_steps (a last rollout or fused call collected whole, past max_steps, came after the trial
        trained its full length)."""
        judged = self.learning_start < mark < self.max_steps and trained < self.max_steps
        if self.leader:
            self.trial.report(value, mark)
            pruned = judged and self.trial.should_prune() and not self.reference
            if pruned:
                self.storage.set_trial_user_attr(self.trial_id, PRUNED_AT, mark)
            self.storage.set_trial_user_attr(self.trial_id, DECIDED, mark)
        else:
            pruned = self.leader_pruned(mark)
        if pruned:
            message = f"pruned at step {mark:,} (score {value:.4g})"
            log.info(message)
            error = optuna.TrialPruned(message)
            error.steps = trained  # the env steps it trained, for the study's step budget
            raise error

    def trial_values(self) -> dict[int, float]:
        return self.storage.get_trial(self.trial_id).intermediate_values

    def leader_pruned(self, mark: int) -> bool:
        """Whether the trial's first seed was pruned at or before `mark`: waits (while it runs) until it has
        decided at `mark`, so this seed never trains on past the point where the first one stopped."""
        deadline = time.monotonic() + FOLLOWER_WAIT_S
        while True:
            trial = self.storage.get_trial(self.trial_id)
            attrs = trial.user_attrs
            if PRUNED_AT in attrs:
                return int(attrs[PRUNED_AT]) <= mark
            if attrs.get(DECIDED, -1) >= mark or attrs.get(LEADER_ENDED) or trial.state != TrialState.RUNNING \
                    or time.monotonic() > deadline:
                return False
            time.sleep(0.05)


def trial_reporter(max_steps: int, eval_interval: int, agent: Any = None,
                   spec: Mapping[str, Any] | None = None) -> TrialSteps | None:
    """This process's tracker when it runs a trial of rlexp's sweeper (None elsewhere): the pruning reporter where
    the trial is pruned, else its account of its steps (`TrialSteps`). `agent` (the trial's, built) gives its most
    steps (`most_steps`) and its warm-up, the env steps before its first update. `spec`: one packed trial's (else
    this process's own, `trial_spec`)."""
    spec = trial_spec() if spec is None else spec
    if not spec or spec.get("trial_id") is None:
        return None
    most = most_steps(agent, max_steps) if agent is not None else None
    if not spec.get("prune"):
        return TrialSteps(spec, most)
    warmup = max(0, int(agent.first_update_step()) - 1) if agent is not None else 0
    return PruningReporter(spec, max_steps, eval_interval, warmup, most)


def curve_objectives(points: list[tuple[float, float]], last: int) -> dict[str, float]:
    """mean_last_evals (the mean of the last `last` evaluations) and auc (the area under the evaluation curve
    by the trapezoid rule, divided by the steps it spans: its mean height) of (step, mean return) points."""
    steps = [float(s) for s, _ in points]
    values = [float(v) for _, v in points]
    if not points:
        return {"mean_last_evals": math.nan, "auc": math.nan}
    area = sum((steps[i + 1] - steps[i]) * (values[i] + values[i + 1]) / 2 for i in range(len(points) - 1))
    span = steps[-1] - steps[0]
    return {"mean_last_evals": sum(values[-last:]) / len(values[-last:]), "auc": area / span if span > 0 else values[0]}


def trial_metrics(final_eval: float, evaluations: list[Mapping[str, float]], steps: int,
                  train_seconds: float) -> dict[str, float] | None:
    """What a trial's process returns to the sweeper (None outside rlexp's sweeps): every objective, so the
    sweeper picks `objective`. The final evaluation closes the curve of the periodic ones."""
    spec = trial_spec()
    if spec is None:
        return None
    points = [(row["step"], row["mean_return"]) for row in evaluations]
    if math.isfinite(final_eval) and (not points or points[-1][0] < steps):
        points.append((steps, final_eval))
    return {"final_eval": final_eval, **curve_objectives(points, int(spec.get("last_evals", 3))),
            "train_seconds": train_seconds, "steps": steps}
