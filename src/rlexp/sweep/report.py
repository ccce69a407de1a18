"""What a study leaves in its folder: optimization_results.yaml, trials.csv, the best trial's whole configuration
as a preset (tuned/best.yaml), confirmation.csv or pareto_front.csv, Optuna's plots, and the one command that
trains the best configuration once."""
from __future__ import annotations

import logging
import os
import statistics
from pathlib import Path
from typing import Any

import optuna
from omegaconf import OmegaConf
from optuna.trial import TrialState

from rlexp.runs.files import write_atomic
from rlexp.sweep.settings import one_line

log = logging.getLogger("rlexp.sweep")
BASELINE_ATTR = "baseline_values"  # a baseline's or enqueued trial's values outside the search space (not Optuna's)
STEPS_ATTR = "env_steps"  # the env steps a trial trained, all its seeds (hydra.sweeper.max_env_steps counts them)
PRESET_SECTIONS = ("agent", "env", "model", "buffer", "run")  # what tuned/best.yaml holds of the trial's config
PRESET_GROUPS = ("model", "buffer")  # config groups whose choice it keeps
FOR_AUTOTUNE = "RLEXP_AUTOTUNE_STUDY"  # set by mode=autotune for the study it runs
SWEEP_ONLY = ("hydra.sweeper", "hydra.launcher", "hydra.sweep.", "hydra/sweeper", "hydra/launcher", "hydra.mode")


def params_of(trial: optuna.trial.FrozenTrial | optuna.trial.Trial) -> dict[str, Any]:
    """The values a trial trained with: its Optuna parameters, and a first trial's values outside the space."""
    return {**trial.params, **trial.user_attrs.get(BASELINE_ATTR, {})}


def _format(value: float) -> str:
    return f"{value:.4g}"


def write_text(path: Path, text: str) -> None:
    """A report file written whole or not at all (a killed sweep leaves the previous one)."""
    write_atomic(path, lambda f: f.write(text.encode()))



class Report:
    """The report's half of OptunaSweep (it sets sweep_dir, config, objective, directions, multi, aggregate,
    confirm, n_seeds, fixed and storage_url)."""

    def ranked(self, study: optuna.Study, trials: list[optuna.trial.FrozenTrial] | None = None
               ) -> list[optuna.trial.FrozenTrial]:
        """Complete trials, best first by the search's objective (of `trials`, a snapshot of the study, if given)."""
        trials = study.get_trials(deepcopy=False) if trials is None else trials
        complete = [t for t in trials if t.state == TrialState.COMPLETE]
        return sorted(complete, key=lambda t: t.values[0], reverse=self.directions[0] == "maximize")

    def pareto_front(self, complete: list[optuna.trial.FrozenTrial]) -> list[optuna.trial.FrozenTrial]:
        """The trials of `complete` (a snapshot's) that no other of them dominates (Optuna's best_trials reads
        the study again, which another worker may have changed since)."""
        signs = [1.0 if d == "maximize" else -1.0 for d in self.directions]

        def dominates(a: optuna.trial.FrozenTrial, b: optuna.trial.FrozenTrial) -> bool:
            pairs = [(s * x, s * y) for s, x, y in zip(signs, a.values, b.values)]
            return all(x >= y for x, y in pairs) and any(x > y for x, y in pairs)

        return [t for t in complete if not any(dominates(other, t) for other in complete)]

    def confirmation_table(self, study: optuna.Study, trials: list[optuna.trial.FrozenTrial] | None = None
                           ) -> list[dict[str, Any]]:
        """The confirmed configurations ranked by their seeds' aggregate (hydra.sweeper.aggregate: mean or iqm,
        column confirmed_<aggregate>), with its 95% stratified-bootstrap interval."""
        from rlexp.analysis.stats import interval_estimates

        ranked = self.ranked(study, trials)
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
            front = sorted(self.pareto_front(complete), key=lambda t: t.values[0],
                           reverse=self.directions[0] == "maximize")
            best = front[0]
            results["pareto_front"] = [{"trial": t.number, self.objective: t.values[0], "train_seconds": t.values[1],
                                        "params": params_of(t)} for t in front]
            self.write_csv("pareto_front.csv", results["pareto_front"])
        elif complete:
            best = self.ranked(study, trials)[0]
            results.update(best_params=params_of(best), best_value=best.values[0], best_trial=best.number)
            confirmed = self.confirmation_table(study, trials) if self.confirm else []
            if confirmed:
                winner = confirmed[0]
                best = next(t for t in complete if t.number == winner["trial"])
                results.update(best_params=params_of(best), best_value=winner[f"confirmed_{self.aggregate}"],
                               best_trial=best.number, search_best_trial=self.ranked(study, trials)[0].number,
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
        running = [t.number for t in trials if t.state == TrialState.RUNNING]  # the snapshot the counts are of
        elsewhere = (f"; so far: trial(s) {', '.join(map(str, running))} still running on another worker, which "
                     "reports the study's best when it ends") if running else ""
        done = (f"({counts.get('COMPLETE', 0)} complete, {counts.get('PRUNED', 0)} pruned, "
                f"{counts.get('FAIL', 0)} failed{elsewhere})")
        if self.multi:
            log.info(f"Pareto front: {len(results['pareto_front'])} trial(s) {done}; highest {self.objective}: trial "
                     f"{best.number} ({_format(best.values[0])} in {best.values[1]:.1f} s); all in pareto_front.csv")
        elif confirmed:
            winner = confirmed[0]
            score = winner[f"confirmed_{self.aggregate}"]
            log.info(f"confirmed best: trial {best.number}, {self.aggregate} {score:.4g} "
                     f"[{winner['ci_low']:.4g}, {winner['ci_high']:.4g}] over {winner['seeds']} fresh seeds "
                     f"(search rank {winner['search_rank']}) {done}; ranking in confirmation.csv")
        elif set(self.distributions) == {"seed"}:  # a grid of seeds: one configuration, nothing to rank
            values = [t.values[0] for t in complete]
            spread = f" ± {statistics.stdev(values):.4g}" if len(values) > 1 else ""
            each = ", ".join(f"seed {t.params['seed']}: {t.values[0]:.4g}" for t in complete)
            log.info(f"seeds: {self.objective} {statistics.mean(values):.4g}{spread} over {len(values)} seed(s) "
                     f"({each}) {done}")
            return
        else:
            log.info(f"best: trial {best.number}, objective {best.values[0]:.4g} {done}")
        if os.environ.get(FOR_AUTOTUNE):
            return  # autotune prints the one command that matters: training with the tuned preset it writes
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
        overrides = [f"agent={agent}", f"env={env}", *(f"{k}={as_typed(v)}" for k, v in values.items())]
        return shlex.join([*self.command_prefix(), *overrides, *self.train_once(overrides)])

    def preset_command(self, best: optuna.trial.FrozenTrial) -> str:
        import shlex

        agent, env = self.agent_env(best)
        words = [*self.command_prefix(self.sweep_dir), f"agent={agent}", f"env={env}", "tuned=best"]
        return shlex.join(words + self.train_once([f"agent={agent}", f"env={env}"]))

    def train_once(self, overrides: list[str]) -> list[str]:
        """["hydra.mode=RUN"] where the command would sweep again without -m: a config group it selects (a
        lightning-hydra-template style `+hparams_search=...`) or the primary config sets hydra.mode: MULTIRUN."""
        loader = getattr(self, "config_loader", None)
        if loader is None:
            return []
        from hydra.types import RunMode

        try:
            name = OmegaConf.select(self.config, "hydra.job.config_name") or "config"
            composed = loader.load_configuration(config_name=str(name), overrides=overrides, run_mode=RunMode.RUN)
        except Exception:  # noqa: BLE001 - the command composed for the trials; say it as it is
            return []
        return ["hydra.mode=RUN"] if composed.hydra.get("mode") == RunMode.MULTIRUN else []

    def agent_env(self, best: optuna.trial.FrozenTrial) -> tuple[str, str]:
        """The agent and env presets the trial trained with: the study's, or the ones it drew (agent=ppo,a2c)."""
        choices = self.config.hydra.runtime.choices
        agent, env = (best.params.get(group, choices.get(group)) for group in ("agent", "env"))
        return str(agent), str(env)

    def trial_config(self, trial: optuna.trial.FrozenTrial) -> tuple[Path, dict[str, Any] | None]:
        """The config the trial trained with, as its run dir keeps it (its first seed's with seeds_per_trial; a
        population's first member's, a single run's config)."""
        folder = self.sweep_dir / f"trial_{trial.number}"
        seeds = sorted(folder.glob("seed_*/.hydra/config.yaml"), key=lambda p: int(p.parent.parent.name[5:]))
        for path in [folder / ".hydra" / "config.yaml", *seeds]:
            if path.is_file():
                config = OmegaConf.to_container(OmegaConf.load(path))
                if not (config.get("run") or {}).get("seeds"):
                    return path, config
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
        from rlexp.runs.dirs import env_display_name

        env_id = str((config.get("env") or {}).get("id", ""))
        keep = f"tuned/{agent}_{env_display_name(env, env_id)}.yaml"  # env=generic: found by its env.id
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


def as_typed(value: Any) -> Any:
    """A value as a command line gives it: a whole float (`run.max_steps=2e4` is 20000.0 once parsed) as the
    integer it stands for, `run.max_steps=20000`."""
    if isinstance(value, float) and value.is_integer() and abs(value) >= 1:
        return int(value)
    return value
