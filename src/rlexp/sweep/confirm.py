"""The confirmation round: the search's best configurations trained again on fresh seeds, n_jobs at a time, their
objectives kept in the study (so a continued sweep runs only the missing ones)."""
from __future__ import annotations

import logging
import time
from typing import Any

import optuna
from optuna.trial import TrialState

from rlexp.sweep.populations import member_results
from rlexp.sweep.scheduler import Job, Slots

log = logging.getLogger("rlexp.sweep")
CONFIRM_SEED_OFFSET = 10_000  # confirmation seeds: seed + 10000 + j, never a seed the search trained on


class Confirmation:
    """The confirmation's half of OptunaSweep (which sets confirm, seed, n_seeds, objective, s and launcher and
    gives ranked, trial_overrides and outcome)."""

    confirm: dict[str, int]
    seed: int
    n_seeds: int
    objective: str
    s: dict[str, Any]
    launcher: Any

    def run_confirmation(self, study: optuna.Study) -> None:
        """Re-run the top_k configurations on `seeds` fresh seeds, n_jobs at a time; their results are kept in the
        study's user attributes (confirm_<trial>: {seed: objective}), so a continued sweep runs only the missing
        ones."""
        top_k, n = self.confirm["top_k"], self.confirm["seeds"]
        top = self.ranked(study)[:top_k]
        seeds = [self.seed + CONFIRM_SEED_OFFSET + j for j in range(n)]
        jobs = []
        first = self.next_job_number(study)
        for trial in top:
            done = study.user_attrs.get(f"confirm_{trial.number}", {})
            missing = [seed for seed in seeds if str(seed) not in done]
            if self.population and missing:  # one population of the missing seeds
                subdir = f"confirm/trial_{trial.number}"
                overrides = self.trial_overrides(study, trial, None, subdir, report=False)
                jobs.append(Job(overrides + self.population_overrides(missing), first + len(jobs), subdir,
                                owner=trial, population=missing))
                continue
            for seed in seeds:
                if str(seed) not in done:
                    subdir = f"confirm/trial_{trial.number}_seed_{seed}"
                    jobs.append(Job(self.trial_overrides(study, trial, seed, subdir, report=False), first + len(jobs),
                                    subdir, owner=trial, seed=seed))
        if not jobs:
            return
        log.info(f"confirmation: the top {len(top)} configuration(s) on {n} fresh seeds "
                 f"({seeds[0]}..{seeds[-1]}): {len(jobs)} run(s)")
        start = time.perf_counter()
        slots = Slots(self.launcher, self.s["n_jobs"])
        try:
            waiting = list(jobs)
            while waiting or slots.running:
                while waiting and slots.free:
                    slots.start(waiting.pop(0))
                for job in slots.next_done():
                    state, metrics, error = self.outcome(job.result)
                    if state != TrialState.COMPLETE:
                        seeds = job.population or job.seed
                        log.warning(f"confirmation of trial {job.owner.number}, seed(s) {seeds}: {state.name} "
                                    f"{error or ''}")
                        continue
                    done = dict(study.user_attrs.get(f"confirm_{job.owner.number}", {}))
                    for seed, member in zip(job.population or [job.seed], member_results(metrics)):
                        done[str(seed)] = member[self.objective]
                    study.set_user_attr(f"confirm_{job.owner.number}", done)
        finally:
            slots.close()
        log.info(f"confirmation took {time.perf_counter() - start:.1f} s")

    def next_job_number(self, study: optuna.Study) -> int:
        """The first job number after every search trial's (trial n's jobs are n * seeds_per_trial + i)."""
        return (max((t.number for t in study.get_trials(deepcopy=False)), default=-1) + 1) * self.n_seeds
