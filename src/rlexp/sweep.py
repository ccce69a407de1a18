"""Hyperparameter sweeps: rlexp's Optuna sweeper (`--multirun`) and the trial side of pruning.

The sweeper (selected by default in conf/config.yaml; the Hydra plugin in hydra_plugins/rlexp_sweeper
registers it with rlexp's own sampler configs) runs on Optuna directly:
- a persistent study (SQLite in the sweep dir by default, an SQLAlchemy URL or `journal:///<file>` with
  `storage=`) that the same command continues; a changed search space is refused with one line;
- comma lists only (`seed=0,1,2`) run as a grid, each combination once; `choice`, `interval`, `range`
  and `tag(log, ...)` are sampled (range's stop is exclusive, as in Hydra's basic sweeper);
- each trial runs in its own process (the launcher), on `seeds_per_trial` seeds whose objectives are
  aggregated (mean or IQM); it reports its periodic evaluations (or training mean return) to the pruner;
- the objective is the final evaluation, the mean of the last evaluations, or the area under the
  evaluation curve; with two `directions` the training time is the second objective (Pareto front);
- a trial that raises is recorded FAIL with its one-line error and the sweep goes on, up to
  `max_failure_rate`; trials left RUNNING by a killed sweeper are marked FAIL on the next start;
- `confirm` re-runs the top configurations on fresh seeds and ranks them by their aggregate (mean or IQM);
- a report in the sweep dir: optimization_results.yaml, trials.csv, confirmation.csv or pareto_front.csv,
  the whole configuration the best trial trained with as a preset (tuned/best.yaml), Optuna's plots, and
  commands that train it again;
- every setting (hydra.sweeper.*) is checked before anything is written: a wrong one is one line; so are
  run.eval_episodes=0 (nothing to score a trial by) and a swept group's option its trials can't compose.
"""
from __future__ import annotations

import itertools
import json
import logging
import math
import os
import random
import threading
import time
import warnings
from pathlib import Path
from typing import Any, Mapping

import optuna
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, Override, RangeSweep, Transformer
from omegaconf import OmegaConf
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState

from rlexp.errors import Started, SweepError
from rlexp.files import write_atomic
from rlexp.tracking import Tracker

log = logging.getLogger("rlexp.sweep")
optuna.logging.set_verbosity(optuna.logging.WARNING)  # our own one line per trial instead
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)  # enqueue_trial, plots
warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed")  # our own heartbeat thread sends them
TRIAL_ENV = "RLEXP_OPTUNA_TRIAL"  # JSON {storage, study, trial_id, pruner...} set for each trial's process


# ----- search space ---------------------------------------------------------------------------------
def distribution(override: Override) -> BaseDistribution | None:
    """The Optuna distribution of one sweep override (None for a plain value)."""
    if not override.is_sweep_override():
        return None
    value, key = override.value(), override.get_key_element()
    if override.is_choice_sweep() or (override.is_range_sweep() and value.shuffle):
        return CategoricalDistribution(list(override.sweep_iterator(transformer=Transformer.encode)))
    if override.is_range_sweep():  # Hydra's range excludes stop; Optuna's bounds are inclusive
        assert isinstance(value, RangeSweep)
        start, stop, step = value.start, value.stop, value.step
        count = math.ceil(round((stop - start) / step, 9))  # round: (0.4 - 0.1) / 0.1 is 3.0000000000000004
        if count <= 0:
            raise SweepError(f"{key}: range({start},{stop},{step}) is empty; range(start, stop, step) excludes stop")
        last = round(start + (count - 1) * step, 12)
        if any(isinstance(v, float) for v in (start, stop, step)):
            return FloatDistribution(start, last, step=step)
        return IntDistribution(int(start), int(last), step=int(step))
    if override.is_interval_sweep():
        assert isinstance(value, IntervalSweep)
        low, high = value.start, value.end
        if low > high:
            raise SweepError(f"{key}: interval({low},{high}) is reversed; write the lower bound first: "
                             f"interval({high},{low})")
        ints = isinstance(low, int) and isinstance(high, int)
        if "log" in value.tags:
            if low <= 0:
                raise SweepError(f"{key}: tag(log, interval({low},{high})) needs a lower bound above 0")
            return IntDistribution(low, high, log=True) if ints else FloatDistribution(low, high, log=True)
        return IntDistribution(low, high) if ints else FloatDistribution(low, high)
    raise SweepError(f"{override.input_line}: this sweep is not supported; use choice, range, interval or tag(log, ...)")


def search_space(arguments: list[str]) -> tuple[dict[str, BaseDistribution], dict[str, str], bool]:
    """(distributions, fixed values, is_grid) from the sweep's overrides; is_grid: only comma lists."""
    distributions, fixed, grid = {}, {}, True
    for override in OverridesParser.create().parse_overrides(arguments):
        key = override.get_key_element()
        dist = distribution(override)
        if dist is None:
            fixed[key] = override.get_value_element_as_str()
            continue
        distributions[key] = dist
        grid &= override.is_choice_sweep() and isinstance(override.value(), ChoiceSweep) and override.value().simple_form
    return distributions, fixed, grid and bool(distributions)


def grid_points(distributions: Mapping[str, BaseDistribution]) -> list[dict[str, Any]]:
    names = list(distributions)
    return [dict(zip(names, values)) for values in itertools.product(*(distributions[n].choices for n in names))]


def describe(dist: BaseDistribution) -> str:
    return f"{type(dist).__name__}({', '.join(f'{k}={v}' for k, v in dist._asdict().items())})"


# ----- storage ----------------------------------------------------------------------------------------
JOURNAL = "journal:///"


def make_storage(url: str, heartbeat_interval: int | None = None, grace_period: int | None = None):
    """The study's storage. `journal:///study.log` (relative) or `journal:////abs/study.log`, as SQLite's URLs:
    Optuna's journal file (a shared filesystem, no server); anything else is an SQLAlchemy URL. SQLite and journal paths become absolute (trials run elsewhere), and
    SQLite waits for locks instead of failing."""
    if url.startswith(JOURNAL):
        from optuna.storages.journal import JournalFileBackend, JournalStorage

        path = Path(url[len(JOURNAL):]).expanduser().resolve()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            return JournalStorage(JournalFileBackend(str(path)))
        except OSError as e:
            raise SweepError(f"hydra.sweeper.storage={url}: {e.strerror or e}; use journal:///<writable path>") from None
    engine_kwargs: dict[str, Any] = {}
    if url.startswith("sqlite:///"):
        path = Path(url[len("sqlite:///"):]).expanduser().resolve()
        path.parent.mkdir(parents=True, exist_ok=True)
        url = f"sqlite:///{path}"
        engine_kwargs["connect_args"] = {"timeout": 120}
    import sqlalchemy.exc

    for attempt in range(6):
        try:
            return optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs, heartbeat_interval=heartbeat_interval,
                                              grace_period=grace_period)
        except (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.ProgrammingError, sqlalchemy.exc.OperationalError) as e:
            # two sweepers creating the schema of a fresh database at once: the loser retries
            error = e
            if attempt == 5 or not url.startswith(("sqlite", "postgresql")) or "could not connect" in str(e):
                break
            time.sleep(0.5 + random.random())
        except Exception as e:  # noqa: BLE001 - a bad URL, a missing driver, a server that is down
            error = e
            break
    raise SweepError(f"hydra.sweeper.storage={url}: {type(error).__name__}: {str(error).splitlines()[0]}; use "
                     "sqlite:///path/optuna.db, journal:///path/study.log or postgresql://user@host/db")


def storage_url(storage, url: str) -> str:
    """The URL a trial's process opens the same storage with."""
    if url.startswith(JOURNAL):
        return JOURNAL + str(Path(url[len(JOURNAL):]).expanduser().resolve())  # journal:////abs/path, as SQLite's
    return getattr(storage, "url", url)


def make_pruner(name: str, warmup_trials: int, warmup_steps: int) -> optuna.pruners.BasePruner:
    """median: Optuna's MedianPruner; halving: its SuccessiveHalvingPruner (asynchronous successive halving,
    reduction factor 3, first rung at warmup_steps, or Optuna's estimate where that is 0), deciding once
    warmup_trials trials have finished; none."""
    if name == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=warmup_trials, n_warmup_steps=warmup_steps)
    if name == "halving":
        halving = optuna.pruners.SuccessiveHalvingPruner(min_resource=warmup_steps or "auto", reduction_factor=3)
        return AfterTrials(halving, warmup_trials) if warmup_trials else halving
    if name in ("none", None):
        return optuna.pruners.NopPruner()
    raise SweepError(f"hydra.sweeper.pruner={name} is unknown; use median, halving or none")


class AfterTrials(optuna.pruners.BasePruner):
    """`pruner`'s decisions once `n` trials have finished; before that it still sees every report (successive
    halving records each trial's rungs, which later trials are compared with)."""

    def __init__(self, pruner: optuna.pruners.BasePruner, n: int) -> None:
        self.pruner, self.n = pruner, n

    def prune(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> bool:
        decision = self.pruner.prune(study, trial)
        return decision and len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))) >= self.n


# ----- settings (hydra.sweeper.*) ---------------------------------------------------------------------------
OBJECTIVES = ("final_eval", "mean_last_evals", "auc")
WHOLE = {"n_trials": 1, "n_jobs": 1, "seeds_per_trial": 1, "last_evals": 1, "reports": 1, "warmup_trials": 0,
         "warmup_steps": 0, "heartbeat_interval": 1, "grace_period": 1}  # whole numbers: their least value
CHOICES = {"direction": ("maximize", "minimize"), "objective": OBJECTIVES, "aggregate": ("mean", "iqm"),
           "pruner": ("median", "none", "halving")}
SETTINGS = (*WHOLE, *CHOICES, "sampler", "directions", "confirm", "storage", "study_name", "max_failure_rate",
            "params", "baseline", "max_env_steps")
SAMPLER_WHOLE = {"n_startup_trials": 0, "population_size": 2}
SAMPLERS = "hydra/sweeper/sampler=tpe|random|cmaes|nsgaii|qmc"


def _shown(value: Any) -> str:
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def whole_number(key: str, value: Any, least: int) -> int:
    """`value` as an int of at least `least` (5, 5.0 and 1e4 too), else one line naming hydra.sweeper.<key>."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
            and float(value).is_integer() and value >= least:
        return int(value)
    raise SweepError(f"hydra.sweeper.{key}={_shown(value)}: use a whole number of {least} or more")


def check_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """hydra.sweeper.* checked and normalised (whole numbers as ints, the sampler made), before anything is
    written; a wrong one is one line naming the key and the fix."""
    s = dict(settings)
    unknown = sorted(set(s) - set(SETTINGS))
    if unknown:
        raise SweepError(f"hydra.sweeper.{unknown[0]} is not a setting of rlexp's sweeper; use one of "
                         f"{', '.join(sorted(SETTINGS))} (docs/tuning.md)")
    for key, least in WHOLE.items():
        s[key] = whole_number(key, s.get(key), least)
    if s["grace_period"] <= s["heartbeat_interval"]:
        raise SweepError(f"hydra.sweeper.grace_period={s['grace_period']}: use more than hydra.sweeper."
                         f"heartbeat_interval ({s['heartbeat_interval']}), e.g. {s['heartbeat_interval'] * 6}")
    s["pruner"] = "none" if s.get("pruner") is None else s["pruner"]
    for key, options in CHOICES.items():
        if s.get(key) not in options:
            raise SweepError(f"hydra.sweeper.{key}={_shown(s.get(key))} is unknown; use {' | '.join(options)}")
    s["max_failure_rate"] = check_rate(s.get("max_failure_rate"))
    if s.get("max_env_steps") is not None:
        s["max_env_steps"] = whole_number("max_env_steps", s["max_env_steps"], 1)
    s["directions"] = check_directions(s.get("directions"))
    s["confirm"] = check_confirm(s.get("confirm"))
    s["study_name"] = check_names(s.get("storage"), s.get("study_name"))
    if s.get("params") is not None and not isinstance(s["params"], Mapping):
        raise SweepError(f"hydra.sweeper.params={_shown(s['params'])}: use a mapping of keys to sweeps, e.g. "
                         "{agent.lr: 'tag(log,interval(1e-5,1e-2))', agent.n_steps: 'choice(16,32)'}")
    if s.get("baseline") is not None and not isinstance(s["baseline"], Mapping):
        raise SweepError(f"hydra.sweeper.baseline={_shown(s['baseline'])}: use a mapping of searched keys to the "
                         "values the first trial trains, e.g. {agent.lr: 3e-4, agent.n_steps: 64}")
    s["sampler"] = make_sampler(s.get("sampler"))
    return s


def baseline_params(baseline: Mapping[str, Any], distributions: Mapping[str, BaseDistribution]
                    ) -> tuple[dict[str, Any], dict[str, Any]]:
    """The baseline's values of searched keys: (those that lie in their distribution, a choice's option or a value
    in an interval: the trial's Optuna parameters; the others, which the trial trains with as fixed values)."""
    inside, outside = {}, {}
    for key, value in baseline.items():
        dist = distributions.get(key)
        if dist is None:
            continue
        try:
            contained = dist._contains(dist.to_internal_repr(value))
        except (ValueError, TypeError):
            contained = False
        (inside if contained else outside)[key] = value
    return inside, outside


BASELINE_ATTR = "baseline_values"  # a baseline trial's values outside the search space (not Optuna parameters)
STEPS_ATTR = "env_steps"  # the env steps a trial trained, all its seeds (hydra.sweeper.max_env_steps counts them)


def params_of(trial: optuna.trial.FrozenTrial | optuna.trial.Trial) -> dict[str, Any]:
    """The values a trial trained with: its Optuna parameters, and a baseline trial's values outside the space."""
    return {**trial.params, **trial.user_attrs.get(BASELINE_ATTR, {})}


def check_rate(rate: Any) -> float:
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 <= rate <= 1:
        raise SweepError(f"hydra.sweeper.max_failure_rate={_shown(rate)}: use a fraction from 0 to 1 (0.5: stop "
                         "once more than half of the trials failed)")
    return float(rate)


def check_names(storage: Any, name: Any) -> str:
    """The study's name (also its folder's) and its storage's URL, which make_storage opens."""
    if storage is not None and (not isinstance(storage, str) or not storage.strip()):
        raise SweepError(f"hydra.sweeper.storage={_shown(storage)}: use sqlite:///path/optuna.db, "
                         "journal:///path/study.log, postgresql://user@host/db or null (<sweep dir>/optuna.db)")
    text = str(name)
    if isinstance(name, bool) or not isinstance(name, (str, int)) or not text.strip() or text in (".", "..") \
            or "/" in text or "\\" in text:
        raise SweepError(f"hydra.sweeper.study_name={_shown(name)}: use a name without / (the study's folder is "
                         "multirun/<study_name>)")
    return text


def check_directions(directions: Any) -> list[str] | None:
    if directions is None:
        return None
    shape_ok = isinstance(directions, (list, tuple)) and 1 <= len(directions) <= 2
    if not shape_ok or directions[0] not in ("maximize", "minimize") or list(directions)[1:] not in ([], ["minimize"]):
        raise SweepError(f"hydra.sweeper.directions={_shown(directions)}: use [maximize,minimize] (the objective's "
                         "direction, then the training time's), or hydra.sweeper.direction for one objective")
    return [str(d) for d in directions]


def check_confirm(confirm: Any) -> dict[str, int]:
    """hydra.sweeper.confirm: null (no confirmation round) or {top_k: 3, seeds: 5}."""
    if confirm is None or confirm == {}:
        return {}
    fix = "use {top_k: 3, seeds: 5} (the top_k configurations re-run on that many fresh seeds), or null"
    if not isinstance(confirm, Mapping) or set(confirm) - {"top_k", "seeds"}:
        raise SweepError(f"hydra.sweeper.confirm={_shown(confirm)}: {fix}")
    return {key: whole_number(f"confirm.{key}", confirm.get(key, default), 1)
            for key, default in (("top_k", 3), ("seeds", 5))}


def make_sampler(sampler: Any) -> optuna.samplers.BaseSampler:
    """The Optuna sampler of hydra.sweeper.sampler ({_target_: ..., seed: ..., its arguments})."""
    if isinstance(sampler, optuna.samplers.BaseSampler):
        return sampler
    if not isinstance(sampler, Mapping) or not isinstance(sampler.get("_target_"), str):
        raise SweepError(f"hydra.sweeper.sampler={_shown(sampler)}: pick one with {SAMPLERS}")
    arguments = dict(sampler)
    target = arguments["_target_"]
    seed = arguments.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise SweepError(f"hydra.sweeper.sampler.seed={_shown(seed)}: use a whole number, or null (the run's seed)")
    for key, least in SAMPLER_WHOLE.items():
        if key in arguments:
            arguments[key] = whole_number(f"sampler.{key}", arguments[key], least)
    for key in ("multivariate", "constant_liar"):
        if key in arguments and not isinstance(arguments[key], bool):
            raise SweepError(f"hydra.sweeper.sampler.{key}={_shown(arguments[key])}: use true or false")
    from hydra.utils import instantiate

    try:
        return instantiate(arguments)
    except Exception as e:  # noqa: BLE001 - an unknown argument or value of the sampler
        cause = e.__cause__ or e
        raise SweepError(f"hydra.sweeper.sampler ({target}): {type(cause).__name__}: {one_line(cause)}; fix its "
                         f"arguments (Optuna's {target.rsplit('.', 1)[-1]}) or pick another with {SAMPLERS}") from None


# ----- the trial side ---------------------------------------------------------------------------------
def trial_spec() -> dict[str, Any] | None:
    """What the sweeper told this trial's process (None outside rlexp's sweeps)."""
    spec = os.environ.get(TRIAL_ENV)
    return json.loads(spec) if spec else None


class PruningReporter(Tracker):
    """A tracker for a trial's process. It reports a score to the study and stops the trial
    (optuna.TrialPruned) when the pruner says so. The score is each periodic evaluation
    (run.eval_interval), or else the training mean return at `reports` evenly spaced steps (the same in
    every trial, so the pruner compares like with like).

    With several seeds per trial the first seed reports and decides; the others stop at their next
    report point once it has been pruned."""

    def __init__(self, spec: Mapping[str, Any], max_steps: int, on_eval: bool) -> None:
        self.storage = make_storage(spec["storage"])
        pruner = make_pruner(spec["pruner"], int(spec["warmup_trials"]), int(spec["warmup_steps"]))
        study = optuna.load_study(study_name=spec["study"], storage=self.storage, pruner=pruner)
        self.trial_id, self.leader, self.on_eval = int(spec["trial_id"]), bool(spec.get("leader", True)), on_eval
        self.trial = optuna.trial.Trial(study, self.trial_id)
        if self.leader:
            self.trial.set_user_attr("pid", os.getpid())
        self.interval = max(1, max_steps // max(1, int(spec["reports"])))
        self.next_report = self.interval

    def scalars(self, step: int, values: Mapping[str, float]) -> None:
        score = values.get("eval/mean_return" if self.on_eval else "episode/mean_return")
        if score is None or not math.isfinite(score) or (not self.on_eval and step < self.next_report):
            return
        mark = step if self.on_eval else self.next_report
        self.next_report = (step // self.interval + 1) * self.interval
        if self.leader:
            self.trial.report(float(score), mark)
            pruned = self.trial.should_prune()
            if pruned:
                self.storage.set_trial_user_attr(self.trial_id, "pruned_at", mark)
        else:
            pruned = "pruned_at" in self.storage.get_trial(self.trial_id).user_attrs
        if pruned:
            message = f"pruned at step {mark:,} (score {score:.4g})"
            log.info(message)
            error = optuna.TrialPruned(message)
            error.steps = step  # the env steps it trained, for the study's step budget
            raise error


def trial_reporter(max_steps: int, on_eval: bool) -> PruningReporter | None:
    """The pruning reporter when this process runs a pruned trial of rlexp's sweeper, else None."""
    spec = trial_spec()
    return PruningReporter(spec, max_steps, on_eval) if spec and spec.get("prune") else None


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


# ----- the sweeper ---------------------------------------------------------------------------------------
class Heartbeat:
    """Records a heartbeat for the running trials so that a later sweeper can tell them from a killed one's
    (storages with heartbeats: SQL databases)."""

    def __init__(self, storage, interval: float) -> None:
        self.storage, self.interval, self.trial_ids = storage, interval, []
        self.enabled = hasattr(storage, "record_heartbeat")
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(self.interval):
            self.beat()

    def beat(self) -> None:
        for trial_id in list(self.trial_ids):
            try:
                self.storage.record_heartbeat(trial_id)
            except Exception as e:  # noqa: BLE001 - a missed heartbeat must not stop the sweep
                log.debug(f"heartbeat failed: {e}")

    def __enter__(self):
        if self.enabled:
            self.beat()
            self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.enabled:
            self.stop.set()
            self.thread.join()


def trained_steps(ret: Any) -> int:
    """The env steps one job of a trial trained: a finished one's, a pruned one's at its pruning, else 0."""
    if isinstance(ret, BaseException):
        return 0
    if ret.status.name == "COMPLETED":
        return int(ret.return_value.get("steps", 0)) if isinstance(ret.return_value, dict) else 0
    return int(getattr(ret._return_value, "steps", 0))


def one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return (text[0] if text else type(error).__name__)[:300]


def aggregate(values: list[float], how: str) -> float:
    """The trial's objective from its seeds' objectives: their mean, or rliable's interquartile mean."""
    if how == "iqm":
        from rlexp.stats import iqm

        return float(iqm(values))
    return float(sum(values) / len(values))


def _format(value: float) -> str:
    return f"{value:.4g}"


PRESET_SECTIONS = ("agent", "env", "model", "buffer", "run")  # what tuned/best.yaml holds of the trial's config
PRESET_GROUPS = ("model", "buffer")  # config groups whose choice it keeps
SWEEP_ONLY = ("hydra.sweeper", "hydra.launcher", "hydra.sweep.", "hydra/sweeper", "hydra/launcher")
CONFIRM_SEED_OFFSET = 10_000  # confirmation seeds: seed + 10000 + j, never a seed the search trained on


class OptunaSweep:
    """The sweep itself; `RlexpOptunaSweeper` (the Hydra plugin) hands it its config, launcher and arguments."""

    def __init__(self, settings: Mapping[str, Any], config, launcher, config_loader=None) -> None:
        self.s = check_settings(settings)
        self.config, self.launcher, self.config_loader = config, launcher, config_loader
        self.sweep_dir = Path(str(config.hydra.sweep.dir)).expanduser().resolve()
        self.directions = self.s["directions"] or [self.s["direction"]]
        self.multi = len(self.directions) == 2
        self.objective, self.aggregate = self.s["objective"], self.s["aggregate"]
        self.n_seeds = self.s["seeds_per_trial"]
        self.confirm = self.s["confirm"]
        if self.confirm and self.multi:
            raise SweepError("hydra.sweeper.confirm ranks by one objective; with two directions the report is "
                             "the Pareto front: drop confirm or directions")
        self.prune = not self.multi and self.s["pruner"] != "none"
        self.seed = int(self.config.get("seed") or 0)

    # -- set-up ------------------------------------------------------------------------------------------
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
        """Each option of a swept config group (agent=ppo,ppp) composes as its trials will, before any trial runs:
        a missing preset is one line, not a failed trial."""
        if self.config_loader is None:
            return
        from rlexp.errors import hydra_error_line

        groups = {str(g) for g in self.config.hydra.runtime.get("choices", {}) if "/" not in str(g)}
        base = [f"{k}={v}" for k, v in fixed.items()]
        for key, dist in distributions.items():
            if key.lstrip("+~") not in groups or not isinstance(dist, CategoricalDistribution):
                continue
            for option in dist.choices:
                try:
                    self.config_loader.load_sweep_config(self.config, [*base, f"{key}={option}"])
                except Exception as e:  # noqa: BLE001 - what every trial with this option would fail with
                    line = hydra_error_line(e) or one_line(e)
                    prefix = "" if line.startswith(f"{key}={option}") else f"{key}={option}: "
                    raise SweepError(f"{prefix}{line}") from None

    def open_study(self, distributions: Mapping[str, BaseDistribution]) -> optuna.Study:
        url = str(self.s["storage"] or f"sqlite:///{self.sweep_dir / 'optuna.db'}")
        self.storage = make_storage(url, int(self.s["heartbeat_interval"]), int(self.s["grace_period"]))
        self.storage_url = storage_url(self.storage, url)
        name = str(self.s["study_name"])
        exists = name in optuna.study.get_all_study_names(self.storage)
        try:
            study = optuna.create_study(study_name=name, storage=self.storage, sampler=self.s["sampler"],
                                        directions=self.directions, load_if_exists=True)
        except ValueError as e:
            raise SweepError(f"study {name}: {one_line(e)}; start a new study with hydra.sweeper.study_name=<new name>")
        if [d.name.lower() for d in study.directions] != self.directions:
            raise SweepError(f"study {name} was run with directions {[d.name.lower() for d in study.directions]}; "
                             "start a new study with hydra.sweeper.study_name=<new name>")
        # Optuna caches the trials this process asked for and would not see what the trial processes report
        # (intermediate values: the pruned trials' values, the plots); read the storage itself instead.
        if type(study._storage).__name__ == "_CachedStorage":
            study._storage = study._storage._backend
        if exists:
            stale = []
            if hasattr(self.storage, "_get_stale_trial_ids"):  # RUNNING, no heartbeat for grace_period
                stale = self.storage._get_stale_trial_ids(study._study_id)
            for trial_id in stale:
                self.storage.set_trial_user_attr(trial_id, "error", "left running by a sweep that was stopped")
                self.storage.set_trial_state_values(trial_id, TrialState.FAIL)
            self.check_search_space(study, distributions)
            trials = study.get_trials(deepcopy=False)
            counts = {s.name: sum(t.state == s for t in trials) for s in TrialState}
            log.info(f"continuing study {name} ({len(trials)} trials so far: "
                     + ", ".join(f"{n} {k}" for k, n in counts.items() if n)
                     + (f"; marked {len(stale)} trial(s) left running by a stopped sweep FAIL" if stale else "") + ")")
        else:
            log.info(f"new study {name} in {self.storage_url}")
        return study

    def check_search_space(self, study: optuna.Study, distributions: Mapping[str, BaseDistribution]) -> None:
        for trial in study.get_trials(deepcopy=False):
            if not trial.distributions:
                continue
            old, new = trial.distributions, dict(distributions)
            if old == new:
                return
            changed = sorted(set(old) ^ set(new)) + sorted(k for k in set(old) & set(new) if old[k] != new[k])
            detail = "; ".join(f"{k}: {describe(old[k]) if k in old else 'absent'} -> "
                               f"{describe(new[k]) if k in new else 'absent'}" for k in changed[:3])
            raise SweepError(f"study {study.study_name} was run with another search space ({detail}); start a new "
                             f"study with hydra.sweeper.study_name=<new name>, or repeat the original ranges")

    # -- the loop -------------------------------------------------------------------------------------------
    def run(self, arguments: list[str]) -> None:
        params = [f"{k}={v}" for k, v in (self.s.get("params") or {}).items()]
        distributions, fixed, is_grid = search_space(params + list(arguments))
        for key in fixed:
            distributions.pop(key, None)
        self.check_space(distributions, is_grid)
        self.check_evaluations(distributions, fixed)
        self.check_choices(distributions, fixed)
        cap = self.s.get("max_env_steps")
        trial_steps = self.trial_steps(fixed, distributions) if cap else 0
        if cap and trial_steps > cap:
            raise SweepError(f"hydra.sweeper.max_env_steps={cap}: one trial trains up to {trial_steps:,} env steps "
                             "(run.max_steps x seeds_per_trial); raise it or shorten the trials")
        study = self.open_study(distributions)
        n_trials = int(self.s["n_trials"])
        queue: list[dict[str, Any]] = []
        baseline_rest: dict[str, Any] = {}
        if is_grid:
            done = [t.params for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))]
            queue = [p for p in grid_points(distributions) if p not in done][:n_trials]
            n_trials = len(queue)
            log.info(f"grid of {len(grid_points(distributions))} combinations: {n_trials} to run")
        elif self.s.get("baseline") and not study.get_trials(deepcopy=False):
            inside, baseline_rest = baseline_params(self.s["baseline"], distributions)
            queue = [inside]
            sampled = sorted(set(distributions) - set(inside) - set(baseline_rest))
            log.info("trial 0 trains the baseline: " + " ".join(f"{k}={_format(v) if isinstance(v, float) else v}"
                                                              for k, v in {**inside, **baseline_rest}.items())
                     + (f" (outside the search space: {', '.join(baseline_rest)})" if baseline_rest else "")
                     + (f"; sampled: {', '.join(sampled)}" if sampled else ""))
        self.fixed = {k: v for k, v in fixed.items() if not (k == "seed" and self.n_seeds > 1)}
        Started.value = True
        finished, failed, n_jobs = 0, 0, self.s["n_jobs"]
        per_batch = max(1, n_jobs // self.n_seeds)
        seeds = f", {self.n_seeds} seeds each" if self.n_seeds > 1 else ""
        log.info(f"sweep dir {self.sweep_dir}; {n_trials} trial(s){seeds}, {n_jobs} job(s) at a time; one line per "
                 "trial (each trial's log: trial_<n>/)")
        while finished < n_trials:
            batch = min(per_batch, n_trials - finished)
            if cap:
                spent = sum(t.user_attrs.get(STEPS_ATTR, 0) for t in study.get_trials(deepcopy=False))
                batch = min(batch, (cap - spent) // trial_steps)
                if batch < 1:
                    log.info(f"the study's env-step budget is spent: {spent:,} of hydra.sweeper.max_env_steps="
                             f"{cap:,} after {finished} trial(s) of this command; one more could train "
                             f"{trial_steps:,}")
                    break
            for params in queue[finished:finished + batch]:
                study.enqueue_trial(params)
            trials = [study.ask() for _ in range(batch)]
            jobs = []
            for trial in trials:
                if baseline_rest and trial.number == 0:
                    trial.set_user_attr(BASELINE_ATTR, baseline_rest)
                self.suggest(study, trial, distributions)
                for index, seed in enumerate(self.trial_seeds()):
                    subdir = f"trial_{trial.number}" + (f"/seed_{seed}" if self.n_seeds > 1 else "")
                    jobs.append(self.trial_overrides(study, trial, seed, subdir, leader=index == 0))
            start = time.perf_counter()
            try:
                returns = self.launch(jobs, [t._trial_id for t in trials], trials[0].number * self.n_seeds)
            except KeyboardInterrupt:
                for trial in trials:
                    self.tell(study, trial, TrialState.FAIL, None, "the sweep was interrupted", 0.0)
                log.error(f"interrupted after {finished} trials; run the same command again to continue study "
                          f"{study.study_name}")
                self.report(study)
                raise SystemExit(130)
            seconds = time.perf_counter() - start
            for i, trial in enumerate(trials):
                failed += self.record(study, trial, returns[i * self.n_seeds:(i + 1) * self.n_seeds], seconds)
            finished += batch
            rate = float(self.s["max_failure_rate"])
            if failed / finished > rate and (finished >= 3 or failed == finished == n_trials or failed == finished >= per_batch * 2):
                self.report(study)
                raise SweepError(f"{failed} of {finished} trials failed (hydra.sweeper.max_failure_rate={rate}); "
                                  f"each trial's error is in its line above and its log in {self.sweep_dir}/trial_<n>/")
        if self.confirm:
            self.run_confirmation(study)
        self.report(study)

    def trial_seeds(self) -> list[int | None]:
        """The seeds of one trial: the config's seed alone, or seed, seed+1, ... with seeds_per_trial."""
        return [None] if self.n_seeds == 1 else [self.seed + i for i in range(self.n_seeds)]

    def launch(self, jobs: list[list[str]], trial_ids: list[int], first_job: int) -> list[Any]:
        """Run the jobs n_jobs at a time (each its own process); a batch whose processes died gives the error."""
        n_jobs, results = self.s["n_jobs"], []
        with Heartbeat(self.storage, float(self.s["heartbeat_interval"])) as beat:
            beat.trial_ids += trial_ids
            for i in range(0, len(jobs), n_jobs):
                chunk = jobs[i:i + n_jobs]
                try:
                    results += list(self.launcher.launch(chunk, initial_job_idx=first_job + i))
                except Exception as e:  # noqa: BLE001 - a trial process that died (killed, out of memory)
                    results += [e] * len(chunk)
        return results

    def suggest(self, study: optuna.Study, trial: optuna.trial.Trial, distributions: Mapping[str, BaseDistribution]) -> None:
        # draws depend on (seed, trial number): reproducible, and distinct across resumed or concurrent sweeps
        reseed(study.sampler, self.seed * 100_003 + trial.number)
        fixed = trial.user_attrs.get(BASELINE_ATTR, {})
        for name, dist in distributions.items():
            if name not in fixed:
                trial._suggest(name, dist)

    def trial_overrides(self, study: optuna.Study, trial: optuna.trial.FrozenTrial | optuna.trial.Trial,
                        seed: int | None, subdir: str, leader: bool = True, report: bool = True) -> list[str]:
        trial_id = trial._trial_id if report else None
        spec = {"storage": self.storage_url, "study": study.study_name, "trial_id": trial_id,
                "prune": self.prune and report, "leader": leader, "pruner": self.s["pruner"],
                "warmup_trials": self.s["warmup_trials"], "warmup_steps": self.s["warmup_steps"],
                "reports": self.s["reports"], "last_evals": self.s["last_evals"]}
        values = {**params_of(trial), **self.fixed}
        if seed is not None:
            values.pop("seed", None)
            values["seed"] = seed
        return [*(f"{k}={v}" for k, v in values.items()),
                f"hydra.sweep.dir='{self.sweep_dir}'", f"hydra.sweep.subdir={subdir}",
                f"++hydra.job.env_set.{TRIAL_ENV}='{json.dumps(spec)}'"]

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

    def outcome(self, ret: Any) -> tuple[TrialState, dict[str, float] | None, str | None]:
        """How one job ended: (state, its metrics, its one-line error)."""
        if isinstance(ret, BaseException):
            return TrialState.FAIL, None, f"the trial's process died: {one_line(ret)}"
        if ret.status.name == "COMPLETED":
            metrics = ret.return_value
            if not isinstance(metrics, dict):
                try:
                    metrics = {"final_eval": float(metrics)}
                except (TypeError, ValueError):
                    return TrialState.FAIL, None, f"the task returned {metrics!r}, not a number"
            value = metrics.get(self.objective)
            if value is None or not math.isfinite(value):
                return TrialState.FAIL, None, f"objective {self.objective} is {value}"
            return TrialState.COMPLETE, metrics, None
        if isinstance(ret._return_value, optuna.TrialPruned):
            return TrialState.PRUNED, None, one_line(ret._return_value)
        return TrialState.FAIL, None, one_line(ret._return_value)

    def record(self, study: optuna.Study, trial: optuna.trial.Trial, returns: list[Any], seconds: float) -> int:
        """Tell the study how the trial (all its seeds) ended and print its line; returns 1 for a failure."""
        outcomes = [self.outcome(ret) for ret in returns]
        trial.set_user_attr(STEPS_ATTR, sum(trained_steps(ret) for ret in returns))
        states = [state for state, _, _ in outcomes]
        errors = [error for _, _, error in outcomes if error]
        values: list[float] | None = None
        if TrialState.FAIL in states:
            state = TrialState.FAIL
        elif TrialState.PRUNED in states:
            state = TrialState.PRUNED
        else:
            state = TrialState.COMPLETE
            per_seed = [metrics[self.objective] for _, metrics, _ in outcomes]
            train_seconds = sum(metrics.get("train_seconds", math.nan) for _, metrics, _ in outcomes) / len(outcomes)
            if self.n_seeds > 1:
                trial.set_user_attr("seed_values", [round(v, 6) for v in per_seed])
            trial.set_user_attr("train_seconds", round(train_seconds, 3))
            values = [aggregate(per_seed, self.aggregate)]
            if self.multi:
                values.append(train_seconds)
        error = errors[0] if errors and state != TrialState.COMPLETE else None
        self.tell(study, trial, state, values, error, seconds)
        params = " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in params_of(trial).items())
        shown = " ".join(map(_format, values)) if values else "-"
        log.info(f"trial {trial.number:>3} {state.name:<8} {shown:>9} {seconds:7.1f} s  {params}"
                 + (f"  | {error}" if error else ""))
        return int(state == TrialState.FAIL)

    def tell(self, study, trial, state, values, error, seconds) -> None:
        trial.set_user_attr("seconds", round(seconds, 2))
        if error:
            trial.set_user_attr("error", error)
        try:
            study.tell(trial, values, state=state)
        except RuntimeError as e:  # already finished (marked FAIL by another sweeper)
            log.warning(f"trial {trial.number}: {e}")

    # -- the confirmation round --------------------------------------------------------------------------
    def run_confirmation(self, study: optuna.Study) -> None:
        """Re-run the top_k configurations on `seeds` fresh seeds; their results are kept in the study's user
        attributes (confirm_<trial>: {seed: objective}), so a continued sweep runs only the missing ones."""
        top_k, n = self.confirm["top_k"], self.confirm["seeds"]
        top = self.ranked(study)[:top_k]
        seeds = [self.seed + CONFIRM_SEED_OFFSET + j for j in range(n)]
        jobs, keys = [], []
        for trial in top:
            done = study.user_attrs.get(f"confirm_{trial.number}", {})
            for seed in seeds:
                if str(seed) not in done:
                    jobs.append(self.trial_overrides(study, trial, seed, f"confirm/trial_{trial.number}_seed_{seed}",
                                                     report=False))
                    keys.append((trial, seed))
        if not jobs:
            return
        log.info(f"confirmation: the top {len(top)} configuration(s) on {n} fresh seeds "
                 f"({seeds[0]}..{seeds[-1]}): {len(jobs)} run(s)")
        start = time.perf_counter()
        returns = self.launch(jobs, [], self.next_job_number(study))
        for (trial, seed), ret in zip(keys, returns):
            state, metrics, error = self.outcome(ret)
            if state != TrialState.COMPLETE:
                log.warning(f"confirmation of trial {trial.number}, seed {seed}: {state.name} {error or ''}")
                continue
            done = dict(study.user_attrs.get(f"confirm_{trial.number}", {}))
            done[str(seed)] = metrics[self.objective]
            study.set_user_attr(f"confirm_{trial.number}", done)
        log.info(f"confirmation took {time.perf_counter() - start:.1f} s")

    def next_job_number(self, study: optuna.Study) -> int:
        """The first job number after every search trial's (trial n's jobs are n * seeds_per_trial + i)."""
        return (max((t.number for t in study.get_trials(deepcopy=False)), default=-1) + 1) * self.n_seeds

    def ranked(self, study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
        """Complete trials, best first by the search's objective."""
        complete = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))]
        return sorted(complete, key=lambda t: t.values[0], reverse=self.directions[0] == "maximize")

    def confirmation_table(self, study: optuna.Study) -> list[dict[str, Any]]:
        """The confirmed configurations ranked by their seeds' aggregate (hydra.sweeper.aggregate: mean or iqm,
        column confirmed_<aggregate>), with its 95% stratified-bootstrap interval."""
        from rlexp.stats import interval_estimates

        ranked = self.ranked(study)
        confirmed = {t.number: [float(v) for v in study.user_attrs.get(f"confirm_{t.number}", {}).values()]
                     for t in ranked}
        confirmed = {k: v for k, v in confirmed.items() if v}
        if not confirmed:
            return []
        estimates = interval_estimates({str(k): v for k, v in confirmed.items()}, self.aggregate)
        column = f"confirmed_{self.aggregate}"
        rows = []
        for search_rank, trial in enumerate(ranked, 1):
            if trial.number not in confirmed:
                continue
            point, low, high = estimates[str(trial.number)]
            rows.append({"trial": trial.number, "search_rank": search_rank, "search_value": trial.values[0],
                         column: point, "ci_low": low, "ci_high": high,
                         "seeds": len(confirmed[trial.number]), "params": params_of(trial)})
        rows.sort(key=lambda r: r[column], reverse=self.directions[0] == "maximize")
        for rank, row in enumerate(rows, 1):
            row["confirmed_rank"] = rank
        return rows

    # -- the report -----------------------------------------------------------------------------------------
    def report(self, study: optuna.Study) -> None:
        """optimization_results.yaml, trials.csv, tuned/best.yaml and plots in the sweep dir; with a confirmation
        round confirmation.csv (best.yaml is then the confirmed winner), with two objectives pareto_front.csv."""
        trials = study.get_trials(deepcopy=False)
        complete = [t for t in trials if t.state == TrialState.COMPLETE]
        counts = {s.name: sum(t.state == s for t in trials) for s in TrialState if any(t.state == s for t in trials)}
        self.sweep_dir.mkdir(parents=True, exist_ok=True)
        results: dict[str, Any] = {"name": "optuna", "study_name": study.study_name, "storage": self.storage_url,
                                   "objective": self.objective, "directions": self.directions,
                                   "seeds_per_trial": self.n_seeds, "trials": counts,
                                   "env_steps": sum(t.user_attrs.get(STEPS_ATTR, 0) for t in trials)}
        best, confirmed = None, []
        if complete and self.multi:
            front = sorted(study.best_trials, key=lambda t: t.values[0], reverse=self.directions[0] == "maximize")
            best = front[0]
            results["pareto_front"] = [{"trial": t.number, self.objective: t.values[0], "train_seconds": t.values[1],
                                        "params": params_of(t)} for t in front]
            self.write_csv("pareto_front.csv", results["pareto_front"])
        elif complete:
            best = self.ranked(study)[0]
            results.update(best_params=params_of(best), best_value=best.values[0], best_trial=best.number)
            confirmed = self.confirmation_table(study) if self.confirm else []
            if confirmed:
                winner = confirmed[0]
                best = next(t for t in complete if t.number == winner["trial"])
                results.update(best_params=params_of(best), best_value=winner[f"confirmed_{self.aggregate}"],
                               best_trial=best.number, search_best_trial=self.ranked(study)[0].number,
                               confirmation=confirmed)
                self.write_csv("confirmation.csv", confirmed)
        write_text(self.sweep_dir / "optimization_results.yaml", OmegaConf.to_yaml(OmegaConf.create(results)))
        try:
            write_text(self.sweep_dir / "trials.csv", study.trials_dataframe().to_csv(index=False))
        except Exception as e:  # noqa: BLE001 - the report is best-effort; the study itself is in the storage
            log.warning(f"trials.csv: {e}")
        if best is None:
            log.error(f"no trial of study {study.study_name} has finished yet ({counts})")
            return
        preset = self.write_best_preset(best, study.study_name, results.get("best_value", best.values[0]))
        self.plot(study, complete)
        done = (f"({counts.get('COMPLETE', 0)} complete, {counts.get('PRUNED', 0)} pruned, "
                f"{counts.get('FAIL', 0)} failed)")
        if self.multi:
            log.info(f"Pareto front: {len(results['pareto_front'])} trial(s) {done}; highest {self.objective}: trial "
                     f"{best.number} ({_format(best.values[0])} in {best.values[1]:.1f} s); all in pareto_front.csv")
        elif confirmed:
            winner = confirmed[0]
            score = winner[f"confirmed_{self.aggregate}"]
            log.info(f"confirmed best: trial {best.number}, {self.aggregate} {score:.4g} "
                     f"[{winner['ci_low']:.4g}, {winner['ci_high']:.4g}] over {winner['seeds']} fresh seeds "
                     f"(search rank {winner['search_rank']}) {done}; ranking in confirmation.csv")
        else:
            log.info(f"best: trial {best.number}, objective {best.values[0]:.4g} {done}")
        log.info(f"run it: {self.run_command(best)}")
        if preset is not None:
            log.info(f"or: {self.preset_command(best)}   (preset {preset}; copy it into your config dir's tuned/ to "
                     "keep it)")

    # -- reproducing the best trial -----------------------------------------------------------------------------
    def command_prefix(self, preset_dir: Path | None = None) -> list[str]:
        """`python -m rlexp` with the study's own config dir (its presets) and config name, and `preset_dir`'s
        presets (tuned/best.yaml): only one --config-dir can be given, so a second goes on hydra.searchpath."""
        runtime = self.config.hydra.runtime
        dirs = [str(Path(str(source.path)).resolve()) for source in runtime.get("config_sources") or []
                if source.get("provider") == "command-line" and source.get("schema") == "file"]
        words = ["python", "-m", "rlexp"]
        if dirs:
            words += ["--config-dir", dirs[0]]
        name = OmegaConf.select(self.config, "hydra.job.config_name")
        if name and name != "config":
            words += ["--config-name", str(name)]
        if preset_dir is not None:
            words += [f"hydra.searchpath=[file://{preset_dir}]"] if dirs else ["--config-dir", str(preset_dir)]
        return words

    def run_command(self, best: optuna.trial.FrozenTrial) -> str:
        """The command that trains the best configuration as its trial did (the fallback preset included)."""
        import shlex

        agent, env = self.agent_env(best)
        values = {k: v for k, v in {**self.fixed, **params_of(best)}.items() if k not in ("agent", "env")
                  and not k.lstrip("+~").startswith(SWEEP_ONLY)}
        words = [*self.command_prefix(), f"agent={agent}", f"env={env}", *(f"{k}={v}" for k, v in values.items())]
        return shlex.join(words)

    def preset_command(self, best: optuna.trial.FrozenTrial) -> str:
        import shlex

        agent, env = self.agent_env(best)
        return shlex.join([*self.command_prefix(self.sweep_dir), f"agent={agent}", f"env={env}", "tuned=best"])

    def agent_env(self, best: optuna.trial.FrozenTrial) -> tuple[str, str]:
        """The agent and env presets the trial trained with: the study's, or the ones it drew (agent=ppo,a2c)."""
        choices = self.config.hydra.runtime.choices
        agent, env = (best.params.get(group, choices.get(group)) for group in ("agent", "env"))
        return str(agent), str(env)

    def trial_config(self, trial: optuna.trial.FrozenTrial) -> tuple[Path, dict[str, Any] | None]:
        """The config the trial trained with, as its run dir keeps it (its first seed's with seeds_per_trial)."""
        folder = self.sweep_dir / f"trial_{trial.number}"
        seeds = sorted(folder.glob("seed_*/.hydra/config.yaml"), key=lambda p: int(p.parent.parent.name[5:]))
        for path in [folder / ".hydra" / "config.yaml", *seeds]:
            if path.is_file():
                return path, OmegaConf.to_container(OmegaConf.load(path))
        return folder / ".hydra" / "config.yaml", None

    def group_choices(self, best: optuna.trial.FrozenTrial) -> dict[str, Any]:
        """The model or buffer presets the study picked (model=lstm): the preset overrides them as well, so that
        their keys, not the default preset's, are the ones its values go into."""
        return {k: v for k, v in {**self.fixed, **best.params}.items() if k in PRESET_GROUPS}

    def write_csv(self, name: str, rows: list[dict[str, Any]]) -> None:
        import pandas as pd

        frame = pd.DataFrame([{**{k: v for k, v in row.items() if k != "params"},
                               **{f"params_{k}": v for k, v in row.get("params", {}).items()}} for row in rows])
        write_text(self.sweep_dir / name, frame.to_csv(index=False))

    def write_best_preset(self, best: optuna.trial.FrozenTrial, study_name: str, value: float) -> Path | None:
        """tuned/best.yaml: the whole configuration the best trial trained with (agent, env, model, buffer and
        run: its fallback preset's values, the sweep's fixed ones, the sampled ones, its budget), as a preset."""
        source, config = self.trial_config(best)
        if config is None:
            log.warning(f"tuned/best.yaml not written: {source}, the config trial {best.number} trained with, is "
                        "missing")
            return None
        preset: dict[str, Any] = {k: config[k] for k in PRESET_SECTIONS if k in config}
        groups = self.group_choices(best)
        if groups:
            preset = {"defaults": [{f"override /{k}": v} for k, v in groups.items()], **preset}
        path = self.sweep_dir / "tuned" / "best.yaml"
        how = f"confirmed {self.aggregate}" if self.confirm else self.objective
        agent, env = self.agent_env(best)
        keep = (f"tuned/{study_name}.yaml and add tuned={study_name}" if env == "generic"
                else f"tuned/{agent}_{env}.yaml")
        header = (f"# @package _global_\n# Best of study {study_name}: trial {best.number}, {how} {value:.6g}; the "
                  f"whole configuration it trained with ({source.relative_to(self.sweep_dir)}).\n"
                  f"# Use: {self.preset_command(best)}\n# or copy this file to your config dir as {keep}\n")
        write_text(path, header + OmegaConf.to_yaml(OmegaConf.create(preset)))
        return path

    def plot(self, study: optuna.Study, complete: list) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import optuna.visualization.matplotlib as ov

        n_params = len({k for t in complete for k in t.params})
        if self.multi:
            plots = {"pareto_front": lambda: ov.plot_pareto_front(study, target_names=[self.objective, "train_seconds"])}
        else:
            plots = {"optimization_history": lambda: ov.plot_optimization_history(study)}
            if any(t.intermediate_values for t in study.get_trials(deepcopy=False)):
                plots["intermediate_values"] = lambda: ov.plot_intermediate_values(study)
            if n_params >= 2 and len(complete) >= 3:
                plots["param_importances"] = lambda: ov.plot_param_importances(study)
                plots["parallel_coordinate"] = lambda: ov.plot_parallel_coordinate(study)
            elif n_params == 1 and len(complete) >= 2:
                plots["slice"] = lambda: ov.plot_slice(study)
        for name, make in plots.items():
            try:
                ax = make()
                figure = (ax.flat[0] if hasattr(ax, "flat") else ax).figure
                figure.tight_layout()
                write_atomic(self.sweep_dir / f"{name}.png", lambda f: figure.savefig(f, format="png", dpi=100))
                plt.close(figure)
            except Exception as e:  # noqa: BLE001 - one plot that can't be drawn must not lose the others
                log.warning(f"plot {name}: {one_line(e)}")


def write_text(path: Path, text: str) -> None:
    """A report file written whole or not at all (a killed sweep leaves the previous one)."""
    write_atomic(path, lambda f: f.write(text.encode()))


def reseed(sampler: optuna.samplers.BaseSampler, seed: int) -> None:
    """Reseed the sampler (and the random sampler it starts with) in place."""
    for part in (sampler, getattr(sampler, "_random_sampler", None), getattr(sampler, "_independent_sampler", None)):
        for attr in ("_rng", "_cma_rng"):
            state = getattr(part, attr, None)
            state = getattr(state, "rng", state)  # Optuna's LazyRandomState wraps a NumPy RandomState
            if hasattr(state, "seed"):
                state.seed(seed % 2**32)
