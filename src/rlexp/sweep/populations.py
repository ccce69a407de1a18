"""A trial's seeds as one population (`hydra.sweeper.population=true`): one job trains seeds_per_trial members
together (`run.seeds`, rlexp.agents.base.population) in one process, its first member reporting to the pruner. Its
run dir is the trial's folder, with one ordinary run dir per seed (`trial_<n>/seed_<s>`), as separate jobs write
them; the job returns each member's objectives (`members`), which count as the seeds' own. What the sweep itself
sets is checked before any trial runs (`population_reason`); what a trial's own preset brings (an RL Zoo row's
normalisation, an image env) fails that trial in one line."""
from __future__ import annotations

import importlib
from typing import Any, Mapping

from omegaconf import OmegaConf

from rlexp.errors import SweepError
from rlexp.sweep.scheduler import Job, Running

# keys that, searched or set, can refuse a population; searched config groups, which can pick what a population
# refuses
REFUSED_KEYS = ("agent.normalize_obs", "agent.normalize_reward", "agent.use_sde", "agent.sde", "agent.kl_threshold",
                "agent.lr_schedule", "agent.divergence_monitoring_steps", "run.mixed_precision", "run.eval_interval",
                "buffer.", "init_from", "run.seeds", "run.members")
GROUPS = ("agent", "model", "buffer", "env", "logger")


def member_results(metrics: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The per-seed objectives a job returned: a population's members', or the job's own (one seed)."""
    return list(metrics.get("members") or [metrics])


class Populations:
    """The population half of OptunaSweep (which sets s, config and n_seeds)."""

    s: dict[str, Any]
    n_seeds: int
    config: Any

    def population_reason(self, distributions: Mapping[str, Any], fixed: Mapping[str, Any]) -> str | None:
        """Why this sweep's trials can't train their seeds as one population (None: they can)."""
        for key in distributions:
            name = key.lstrip("+~")
            if name in GROUPS or name.startswith(REFUSED_KEYS):
                return f"the sweep searches {name}"
        for key, value in fixed.items():
            name = key.lstrip("+~")
            if name.startswith(REFUSED_KEYS) and str(value).lower() not in ("0", "false", "null", "none", "constant"):
                return f"the sweep sets {name}={value}"
        target = OmegaConf.select(self.config, "agent._target_", default=None)
        try:
            module, _, name = str(target).rpartition(".")
            cls = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError, ValueError):
            return f"agent {target} is not importable here"
        if not getattr(cls, "population_support", False):
            return f"{cls.__name__} does not train as a population"
        for key in ("agent.normalize_obs", "agent.normalize_reward", "agent.use_sde", "agent.kl_threshold"):
            if OmegaConf.select(self.config, key, default=None) not in (None, False):
                return f"{key} is set"
        if int(OmegaConf.select(self.config, "run.eval_interval", default=0) or 0) > 0:
            return "run.eval_interval is set (a population evaluates its members at the end only)"
        if (OmegaConf.select(self.config, "logger.name", default=None) or "") == "wandb":
            return "logger=wandb"
        return None

    def check_population(self, distributions: Mapping[str, Any], fixed: Mapping[str, Any]) -> None:
        """hydra.sweeper.population=true where the sweep's trials can't train as populations: one line, before any
        trial runs."""
        if self.s.get("population") and self.n_seeds > 1:
            reason = self.population_reason(distributions, fixed)
            if reason is not None:
                raise SweepError(f"hydra.sweeper.population=true: {reason}; drop it (each seed a job of its own)")

    @property
    def population(self) -> bool:
        """Whether each trial trains its seeds as one population (hydra.sweeper.population=true, several seeds)."""
        return bool(self.s.get("population")) and self.n_seeds > 1

    def population_job(self, study: Any, trial: Any) -> Running:
        """A trial's one job: its seeds as one population in `trial_<n>/`, numbered trial x seeds_per_trial."""
        subdir = f"trial_{trial.number}"
        seeds = self.trial_seeds()
        overrides = self.trial_overrides(study, trial, None, subdir) + self.population_overrides(seeds)
        job = Job(overrides, trial.number * self.n_seeds, subdir, population=seeds)
        owner = Running(trial, [job], pending=[job])
        job.owner = owner
        return owner

    @staticmethod
    def population_overrides(seeds: list[int]) -> list[str]:
        return [f"run.seeds=[{','.join(map(str, seeds))}]"]
