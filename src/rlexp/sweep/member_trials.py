"""The trial side of a population in a sweep: which members are which trial's, each trial's reporter and what the
job returns.

A population job trains one trial's seeds (`hydra.sweeper.population=true`) or several trials packed into one job
(`hydra.sweeper.trials_per_job`, whose spec lists them in `pack`: members in trial order, each trial's seeds in
order). Each trial's first member reports to that trial (rlexp.sweep.pruning); a pruned trial stops its own members
and the population goes on. A packed job returns each trial's outcome and its members' objectives (`trials`)."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import optuna

from rlexp.errors import TrialFailed
from rlexp.runs.tracking import Tracker
from rlexp.sweep.pruning import trial_metrics, trial_reporter, trial_spec

STOPPED_BY_TRIAL = ("pruned", "not started")  # member stop reasons of a trial, not of the member: nothing to evaluate


class MemberTrial(Tracker):
    """One trial's members: its first member's tracker with the trial's reporter (None: none here). When the
    pruner stops the trial, each of its members stops where it is; the population's other members go on."""

    def __init__(self, tracker: Tracker, reporter: Tracker | None, agent: Any, members: range,
                 trial_id: int | None = None) -> None:
        self.tracker, self.reporter, self.agent = tracker, reporter, agent
        self.members, self.trial_id = members, trial_id
        self.pruned: optuna.TrialPruned | None = None
        self.refused: str | None = None  # the step budget could not hold it: its members never trained

    def stop(self, reason: str) -> None:
        records = self.agent.member_records()
        for member in self.members:
            if records[member].reason is None:
                self.agent.stop_member(member, reason)

    def scalars(self, step: int, values: Mapping[str, float]) -> None:
        self.tracker.scalars(step, values)
        if self.reporter is None or self.pruned is not None:
            return
        try:
            self.reporter.scalars(step, values)
        except optuna.TrialPruned as e:
            self.pruned = e
            self.stop(f"pruned: {e}")

    def _each(self, name: str, *args: Any) -> None:
        for part in (self.tracker, self.reporter):
            if part is not None:
                getattr(part, name)(*args)

    def trained(self, steps: int) -> None:
        self._each("trained", steps)

    def flush(self) -> None:
        self._each("flush")

    def end_of_training(self) -> None:
        self._each("end_of_training")

    def close(self, failed: bool = False) -> None:
        self._each("close", failed)


def member_trials(trackers: list[Tracker], max_steps: int, agent: Any, members: int) -> list[MemberTrial]:
    """In a sweep trial's population, each trial's first member's tracker (in `trackers`, in place) with its trial's
    reporter; [] outside sweeps. A packed trial the step budget refuses stops its members before they train."""
    spec = trial_spec()
    if spec is None:
        return []
    pack = spec.get("pack") or [{"trial_id": spec.get("trial_id"), "reference": spec.get("reference", False)}]
    per = members // len(pack)
    trials = []
    for t, entry in enumerate(pack):
        first = t * per
        own = {**spec, "trial_id": entry["trial_id"], "reference": bool(entry.get("reference")), "leader": True,
               "seed_index": 0, "seeds": per}
        trial = MemberTrial(trackers[first], None, agent, range(first, first + per), entry["trial_id"])
        try:
            trial.reporter = trial_reporter(max_steps, 0, agent, spec=own)
        except TrialFailed as e:  # the budget can't hold it (ledger.TrialSteps.declare)
            if not spec.get("pack"):
                raise
            trial.refused = str(e)
            trial.stop(str(e))
        trackers[first] = trial
        trials.append(trial)
    return trials


def population_metrics(means: list[float], summaries: list[dict], seconds: float) -> dict:
    """What a sweep trial's population returns: each member's objectives (`members`, in seed order), the steps of
    all of them and the population's training seconds; its own objectives are the members' means."""
    members = [trial_metrics(mean, [], summary["steps"], seconds) for mean, summary in zip(means, summaries)]
    objectives = {key: float(np.mean([m[key] for m in members])) for key in ("final_eval", "mean_last_evals", "auc")}
    return objectives | {"steps": sum(s["steps"] for s in summaries), "train_seconds": seconds, "members": members}


def diverged_member(summaries: Sequence[Mapping[str, Any]], seeds: Sequence[int], members: range) -> str | None:
    """The first of `members` whose training diverged, as a seed's own job says it (None: none did)."""
    failed = next((i for i in members if str(summaries[i]["reason"]).startswith("diverged")), None)
    if failed is None:
        return None
    return f"training diverged: member {failed} (seed {seeds[failed]}) {summaries[failed]['reason']}"


def trial_result(trial: MemberTrial, means: list[float], summaries: list[dict], seconds: float,
                 seeds: Sequence[int], members: int) -> dict[str, Any]:
    """One packed trial's outcome: {state: complete | pruned | failed, error, steps, and (complete) its members'
    objectives}; its share of the job's training seconds is its members' share."""
    rows = list(trial.members)
    steps = sum(int(summaries[i]["steps"]) for i in rows)
    share = seconds * len(rows) / members
    if trial.refused is not None:
        return {"state": "failed", "error": trial.refused, "steps": 0}
    if trial.pruned is not None:
        return {"state": "pruned", "error": str(trial.pruned), "steps": steps}
    error = diverged_member(summaries, seeds, trial.members)
    if error is not None:
        return {"state": "failed", "error": error, "steps": steps}
    metrics = population_metrics([means[i] for i in rows], [summaries[i] for i in rows], share)
    return {"state": "complete", **metrics}


def pack_metrics(trials: list[MemberTrial], means: list[float], summaries: list[dict], seconds: float,
                 seeds: Sequence[int]) -> dict[str, Any]:
    """What a packed job returns: each trial's result (`trials`, by trial id), all members' steps and the job's
    training seconds; its own objectives are its completed members' means."""
    results = {str(t.trial_id): trial_result(t, means, summaries, seconds, seeds, len(seeds)) for t in trials}
    done = [m for r in results.values() if r["state"] == "complete" for m in r["members"]]
    objectives = {key: float(np.mean([m[key] for m in done])) if done else float("nan")
                  for key in ("final_eval", "mean_last_evals", "auc")}
    return objectives | {"steps": sum(int(s["steps"]) for s in summaries), "train_seconds": seconds,
                         "trials": results}
