"""The study's env-step budget (`hydra.sweeper.max_env_steps`): what one trial may train (its most steps, which
its process declares before training), what each trial trained (a finished or failed one's own count, an
interrupted or killed one's from its folders, or its most steps where they lag behind), and what is left for the
next trial."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import optuna
from omegaconf import OmegaConf
from optuna.distributions import BaseDistribution

from rlexp.errors import SweepError
from rlexp.sweep.scheduler import Job, Running, steps_on_disk
from rlexp.sweep.settings import _shown
from rlexp.sweep.ledger import trained_attr
from rlexp.sweep.trials import CEILING_ATTR, REFUSED_ATTR, RESERVED_ATTR, steps_held


class Budget:
    """Step accounting for OptunaSweep (its `cap`, `config`, `job_steps`, `n_seeds` and `sweep_dir`)."""

    cap: int
    config: Any
    job_steps: int
    n_seeds: int
    storage: Any
    sweep_dir: Path

    def trial_steps(self, fixed: Mapping[str, str], distributions: Mapping[str, BaseDistribution]) -> int:
        """The env steps one trial may train on all its seeds (its run.max_steps x seeds_per_trial), for
        max_env_steps: run.max_steps must be one value for every trial."""
        if any(k.lstrip("+~") == "run.max_steps" for k in distributions):
            raise SweepError("hydra.sweeper.max_env_steps budgets trials of one length: drop the sweep over "
                             "run.max_steps or hydra.sweeper.max_env_steps")
        value = next((v for k, v in fixed.items() if k.lstrip("+~") == "run.max_steps"), None)
        value = OmegaConf.select(self.config, "run.max_steps", default=None) if value is None else value
        try:
            return int(float(value)) * self.n_seeds
        except (TypeError, ValueError):
            raise SweepError(f"hydra.sweeper.max_env_steps needs a number of run.max_steps, not {_shown(value)}") \
                from None

    def budget_left(self, study: optuna.Study) -> int:
        """max_env_steps less what finished trials trained and what running ones may train (their most steps)."""
        return self.cap - steps_held(study.get_trials(deepcopy=False))

    def seed_steps(self, trials: list[optuna.trial.FrozenTrial]) -> int:
        """The env steps a new trial's seed is held at until it declares its own most steps: run.max_steps, or the
        most any trial of the study declared where that is more (a last rollout collected whole past max_steps)."""
        return max([self.job_steps, *(int(t.user_attrs.get(CEILING_ATTR, 0)) for t in trials)])

    def held_per_seed(self, attrs: Mapping[str, Any]) -> int:
        """The env steps a trial (its user attributes `attrs`) holds for each seed: its declared most steps, else
        its reservation's share, else run.max_steps."""
        if CEILING_ATTR in attrs:
            return int(attrs[CEILING_ATTR])
        return int(attrs.get(RESERVED_ATTR, self.job_steps * self.n_seeds)) // self.n_seeds

    def interrupted_steps(self, owner: Running) -> int:
        """The env steps an interrupted trial counts against max_env_steps: its ended seeds' own, and each seed
        still running at its most steps (its run dir can lag behind what it trained by its last seconds)."""
        attrs = self.storage.get_trial(owner.trial._trial_id).user_attrs
        steps = 0
        for job in owner.jobs:
            if job in owner.ended:
                steps += self.job_steps_trained(job, attrs)
            elif job.started:
                steps += max(self.held_per_seed(attrs) * job.members, self.steps_on_disk_of(job, owner.trial))
        return steps

    def steps_on_disk_of(self, job: Job, trial: Any = None) -> int:
        """What a job's folder shows `trial` trained: a population's, its members' run dirs summed; a packed
        job's, the trial's own folders."""
        if job.pack:
            return self.steps_trained(trial.number)
        if job.members > 1:
            return sum(steps_on_disk(path) for path in (self.sweep_dir / job.subdir).glob("seed_*") if path.is_dir())
        return steps_on_disk(self.sweep_dir / job.subdir)

    def steps_trained(self, number: int) -> int:
        """The env steps trial `number`'s folders show its seeds trained (an interrupted or killed trial's: they
        count against max_env_steps though the trial is run again)."""
        folder = self.sweep_dir / f"trial_{number}"
        seeds = [path for path in folder.glob("seed_*") if path.is_dir()] if self.n_seeds > 1 else [folder]
        return sum(steps_on_disk(path) for path in seeds)

    def job_steps_trained(self, job: Job, attrs: Mapping[str, Any], trial: Any = None) -> int:
        """The env steps one job trained: a finished one's, a pruned one's at its pruning, a failed one's as its
        process recorded them (its trial's user attributes `attrs`); a job whose process died after its trial
        began training (its most steps declared) counts at its most steps, one that never began at its run dir's."""
        ret = job.result
        if ret is None:
            return 0
        disk = self.steps_on_disk_of(job, trial)
        if not isinstance(ret, BaseException):
            if ret.status.name == "COMPLETED" and isinstance(ret.return_value, dict):
                if "trials" in ret.return_value:  # a packed job's: the trial's own members'
                    return int((ret.return_value["trials"].get(str(trial._trial_id)) or {}).get("steps", 0))
                return int(ret.return_value.get("steps", 0))
            steps = getattr(ret._return_value, "steps", None)
            if steps is not None:
                return int(steps)
        recorded = attrs.get(trained_attr(job.seed_index))
        if recorded is not None:
            return int(recorded) * job.members  # a population's members train in lockstep
        began = CEILING_ATTR in attrs and not attrs.get(REFUSED_ATTR)
        return max(self.held_per_seed(attrs) * job.members, disk) if began else disk
