"""Hyperparameter sweeps: rlexp's Optuna sweeper (`--multirun`) and the trial side of pruning.

The sweeper (selected by default in conf/config.yaml; the Hydra plugin in hydra_plugins/rlexp_sweeper
only registers it) extends hydra-optuna-sweeper:
- a persistent study (SQLite in the sweep dir by default, any SQLAlchemy URL with `storage=`) that the
  same command continues; a changed search space is refused with one line;
- comma lists only (`seed=0,1,2`) run as a grid, each combination once; `choice`, `interval`, `range`
  and `tag(log, ...)` are sampled (range's stop is exclusive, as in Hydra's basic sweeper);
- each trial runs in its own process (the launcher) and reports its mean return to the study at
  `reports` points; the pruner (median by default) stops weak trials, which are recorded PRUNED;
- a trial that raises is recorded FAIL with its one-line error and the sweep goes on, up to
  `max_failure_rate`; trials left RUNNING by a killed sweeper are marked FAIL on the next start;
- a report in the sweep dir: optimization_results.yaml, trials.csv, the best parameters as a preset
  (tuned/best.yaml) and Optuna's plots.
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

os.environ.setdefault("SQLALCHEMY_SILENCE_UBER_WARNING", "1")  # optuna 2 uses SQLAlchemy 1.4's legacy API
import optuna  # noqa: E402
from hydra.core.override_parser.overrides_parser import OverridesParser  # noqa: E402
from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, Override, RangeSweep, Transformer
from omegaconf import OmegaConf
from optuna.distributions import (BaseDistribution, CategoricalDistribution, DiscreteUniformDistribution,
                                  IntLogUniformDistribution, IntUniformDistribution, LogUniformDistribution,
                                  UniformDistribution)
from optuna.trial import TrialState

from rlexp.errors import Started, SweepError

log = logging.getLogger("rlexp.sweep")
optuna.logging.set_verbosity(optuna.logging.WARNING)  # our own one line per trial instead
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)  # enqueue_trial, plots
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
            return DiscreteUniformDistribution(start, last, step)
        return IntUniformDistribution(int(start), int(last), step=int(step))
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
            return IntLogUniformDistribution(low, high) if ints else LogUniformDistribution(low, high)
        return IntUniformDistribution(low, high) if ints else UniformDistribution(low, high)
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
def make_storage(url: str, heartbeat_interval: int | None = None, grace_period: int | None = None):
    """An RDB storage; SQLite paths become absolute (trials run elsewhere) and wait for locks instead of failing."""
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
        except (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.ProgrammingError) as e:
            # two sweepers creating the schema of a fresh database at once: the loser retries
            if attempt == 5:
                error = e
            time.sleep(0.5 + random.random())
        except Exception as e:  # noqa: BLE001 - a bad URL, a missing driver, a server that is down
            error = e
            break
    raise SweepError(f"hydra.sweeper.storage={url}: {type(error).__name__}: {str(error).splitlines()[0]}; use "
                     "sqlite:///path/optuna.db or postgresql://user@host/db")


def make_pruner(name: str, warmup_trials: int, warmup_steps: int) -> optuna.pruners.BasePruner:
    if name == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=warmup_trials, n_warmup_steps=warmup_steps)
    if name in ("none", None):
        return optuna.pruners.NopPruner()
    raise SweepError(f"hydra.sweeper.pruner={name} is unknown; use median or none")


# ----- the trial side ---------------------------------------------------------------------------------
class PruningReporter:
    """A tracker for a trial's process: reports the mean return to the study at `reports` evenly spaced
    steps (the same steps in every trial, so the pruner compares like with like) and stops the trial
    (optuna.TrialPruned) when the pruner says so."""

    def __init__(self, spec: Mapping[str, Any], max_steps: int) -> None:
        storage = make_storage(spec["storage"])
        pruner = make_pruner(spec["pruner"], int(spec["warmup_trials"]), int(spec["warmup_steps"]))
        study = optuna.load_study(study_name=spec["study"], storage=storage, pruner=pruner)
        self.trial = optuna.trial.Trial(study, int(spec["trial_id"]))
        self.trial.set_user_attr("pid", os.getpid())
        self.interval = max(1, max_steps // max(1, int(spec["reports"])))
        self.next_report = self.interval

    def scalars(self, step: int, values: Mapping[str, float]) -> None:
        mean = values.get("episode/mean_return")
        if mean is None or step < self.next_report or not math.isfinite(mean):
            return
        mark, self.next_report = self.next_report, (step // self.interval + 1) * self.interval
        self.trial.report(float(mean), mark)
        if self.trial.should_prune():
            message = f"pruned at step {mark:,} (mean return {mean:.4g})"
            log.info(message)
            raise optuna.TrialPruned(message)

    def video(self, path) -> None:
        pass

    def close(self, failed: bool = False) -> None:
        pass


def trial_reporter(max_steps: int) -> PruningReporter | None:
    """The pruning reporter when this process runs a trial of rlexp's sweeper, else None."""
    spec = os.environ.get(TRIAL_ENV)
    return PruningReporter(json.loads(spec), max_steps) if spec else None


# ----- the sweeper ---------------------------------------------------------------------------------------
class Heartbeat:
    """Records a heartbeat for the running trials so that a later sweeper can tell them from a killed one's."""

    def __init__(self, storage, interval: float) -> None:
        self.storage, self.interval, self.trial_ids = storage, interval, []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(self.interval):
            for trial_id in list(self.trial_ids):
                try:
                    self.storage.record_heartbeat(trial_id)
                except Exception as e:  # noqa: BLE001 - a missed heartbeat must not stop the sweep
                    log.debug(f"heartbeat failed: {e}")

    def __enter__(self):
        for trial_id in self.trial_ids:
            self.storage.record_heartbeat(trial_id)
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()


def one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return (text[0] if text else type(error).__name__)[:300]


class OptunaSweep:
    """The sweep itself; `RlexpOptunaSweeper` (the Hydra plugin) hands it its config, launcher and arguments."""

    def __init__(self, settings: Mapping[str, Any], config, launcher) -> None:
        self.s = dict(settings)
        self.config, self.launcher = config, launcher
        self.sweep_dir = Path(str(config.hydra.sweep.dir)).expanduser().resolve()
        if str(self.s.get("direction")) not in ("maximize", "minimize"):
            raise SweepError(f"hydra.sweeper.direction={self.s.get('direction')}: use maximize or minimize")

    # -- set-up ------------------------------------------------------------------------------------------
    def open_study(self, distributions: Mapping[str, BaseDistribution]) -> optuna.Study:
        url = str(self.s["storage"] or f"sqlite:///{self.sweep_dir / 'optuna.db'}")
        self.storage = make_storage(url, int(self.s["heartbeat_interval"]), int(self.s["grace_period"]))
        self.storage_url = self.storage.url if hasattr(self.storage, "url") else url
        name = str(self.s["study_name"])
        exists = name in [s.study_name for s in optuna.study.get_all_study_summaries(self.storage)]
        sampler = self.s["sampler"]
        study = optuna.create_study(study_name=name, storage=self.storage, sampler=sampler,
                                    direction=str(self.s["direction"]), load_if_exists=True)
        # Optuna caches the trials this process asked for and would not see what the trial processes report
        # (intermediate values: the pruned trials' values, the plots); read the storage itself instead.
        study._storage = getattr(study._storage, "_backend", study._storage)
        if exists:
            stale = self.storage._get_stale_trial_ids(study._study_id)  # RUNNING, no heartbeat for grace_period
            for trial_id in stale:
                self.storage.set_trial_user_attr(trial_id, "error", "left running by a sweep that was stopped")
                self.storage.set_trial_state(trial_id, TrialState.FAIL)
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
        study = self.open_study(distributions)
        n_trials = int(self.s["n_trials"])
        queue: list[dict[str, Any]] = []
        if is_grid:
            done = [t.params for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))]
            queue = [p for p in grid_points(distributions) if p not in done][:n_trials]
            n_trials = len(queue)
            log.info(f"grid of {len(grid_points(distributions))} combinations: {n_trials} to run")
        self.fixed = fixed
        Started.value = True
        finished, failed, n_jobs = 0, 0, max(1, int(self.s["n_jobs"]))
        log.info(f"sweep dir {self.sweep_dir}; {n_trials} trial(s), {n_jobs} at a time; one line per trial "
                 "(each trial's log: trial_<n>/)")
        while finished < n_trials:
            batch = min(n_jobs, n_trials - finished)
            for params in queue[finished:finished + batch]:
                study.enqueue_trial(params)
            trials = [study.ask() for _ in range(batch)]
            overrides = [self.trial_overrides(study, trial, distributions) for trial in trials]
            start = time.perf_counter()
            try:
                with Heartbeat(self.storage, float(self.s["heartbeat_interval"])) as beat:
                    beat.trial_ids += [t._trial_id for t in trials]
                    returns = self.launcher.launch(overrides, initial_job_idx=trials[0].number)
            except KeyboardInterrupt:
                for trial in trials:
                    self.tell(study, trial, TrialState.FAIL, None, "the sweep was interrupted", 0.0)
                log.error(f"interrupted after {finished} trials; run the same command again to continue study "
                          f"{study.study_name}")
                self.report(study)
                raise SystemExit(130)
            except Exception as e:  # noqa: BLE001 - a trial process that died (killed, out of memory)
                returns = [e] * batch
            seconds = time.perf_counter() - start
            for trial, ret in zip(trials, returns):
                failed += self.record(study, trial, ret, seconds)
            finished += batch
            rate = float(self.s["max_failure_rate"])
            if failed / finished > rate and (finished >= 3 or failed == finished == n_trials or failed == finished >= n_jobs * 2):
                self.report(study)
                raise SweepError(f"{failed} of {finished} trials failed (hydra.sweeper.max_failure_rate={rate}); "
                                  f"each trial's error is in its line above and its log in {self.sweep_dir}/trial_<n>/")
        self.report(study)

    def trial_overrides(self, study: optuna.Study, trial: optuna.trial.Trial,
                        distributions: Mapping[str, BaseDistribution]) -> list[str]:
        # draws depend on (seed, trial number): reproducible, and distinct across resumed or concurrent sweeps
        reseed(study.sampler, int(self.config.get("seed") or 0) * 100_003 + trial.number)
        for name, dist in distributions.items():
            trial._suggest(name, dist)
        spec = {"storage": self.storage_url, "study": study.study_name, "trial_id": trial._trial_id,
                "pruner": self.s["pruner"], "warmup_trials": self.s["warmup_trials"],
                "warmup_steps": self.s["warmup_steps"], "reports": self.s["reports"]}
        values = {**trial.params, **self.fixed}
        return [*(f"{k}={v}" for k, v in values.items()),
                f"hydra.sweep.dir='{self.sweep_dir}'", f"hydra.sweep.subdir=trial_{trial.number}",
                f"++hydra.job.env_set.{TRIAL_ENV}='{json.dumps(spec)}'"]

    def record(self, study: optuna.Study, trial: optuna.trial.Trial, ret: Any, seconds: float) -> int:
        """Tell the study how the trial ended and print its line; returns 1 for a failure."""
        if isinstance(ret, BaseException):
            state, value, error = TrialState.FAIL, None, f"the trial's process died: {one_line(ret)}"
        elif ret.status.name == "COMPLETED":
            value = ret.return_value
            try:
                value = float(value)
                state, error = (TrialState.COMPLETE, None) if math.isfinite(value) else (TrialState.FAIL, f"objective is {value}")
            except (TypeError, ValueError):
                state, error = TrialState.FAIL, f"the task returned {value!r}, not a number"
        elif isinstance(ret._return_value, optuna.TrialPruned):
            state, value, error = TrialState.PRUNED, None, one_line(ret._return_value)
        else:
            state, value, error = TrialState.FAIL, None, one_line(ret._return_value)
        self.tell(study, trial, state, value if state == TrialState.COMPLETE else None, error, seconds)
        params = " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in trial.params.items())
        shown = f"{value:.4g}" if state == TrialState.COMPLETE else "-"
        log.info(f"trial {trial.number:>3} {state.name:<8} {shown:>9} {seconds:7.1f} s  {params}"
                 + (f"  | {error}" if error else ""))
        return int(state == TrialState.FAIL)

    def tell(self, study, trial, state, value, error, seconds) -> None:
        trial.set_user_attr("seconds", round(seconds, 2))
        if error:
            trial.set_user_attr("error", error)
        try:
            study.tell(trial, value, state=state)
        except RuntimeError as e:  # already finished (marked FAIL by another sweeper)
            log.warning(f"trial {trial.number}: {e}")

    # -- the report -----------------------------------------------------------------------------------------
    def report(self, study: optuna.Study) -> None:
        """optimization_results.yaml, trials.csv, tuned/best.yaml and plots in the sweep dir."""
        trials = study.get_trials(deepcopy=False)
        complete = [t for t in trials if t.state == TrialState.COMPLETE]
        counts = {s.name: sum(t.state == s for t in trials) for s in TrialState if any(t.state == s for t in trials)}
        self.sweep_dir.mkdir(parents=True, exist_ok=True)
        results: dict[str, Any] = {"name": "optuna", "study_name": study.study_name, "storage": self.storage_url,
                                   "direction": str(self.s["direction"]), "trials": counts}
        if complete:
            best = study.best_trial
            results.update(best_params=dict(best.params), best_value=best.value, best_trial=best.number)
        OmegaConf.save(OmegaConf.create(results), self.sweep_dir / "optimization_results.yaml")
        try:
            study.trials_dataframe().to_csv(self.sweep_dir / "trials.csv", index=False)
        except Exception as e:  # noqa: BLE001 - the report is best-effort; the study itself is in the storage
            log.warning(f"trials.csv: {e}")
        if not complete:
            log.error(f"no trial of study {study.study_name} has finished yet ({counts})")
            return
        preset = self.write_best_preset(study.best_trial, study.study_name)
        self.plot(study, complete)
        choices = self.config.hydra.runtime.choices
        command = " ".join([f"agent={choices.get('agent')}", f"env={choices.get('env')}",
                            *(f"{k}={v}" for k, v in {**self.fixed, **best.params}.items() if k not in ("agent", "env"))])
        log.info(f"best: trial {best.number}, objective {best.value:.4g} ({counts.get('COMPLETE', 0)} complete, "
                 f"{counts.get('PRUNED', 0)} pruned, {counts.get('FAIL', 0)} failed)")
        log.info(f"run it: python -m rlexp {command}")
        log.info(f"or: python -m rlexp --config-dir {self.sweep_dir} agent={choices.get('agent')} "
                 f"env={choices.get('env')} tuned=best   (preset {preset}; copy it into conf/tuned/ to keep it)")

    def write_best_preset(self, best: optuna.trial.FrozenTrial, study_name: str) -> Path:
        """The tuned preset of the study's agent+env with the sweep's fixed values and the best parameters."""
        import importlib.resources

        choices = self.config.hydra.runtime.choices
        preset = OmegaConf.create({})
        base = choices.get("tuned")
        if base:
            path = importlib.resources.files("rlexp.conf") / "tuned" / f"{base}.yaml"
            if path.is_file():
                preset = OmegaConf.create(path.read_text())
        groups: dict[str, Any] = {}
        for key, value in {**self.fixed, **best.params}.items():
            key = key.lstrip("+~")
            if "." not in key:  # a config group choice (model=mlp_large): a defaults override
                if key not in ("agent", "env", "hydra") and not key.startswith("hydra/"):
                    groups[key] = value
                continue
            if key.split(".")[0] in ("hydra", "run") or key == "seed":
                continue
            if isinstance(value, str):  # a fixed value as typed on the command line: parse it as Hydra does
                value = OverridesParser.create().parse_override(f"{key}={value}").value()
            OmegaConf.update(preset, key, _yaml_value(value), force_add=True)
        if groups:
            preset.defaults = [{f"override /{k}": v} for k, v in groups.items()]
        path = self.sweep_dir / "tuned" / "best.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        header = (f"# @package _global_\n# Best of study {study_name}: trial {best.number}, objective {best.value:.6g}.\n"
                  f"# Use: python -m rlexp --config-dir {self.sweep_dir} agent={choices.get('agent')} "
                  f"env={choices.get('env')} tuned=best\n"
                  f"# or copy this file to conf/tuned/{choices.get('agent')}_{choices.get('env')}.yaml\n")
        tmp = path.with_suffix(".tmp")
        tmp.write_text(header + OmegaConf.to_yaml(preset))
        os.replace(tmp, path)
        return path

    def plot(self, study: optuna.Study, complete: list) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import optuna.visualization.matplotlib as ov

        n_params = len({k for t in complete for k in t.params})
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
                figure.savefig(self.sweep_dir / f"{name}.png", dpi=100)
                plt.close(figure)
            except Exception as e:  # noqa: BLE001 - one plot that can't be drawn must not lose the others
                log.warning(f"plot {name}: {one_line(e)}")


def reseed(sampler: optuna.samplers.BaseSampler, seed: int) -> None:
    """Reseed the sampler (and the random sampler TPE starts with) in place."""
    import numpy as np

    for part in (sampler, getattr(sampler, "_random_sampler", None), getattr(sampler, "_independent_sampler", None)):
        if part is not None and hasattr(part, "_rng"):
            part._rng = np.random.RandomState(seed % 2**32)


def _yaml_value(value: Any) -> Any:
    """Plain Python values for the preset (numpy/optuna types would not round-trip)."""
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    return str(value)
