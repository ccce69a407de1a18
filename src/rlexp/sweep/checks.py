"""What a sweep refuses before anything is written or any trial runs: settings that would silently mean something
else, trials bound to fail, a swept group's option its trials can't compose, a continued study's other space."""
from __future__ import annotations

from typing import Any, Mapping

import optuna
from omegaconf import OmegaConf
from optuna.distributions import BaseDistribution, CategoricalDistribution

from rlexp.errors import SweepError
from rlexp.sweep.report import BASELINE_ATTR
from rlexp.sweep.settings import _shown, one_line
from rlexp.sweep.space import described

SPACE_ATTR = "search_space"  # the study's search space, as text (a continued study must search the same)
MEASURE_ATTR = "measure"  # how the study scores a trial (a continued study must score it the same way)


def first_value(dist: BaseDistribution) -> Any:
    """One value a trial may train with: a choice's first option, a range's or interval's lower bound."""
    return dist.choices[0] if isinstance(dist, CategoricalDistribution) else dist.low


class Checks:
    """The checks' half of OptunaSweep (which sets config, config_loader, objective and n_seeds)."""

    config: Any
    config_loader: Any
    objective: str
    aggregate: str
    n_seeds: int
    s: dict[str, Any]

    def check_space(self, distributions: Mapping[str, BaseDistribution], is_grid: bool) -> None:
        """Refuse what would silently mean something else."""
        if "seed" in distributions and (self.n_seeds > 1 or not is_grid):
            raise SweepError("seed=" + ",".join(map(str, getattr(distributions["seed"], "choices", ["..."])))
                             + " would be tuned as one more parameter; run every trial on several seeds with "
                             f"hydra.sweeper.seeds_per_trial={len(getattr(distributions['seed'], 'choices', [0, 0, 0]))} "
                             "instead (its objective is their mean)")
        if self.objective != "final_eval" and "run.eval_interval" not in distributions:
            interval = int(float(OmegaConf.select(self.config, "run.eval_interval", default=0) or 0))
            if interval <= 0:
                raise SweepError(f"hydra.sweeper.objective={self.objective} needs evaluations during training: "
                                 "add run.eval_interval=<env steps> (e.g. a tenth of run.max_steps)")

    def check_evaluations(self, distributions: Mapping[str, BaseDistribution], fixed: Mapping[str, str]) -> None:
        """Every objective scores a trial by its evaluation episodes: run.eval_episodes=0 would fail every trial."""
        key = "run.eval_episodes"
        if any(k.lstrip("+~") == key for k in distributions):
            return
        value = next((v for k, v in fixed.items() if k.lstrip("+~") == key), None)
        if value is None:
            value = OmegaConf.select(self.config, key, default=None)
        try:
            episodes = float(value)
        except (TypeError, ValueError):
            return  # not a number: each trial's check of the run settings names it
        if episodes < 1:
            raise SweepError(f"{key}={_shown(value)}: hydra.sweeper.objective={self.objective} scores each trial by "
                             f"its evaluation episodes; set {key} to 1 or more (e.g. {key}=10)")

    def check_choices(self, distributions: Mapping[str, BaseDistribution], fixed: Mapping[str, str]) -> None:
        """The trials compose as they will, before any trial runs: every option of a swept config group
        (agent=ppo,ppp), each with one value of every other searched key (its first option, its lower bound), so
        that a missing preset or a misspelt searched key (agent.nosuchkey=choice(1,2)) is one line, not a failed
        trial each."""
        if self.config_loader is None:
            return
        from rlexp.errors import hydra_error_line

        groups = {str(g) for g in self.config.hydra.runtime.get("choices", {}) if "/" not in str(g)}
        base = [f"{k}={v}" for k, v in fixed.items()]
        values = [f"{key}={first_value(dist)}" for key, dist in distributions.items() if key.lstrip("+~") not in groups]
        options = [f"{key}={option}" for key, dist in distributions.items()
                   if key.lstrip("+~") in groups and isinstance(dist, CategoricalDistribution)
                   for option in dist.choices]
        for option in options or [None]:
            try:
                self.config_loader.load_sweep_config(self.config, [*base, *values, *([option] if option else [])])
            except Exception as e:  # noqa: BLE001 - what every trial with this option would fail with
                line = hydra_error_line(e) or one_line(e)
                prefix = "" if option is None or line.startswith(option) else f"{option}: "
                raise SweepError(f"{prefix}{line}") from None

    def measure(self) -> dict[str, Any]:
        """How a trial's score is made: objective (with its last_evals), aggregate of seeds, seeds per trial."""
        spec = {"objective": self.objective, "aggregate": self.aggregate, "seeds_per_trial": self.n_seeds}
        if self.objective == "mean_last_evals":
            spec["last_evals"] = self.s["last_evals"]
        return spec

    def check_measure(self, study: optuna.Study) -> None:
        """A continued study must score trials as it did: values made another way would be ranked together."""
        old, new = study.user_attrs.get(MEASURE_ATTR), self.measure()
        if old is None or old == new:
            return
        changed = [k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
        detail = "; ".join(f"{k}: {old.get(k, 'absent')} -> {new.get(k, 'absent')}" for k in changed)
        raise SweepError(f"study {study.study_name} scored its trials another way ({detail}); start a new study "
                         "with hydra.sweeper.study_name=<new name>, or score them as it did")

    def check_search_space(self, study: optuna.Study, distributions: Mapping[str, BaseDistribution]) -> None:
        """A continued study must search the space it was made with (kept in the study; for a study made before
        that, the first trial's distributions that cover it)."""
        new = described(distributions)
        old = study.user_attrs.get(SPACE_ATTR)
        if old is None:
            trial = next((t for t in study.get_trials(deepcopy=False) if t.distributions
                          and not t.user_attrs.get(BASELINE_ATTR)), None)
            if trial is None:
                return
            old = described(trial.distributions)
        if old == new:
            return
        changed = sorted(set(old) ^ set(new)) + sorted(k for k in set(old) & set(new) if old[k] != new[k])
        detail = "; ".join(f"{k}: {old.get(k, 'absent')} -> {new.get(k, 'absent')}" for k in changed[:3])
        raise SweepError(f"study {study.study_name} was run with another search space ({detail}); start a new "
                         f"study with hydra.sweeper.study_name=<new name>, or repeat the original ranges")
