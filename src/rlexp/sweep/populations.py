"""A trial's seeds as one population (`hydra.sweeper.population=true`): one job trains seeds_per_trial members
together (`run.seeds`, rlexp.agents.base.population) in one process, its first member reporting to the pruner. Its
run dir is the trial's folder, with one ordinary run dir per seed (`trial_<n>/seed_<s>`), as separate jobs write
them; the job returns each member's objectives (`members`), which count as the seeds' own. What the sweep itself
sets is checked before any trial runs (`population_reason`); what a trial's own preset brings (an RL Zoo row's
normalisation, an image env) fails that trial in one line.

Trials packed into one job (`hydra.sweeper.trials_per_job=K`): up to K trials claimed one after another whose values
differ only in what members may differ in (the agent's `member_keys`: learning rate, gamma, ...) train their seeds as
one population (`run.members` gives each member its trial's values), in `pack_<first trial>/`, each member in its
trial's own folder. Each trial's first member reports to its trial, and a pruned trial stops its own members. A
claimed trial whose other values differ starts the next job (trials run in the order they were claimed, so a trial
never waits for the budget decision of one claimed before it that has not started)."""
from __future__ import annotations

import importlib
import json
from typing import Any, Mapping

from omegaconf import OmegaConf

from rlexp.errors import SweepError
from rlexp.sweep.report import params_of
from rlexp.sweep.scheduler import Job, Running
from rlexp.sweep.trials import REFERENCE_ATTR

# keys that, searched or set, can refuse a population; searched config groups, which can pick what a population
# refuses
NORMALIZE_KEYS = ("agent.normalize_obs", "agent.normalize_reward")  # searched: members' flags would differ
REFUSED_KEYS = ("agent.use_sde", "agent.sde", "agent.kl_threshold",
                "agent.lr_schedule", "agent.divergence_monitoring_steps", "run.mixed_precision", "run.eval_interval",
                "buffer.", "init_from", "run.seeds", "run.members")
GROUPS = ("agent", "model", "buffer", "env", "logger")


def packed_result(metrics: Mapping[str, Any], trial_id: int) -> dict[str, Any]:
    """One trial's part of what a packed job returned: {state: complete | pruned | fail, error, steps, ...}."""
    found = dict(metrics["trials"].get(str(trial_id)) or {"state": "fail", "error": "the packed job has no result"})
    found["state"] = {"failed": "fail"}.get(found["state"], found["state"])
    return found


def member_results(metrics: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The per-seed objectives a job returned: a population's members', or the job's own (one seed)."""
    return list(metrics.get("members") or [metrics])


class Populations:
    """The population half of OptunaSweep (which sets s, config and n_seeds)."""

    s: dict[str, Any]
    n_seeds: int
    config: Any
    carried: Any  # a trial claimed for the next packed job
    claim: Any
    trial_jobs: Any

    def agent_class(self) -> type | None:
        target = OmegaConf.select(self.config, "agent._target_", default=None)
        try:
            module, _, name = str(target).rpartition(".")
            return getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError, ValueError):
            return None

    def population_reason(self, distributions: Mapping[str, Any], fixed: Mapping[str, Any]) -> str | None:
        """Why this sweep's trials can't train their seeds as one population (None: they can)."""
        for key in distributions:
            name = key.lstrip("+~")
            if name in GROUPS or name.startswith(REFUSED_KEYS + NORMALIZE_KEYS):
                return f"the sweep searches {name}"
        for key, value in fixed.items():
            name = key.lstrip("+~")
            if name.startswith(REFUSED_KEYS) and str(value).lower() not in ("0", "false", "null", "none", "constant"):
                return f"the sweep sets {name}={value}"
        cls = self.agent_class()
        if cls is None:
            return f"agent {OmegaConf.select(self.config, 'agent._target_', default=None)} is not importable here"
        if not getattr(cls, "population_support", False):
            return f"{cls.__name__} does not train as a population"
        keys = ("agent.use_sde", "agent.kl_threshold") + (
            ("agent.normalize_obs", "agent.normalize_reward") if getattr(cls, "off_policy", False) else ())
        for key in keys:
            if OmegaConf.select(self.config, key, default=None) not in (None, False):
                return f"{key} is set"
        if int(OmegaConf.select(self.config, "run.eval_interval", default=0) or 0) > 0:
            return "run.eval_interval is set (a population's members report episodes to their trials, not evaluations)"
        if (OmegaConf.select(self.config, "logger.name", default=None) or "") == "wandb":
            return "logger=wandb"
        return None

    def check_population(self, distributions: Mapping[str, Any], fixed: Mapping[str, Any]) -> None:
        """hydra.sweeper.population=true or trials_per_job where the sweep's trials can't train as populations: one
        line, before any trial runs."""
        if self.s.get("population") and self.n_seeds > 1:
            reason = self.population_reason(distributions, fixed)
            if reason is not None:
                raise SweepError(f"hydra.sweeper.population=true: {reason}; drop it (each seed a job of its own)")
        packed = int(self.s.get("trials_per_job") or 1)
        if packed > 1:
            what = f"hydra.sweeper.trials_per_job={packed}"
            reason = self.population_reason(distributions, fixed)
            if reason is not None:
                raise SweepError(f"{what}: {reason}; drop it (each trial a job of its own)")
            if len(self.s.get("directions") or []) == 2:
                raise SweepError(f"{what}: trials packed into one job share its training time, which "
                                 "hydra.sweeper.directions ranks; drop one of them")
            members = self.member_params()
            if not any(key.lstrip("+~") in members for key in distributions) \
                    and self.s.get("custom_search_space") is None:
                cls = self.agent_class()
                raise SweepError(f"{what}: the sweep searches none of what packed trials may differ in "
                                 f"({', '.join(f'agent.{k}' for k in cls.member_keys)}); drop it")

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

    # ----- several trials in one job (trials_per_job) -------------------------------------------------------
    def member_params(self) -> set[str]:
        """The parameters packed trials may differ in: agent.<key> for the agent's member_keys."""
        cls = self.agent_class()
        return {f"agent.{key}" for key in getattr(cls, "member_keys", ())}

    def pack_key(self, trial: Any) -> str:
        """What trials packed together share: every value but those members may differ in."""
        members = self.member_params()
        params = params_of(trial)
        shared = {k: v for k, v in params.items() if k.lstrip("+~") not in members}
        own = sorted(k for k in params if k.lstrip("+~") in members)  # (each member gets a value of each)
        return json.dumps([shared, own], sort_keys=True, default=str)

    def pack_seeds(self, trial: Any) -> list[int]:
        """A packed trial's seeds: seed, seed+1, ... with seeds_per_trial, else its own seed."""
        if self.n_seeds > 1:
            return [self.seed + i for i in range(self.n_seeds)]
        return [int(params_of(trial).get("seed", self.fixed.get("seed", self.seed)))]

    def next_trials(self, study: Any, beat: Any) -> list[Running]:
        """The next trial's jobs, or [] when the study takes no more. With trials_per_job=K: up to K trials claimed
        one after another that differ only in members' values, as one job; a claimed trial whose other values
        differ is kept for the next job."""
        packed = int(self.s.get("trials_per_job") or 1)
        trials = [self.carried] if self.carried is not None else []
        self.carried = None
        while len(trials) < packed:
            trial = self.claim(study)
            if trial is None:
                break
            beat.add(trial._trial_id)
            if trials and self.pack_key(trial) != self.pack_key(trials[0]):
                self.carried = trial
                break
            trials.append(trial)
        if len(trials) > 1:
            return self.pack_job(study, trials)
        return [self.trial_jobs(study, trial) for trial in trials]

    def pack_job(self, study: Any, trials: list[Any]) -> list[Running]:
        """One job of `trials` (alike but for members' values): their seeds as one population in
        `pack_<first trial>/`, each member in its trial's folder; a `Running` per trial, sharing the job."""
        first = trials[0]
        seeds = self.pack_seeds(first)
        members = self.member_params()
        values: dict[str, list[float]] = {}
        for trial in trials:
            for key, value in params_of(trial).items():
                if key.lstrip("+~") in members:
                    values.setdefault(key.lstrip("+~")[len("agent."):], []).extend([value] * len(seeds))
        pack = [{"trial_id": t._trial_id, "reference": bool(t.user_attrs.get(REFERENCE_ATTR)),
                 "dirs": [str(self.sweep_dir / f"trial_{t.number}" / (f"seed_{s}" if self.n_seeds > 1 else ""))
                          .rstrip("/") for s in seeds]} for t in trials]
        subdir = f"pack_{first.number}"
        listed = ",".join(f"{key}:[{','.join(repr(float(v)) for v in vs)}]" for key, vs in values.items())
        overrides = self.trial_overrides(study, first, None, subdir, pack=pack) + self.population_overrides(
            seeds * len(trials)) + [f"run.members={{{listed}}}"]
        job = Job(overrides, first.number * self.n_seeds, subdir, population=seeds)
        owners = [Running(trial, [job]) for trial in trials]
        owners[0].pending = [job]
        job.owner, job.pack = owners[0], owners
        return owners
