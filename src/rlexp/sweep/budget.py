"""The study's env-step budget (`hydra.sweeper.max_env_steps`): what one trial may train, what each trial trained
(a finished one's own count, an interrupted or killed one's from its folders, or its full length where they lag
behind), and what is left for the next trial."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import optuna
from omegaconf import OmegaConf
from optuna.distributions import BaseDistribution
from optuna.trial import TrialState

from rlexp.errors import SweepError
from rlexp.sweep.report import STEPS_ATTR
from rlexp.sweep.scheduler import Job, Running, steps_on_disk
from rlexp.sweep.settings import _shown
from rlexp.sweep.trials import RESERVED_ATTR


class Budget:
    """Step accounting for OptunaSweep (its `cap`, `config`, `job_steps`, `n_seeds` and `sweep_dir`)."""

    cap: int
    config: Any
    job_steps: int
    n_seeds: int
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
        """max_env_steps less what finished trials trained and what running ones may train (their full length)."""
        used = 0
        for trial in study.get_trials(deepcopy=False):
            if trial.state == TrialState.RUNNING:
                used += int(trial.user_attrs.get(RESERVED_ATTR, 0))
            else:
                used += int(trial.user_attrs.get(STEPS_ATTR, 0))
        return self.cap - used

    def interrupted_steps(self, owner: Running) -> int:
        """The env steps an interrupted trial counts against max_env_steps: its ended seeds' own, and each seed
        still running at its full length (its run dir can lag behind what it trained by its last seconds)."""
        steps = 0
        for job in owner.jobs:
            if job in owner.ended:
                steps += self.job_steps_trained(job)
            elif job.started:
                steps += max(self.job_steps, steps_on_disk(self.sweep_dir / job.subdir))
        return steps

    def steps_trained(self, number: int) -> int:
        """The env steps trial `number`'s folders show its seeds trained (an interrupted or killed trial's: they
        count against max_env_steps though the trial is run again)."""
        folder = self.sweep_dir / f"trial_{number}"
        seeds = [path for path in folder.glob("seed_*") if path.is_dir()] if self.n_seeds > 1 else [folder]
        return sum(steps_on_disk(path) for path in seeds)

    def job_steps_trained(self, job: Job) -> int:
        """The env steps one job trained: a finished one's, a pruned one's at its pruning, else its run dir's."""
        ret = job.result
        if ret is None:
            return 0
        if not isinstance(ret, BaseException):
            if ret.status.name == "COMPLETED" and isinstance(ret.return_value, dict):
                return int(ret.return_value.get("steps", 0))
            steps = getattr(ret._return_value, "steps", None)
            if steps is not None:
                return int(steps)
        return steps_on_disk(self.sweep_dir / job.subdir)
