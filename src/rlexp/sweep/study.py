"""The sweep: opens (or continues) the study, keeps `n_jobs` job slots busy with its trials' seeds, tells the study
how each trial ended the moment its last seed ends, and runs the confirmation round.

Workers on one storage (several commands, machines or a Slurm array) share the study: each claims its next trial
under `claim_lock`, until the study holds `n_trials` (a killed sweep's trials aside) or its step budget
(`max_env_steps`, counting running trials at their most steps and finished ones at what they trained) can't
take one more trial; a grid point runs once."""
from __future__ import annotations

import functools
import json
import logging
import math
import signal
from pathlib import Path
from typing import Any, Mapping

import optuna
from omegaconf import OmegaConf, open_dict, read_write
from optuna.distributions import BaseDistribution
from optuna.trial import TrialState

from rlexp.errors import Started, SweepError
from rlexp.sweep.budget import Budget
from rlexp.sweep.pruning import LEADER_ENDED, TRIAL_ENV
from rlexp.sweep.checks import MEASURE_ATTR, SPACE_ATTR, Checks
from rlexp.sweep.confirm import Confirmation
from rlexp.sweep.report import BASELINE_ATTR, STEPS_ATTR, Report, _format, params_of
from rlexp.sweep.populations import Populations, member_results, packed_result
from rlexp.sweep.scheduler import Job, Running, Slots, runs_in_process, stopped_by_ctrl_c, trial_console
from rlexp.sweep.trials import (FIRST_ATTR, INTERRUPTED_ATTR, MARKED_ATTR, REFERENCE_ATTR, REFUSED_ATTR,
                                RESERVED_ATTR, aggregate, counted_trials, first_key, reseed, trial_seed)
from rlexp.sweep.settings import check_settings, one_line
from rlexp.sweep.space import baseline_params, described, grid_choices, grid_points, search_space, sweep_hash
from rlexp.sweep.storage import Heartbeat, claim_lock, make_storage, stale_trial_ids, storage_url

log = logging.getLogger("rlexp.sweep")
# conf/config.yaml's: the study's own folder (Hydra's basic sweeper, which has no study name: Hydra's dated one)
DEFAULT_SWEEP_DIR = "multirun/${oc.select:hydra.sweeper.study_name,${now:%Y-%m-%d}/${now:%H-%M-%S}}"


def sigint_handler(handler: Any) -> Any:
    """Set the Ctrl-C handler (main thread only; elsewhere nothing changes); the one it replaced, or None."""
    if handler is None:
        return None
    try:
        return signal.signal(signal.SIGINT, handler)
    except ValueError:
        return None


class OptunaSweep(Budget, Checks, Confirmation, Report, Populations):
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
        self.sampler_seed = self.seed if self.s.get("sampler_seed") is None else int(self.s["sampler_seed"])
        self.fixed: dict[str, str] = {}
        self.claimed: dict[int, optuna.trial.Trial] = {}  # this worker's trials the study has not been told of
        self.carried: optuna.trial.Trial | None = None  # claimed for the next packed job (trials_per_job)

    # -- set-up ------------------------------------------------------------------------------------------
    def study_name(self, distributions: Mapping[str, BaseDistribution], fixed: Mapping[str, str]) -> str:
        """hydra.sweeper.study_name, or <agent>_<env>_<hash of the search space and fixed values>: the same command
        continues its study, another sweep of the pair starts its own."""
        if self.s["study_name"] is not None:
            return str(self.s["study_name"])
        from rlexp.runs.dirs import env_display_name

        choices = self.config.hydra.runtime.choices
        env = env_display_name(choices.get("env"), str(OmegaConf.select(self.config, "env.id", default="")))
        return f"{choices.get('agent')}_{env}_{sweep_hash(distributions, fixed, self.measure())}"

    def sibling_studies(self, name: str) -> list[str]:
        """[<agent>+<env>, the other generated studies of the pair in multirun/], or [] (a name of the user's)."""
        if self.s["study_name"] is not None or not name.count("_") >= 2:
            return []
        prefix = name.rsplit("_", 1)[0]
        folder = Path.cwd() / "multirun"
        found = sorted(p.name for p in folder.glob(f"{prefix}_*") if p.name != name and (p / "optuna.db").exists()
                       and len(p.name) == len(name))
        agent = str(self.config.hydra.runtime.choices.get("agent"))
        return [f"{agent}+{prefix[len(agent) + 1:]}", *found] if found else []

    def place(self, name: str) -> None:
        """The sweep's folder: hydra.sweep.dir where the user set it, else multirun/<study name>."""
        sweep = OmegaConf.to_container(self.config.hydra.sweep, resolve=False)
        if sweep.get("dir") == DEFAULT_SWEEP_DIR:
            self.sweep_dir = (Path.cwd() / "multirun" / name).resolve()
        else:
            self.sweep_dir = Path(str(self.config.hydra.sweep.dir)).expanduser().resolve()
        with read_write(self.config.hydra.sweep), open_dict(self.config.hydra.sweep):
            self.config.hydra.sweep.dir = str(self.sweep_dir)

    def open_study(self, distributions: Mapping[str, BaseDistribution], name: str | None = None) -> optuna.Study:
        name = name or str(self.s["study_name"])
        url = str(self.s["storage"] or f"sqlite:///{self.sweep_dir / 'optuna.db'}")
        self.storage = make_storage(url, int(self.s["heartbeat_interval"]), int(self.s["grace_period"]))
        self.storage_url = storage_url(self.storage, url)
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
            self.check_search_space(study, distributions)  # (a study this command would not continue: untouched)
            self.check_measure(study)
            stale = self.reclaim(study, say=False)
            trials = study.get_trials(deepcopy=False)
            counts = {s.name: sum(t.state == s for t in trials) for s in TrialState}
            log.info(f"continuing study {name} ({len(trials)} trials so far: "
                     + ", ".join(f"{n} {k}" for k, n in counts.items() if n)
                     + (f"; marked {len(stale)} trial(s) left running by a stopped sweep FAIL" if stale else "") + ")")
        else:
            study.set_user_attr(SPACE_ATTR, described(distributions))
            study.set_user_attr(MEASURE_ATTR, self.measure())
            study.set_user_attr(MARKED_ATTR, True)
            others = self.sibling_studies(name)
            log.info(f"new study {name} in {self.storage_url}" + (
                f"; other studies of {others[0]} here: {', '.join(others[1:])} (another search space or other fixed "
                "values; hydra.sweeper.study_name=<name> continues one)" if others else ""))
        return study

    # -- the loop -------------------------------------------------------------------------------------------
    def run(self, arguments: list[str]) -> None:
        params = [f"{k}={v}" for k, v in (self.s.get("params") or {}).items()]
        distributions, fixed, is_grid = search_space(params + list(arguments))
        for key in fixed:
            distributions.pop(key, None)
        self.check_space(distributions, is_grid)
        self.check_evaluations(distributions, fixed)
        self.check_choices(distributions, fixed)
        self.check_population(distributions, fixed)
        self.cap = self.s.get("max_env_steps")
        self.job_steps = self.trial_steps(fixed, distributions) // self.n_seeds if self.cap else 0
        if self.cap and self.job_steps * self.n_seeds > self.cap:
            raise SweepError(f"hydra.sweeper.max_env_steps={self.cap}: one trial trains up to "
                             f"{self.job_steps * self.n_seeds:,} env steps (run.max_steps x seeds_per_trial); raise "
                             "it or shorten the trials")
        sampler = self.s["sampler"]
        if isinstance(sampler, functools.partial):  # hydra/sweeper/sampler=grid: every point of the space once
            distributions = {k: grid_choices(k, d) for k, d in distributions.items()}
            is_grid = True
            self.s["sampler"] = sampler({k: d.choices for k, d in distributions.items()})
        name = self.study_name(distributions, fixed)
        self.place(name)
        study = self.open_study(distributions, name)
        self.distributions, self.is_grid = distributions, is_grid
        self.fixed = {k: v for k, v in fixed.items() if not (k == "seed" and self.n_seeds > 1)}
        self.n_trials = int(self.s["n_trials"])
        Started.value = True
        self.failed_points: list[dict[str, Any]] = []
        held = len(counted_trials(study))
        seeds = f", {self.n_seeds} seeds each" if self.n_seeds > 1 else ""
        if is_grid and not self.grid_left(study):
            log.info(f"study {study.study_name} already holds every point of its grid ({held} trial(s))")
        elif held >= self.n_trials:
            log.info(f"study {study.study_name} already holds {held} trial(s) (hydra.sweeper.n_trials={self.n_trials}); "
                     "raise hydra.sweeper.n_trials to add more")
        else:
            slots = "1 job at a time (hydra/launcher=basic trains each inside this process)" if runs_in_process(
                self.launcher) else f"{self.s['n_jobs']} job(s) at a time"
            points = len(grid_points(self.distributions)) if is_grid else 0
            until = (f"the grid's {points} point(s)" if is_grid and points <= self.n_trials
                     else f"trials until the study holds {self.n_trials}")
            log.info(f"sweep dir {self.sweep_dir}; {until}{seeds}, {slots}; one line per trial (each trial's log: "
                     "trial_<n>/)")
            self.search(study)
        if self.confirm:
            self.run_confirmation(study)
        self.report(study)

    def search(self, study: optuna.Study) -> None:
        """Keep every slot busy: a free slot takes a waiting seed of a running trial, else a new trial."""
        slots = Slots(self.launcher, self.s["n_jobs"])
        running: list[Running] = []
        finished = failed = 0
        with Heartbeat(self.storage, float(self.s["heartbeat_interval"])) as beat:
            try:
                while True:
                    while slots.free:
                        job = self.next_pending(running)
                        if job is None:
                            owners = self.next_trials(study, beat)
                            if not owners:
                                break
                            running.extend(owners)
                            job = self.next_pending(running)
                        slots.start(job)
                    if not slots.running:
                        break
                    for job in slots.next_done():
                        if stopped_by_ctrl_c(job.result):
                            raise KeyboardInterrupt  # the Ctrl-C reached the trial first: its trial is interrupted
                        for owner in job.owners:  # (a packed job's several trials)
                            owner.ended.append(job)
                            if job.seed_index == 0:
                                self.storage.set_trial_user_attr(owner.trial._trial_id, LEADER_ENDED, True)
                            state, _, _ = self.outcome(job.result, owner.trial)
                            if state != TrialState.COMPLETE:
                                owner.stop = True
                                owner.ended += owner.pending
                                owner.pending = []
                            if owner.finished:
                                failed += self.record(study, owner)
                                running.remove(owner)  # (after its record: a Ctrl-C meanwhile finds it here)
                                beat.trial_ids.discard(owner.trial._trial_id)
                                finished += 1
                                self.check_failures(study, finished, failed)
            except KeyboardInterrupt:
                # the Ctrl-C reaches the sweep and its trials' processes, in either order: a second one must not
                # cut short the marking of its trials
                previous = sigint_handler(signal.SIG_IGN)
                for owner in running:
                    self.interrupt(study, owner.trial, self.interrupted_steps(owner))
                for trial in list(self.claimed.values()):  # claimed, none of its jobs started yet
                    self.interrupt(study, trial, 0)
                log.error(f"interrupted after {finished} trial(s); run the same command again to continue study "
                          f"{study.study_name}")
                sigint_handler(previous)
                try:
                    self.report(study)
                except KeyboardInterrupt:  # another Ctrl-C: no report
                    pass
                raise SystemExit(130)
            finally:
                slots.close()
        trials = study.get_trials(deepcopy=False)
        held = self.n_seeds * self.seed_steps(trials) if self.cap else 0
        if self.cap and self.budget_left(study) < held and len(counted_trials(study, trials)) < self.n_trials:
            spent = self.cap - self.budget_left(study)
            log.info(f"the study's env-step budget is spent: {spent:,} of hydra.sweeper.max_env_steps={self.cap:,}; "
                     f"one more trial could train {held:,}")

    def interrupt(self, study: optuna.Study, trial: optuna.trial.Trial, steps: int) -> None:
        """Record a trial the interrupted sweep leaves unfinished (not counted: run again), at `steps` env steps."""
        try:
            trial.set_user_attr(INTERRUPTED_ATTR, True)
            trial.set_user_attr(STEPS_ATTR, steps)
        except RuntimeError:  # recorded just before (Optuna's UpdateFinishedTrialError)
            self.claimed.pop(trial._trial_id, None)
            return
        self.tell(study, trial, TrialState.FAIL, None, "the sweep was interrupted", 0.0)

    def check_failures(self, study: optuna.Study, finished: int, failed: int) -> None:
        rate = float(self.s["max_failure_rate"])
        if failed / finished > rate and (finished >= 3 or failed == finished == self.n_trials
                                          or failed == finished >= 2 * self.s["n_jobs"]):
            self.report(study)
            raise SweepError(f"{failed} of {finished} trials failed (hydra.sweeper.max_failure_rate={rate}); "
                             f"each trial's error is in its line above and its log in {self.sweep_dir}/trial_<n>/")

    @staticmethod
    def next_pending(running: list[Running]) -> Job | None:
        for owner in running:
            if owner.pending and not owner.stop:
                return owner.pending.pop(0)
        return None

    def claim(self, study: optuna.Study) -> optuna.trial.Trial | None:
        """The study's next trial for this worker, or None when the study holds n_trials (a grid: each point once)
        or the step budget can't take one more. Under the claim lock, so that workers never overshoot."""
        with claim_lock(self.storage, self.storage_url, study.study_name):
            self.reclaim(study)  # a worker killed meanwhile: its trials go back to the study
            trials = study.get_trials(deepcopy=False)
            counted = counted_trials(study, trials)
            if len(counted) >= self.n_trials:
                return None
            held = self.n_seeds * self.seed_steps(trials) if self.cap else 0
            if self.cap and self.budget_left(study) < held:
                return None
            rest: dict[str, Any] = {}
            if self.is_grid:
                left = self.grid_left(study, counted)
                if not left:
                    return None
                study.enqueue_trial(left[0])
            first = None if self.is_grid else self.next_first(trials, bool(study.user_attrs.get(MARKED_ATTR)))
            if first is not None:
                is_baseline, values = first
                inside, rest = baseline_params(values, self.distributions, unsearched=not is_baseline)
                fixed = {key.lstrip("+~") for key in self.fixed}  # the command line's values win
                rest = {key: value for key, value in rest.items() if key not in fixed}
                study.enqueue_trial(inside)
                self.say_first(len(trials), is_baseline, inside, rest)
            trial = study.ask()
            self.claimed[trial._trial_id] = trial  # until the study is told how it ended
            if first is not None:
                trial.set_user_attr(FIRST_ATTR, first_key(first[1]))
                if first[0]:
                    trial.set_user_attr(REFERENCE_ATTR, True)  # the baseline: never pruned, the others' reference
            if rest:
                trial.set_user_attr(BASELINE_ATTR, rest)
            if self.cap:
                trial.set_user_attr(RESERVED_ATTR, held)  # until its process declares its most steps
        self.suggest(study, trial)
        return trial

    def grid_left(self, study: optuna.Study, counted: list | None = None) -> list[dict[str, Any]]:
        """The grid's points no trial has taken (a failed one's are taken for this command, not the next)."""
        counted = counted_trials(study) if counted is None else counted
        taken = [t.params for t in counted if t.state != TrialState.FAIL] + self.failed_points
        return [p for p in grid_points(self.distributions) if p not in taken]

    def next_first(self, trials: list[optuna.trial.FrozenTrial],
                   marked: bool = True) -> tuple[bool, dict[str, Any]] | None:
        """The next of the study's first trials no trial has trained yet, (is it the baseline, its values): the
        baseline (a new study's trial 0), then hydra.sweeper.enqueue's configurations in order. A continued study
        trains those it lacks. A study made before its first trials were marked (`marked` False: it lacks
        MARKED_ATTR) has had its baseline once it holds a trial."""
        counted = counted_trials(None, trials)  # an interrupted or refused one: run again
        taken = {t.user_attrs.get(FIRST_ATTR) for t in counted}
        baseline = self.s.get("baseline")
        if baseline and counted and not marked:
            taken.add(first_key(dict(baseline)))
        firsts = ([(True, dict(baseline))] if baseline else []) + [(False, dict(e)) for e in self.s.get("enqueue") or []]
        return next((first for first in firsts if first_key(first[1]) not in taken), None)

    def say_first(self, number: int, is_baseline: bool, inside: dict[str, Any], rest: dict[str, Any]) -> None:
        sampled = sorted(set(self.distributions) - set(inside) - set(rest))
        log.info(f"trial {number} trains {'the baseline' if is_baseline else 'enqueued values'}: "
                 + " ".join(f"{k}={_format(v) if isinstance(v, float) else v}" for k, v in {**inside, **rest}.items())
                 + (f" (outside the search space: {', '.join(rest)})" if rest else "")
                 + (f"; sampled: {', '.join(sampled)}" if sampled else ""))

    def suggest(self, study: optuna.Study, trial: optuna.trial.Trial) -> None:
        # draws depend on (study, seed, trial number): reproducible, distinct across resumed or concurrent sweeps of
        # one study, and across studies
        reseed(study.sampler, trial_seed(study.study_name, self.sampler_seed, trial.number))
        fixed = trial.user_attrs.get(BASELINE_ATTR, {})
        for name, dist in self.distributions.items():
            if name not in fixed:
                trial._suggest(name, dist)
        custom = self.s.get("custom_search_space")
        if custom is not None:  # hydra.sweeper.custom_search_space: more (conditional) parameters of its own
            before = set(trial.params)
            custom(self.config, trial)
            clash = (set(trial.params) - before) & set(self.fixed)
            if clash:
                raise SweepError(f"hydra.sweeper.custom_search_space suggests {sorted(clash)[0]}, which the sweep "
                                 "sets to a fixed value: drop one of them")

    def trial_jobs(self, study: optuna.Study, trial: optuna.trial.Trial) -> Running:
        """One job per seed (the first reports to the pruner), numbered trial x seeds_per_trial + i; with
        `population`, one job of all of them (rlexp.sweep.populations)."""
        if self.population:
            return self.population_job(study, trial)
        jobs = []
        for index, seed in enumerate(self.trial_seeds()):
            subdir = f"trial_{trial.number}" + (f"/seed_{seed}" if self.n_seeds > 1 else "")
            overrides = self.trial_overrides(study, trial, seed, subdir, index=index)
            jobs.append(Job(overrides, trial.number * self.n_seeds + index, subdir, seed_index=index, seed=seed))
        owner = Running(trial, jobs, pending=list(jobs))
        for job in jobs:
            job.owner = owner
        return owner

    def trial_seeds(self) -> list[int | None]:
        """The seeds of one trial: the config's seed alone, or seed, seed+1, ... with seeds_per_trial."""
        return [None] if self.n_seeds == 1 else [self.seed + i for i in range(self.n_seeds)]

    def trial_overrides(self, study: optuna.Study, trial: optuna.trial.FrozenTrial | optuna.trial.Trial,
                        seed: int | None, subdir: str, index: int = 0, report: bool = True,
                        pack: list[dict[str, Any]] | None = None) -> list[str]:
        trial_id = trial._trial_id if report else None
        reference = bool(trial.user_attrs.get(REFERENCE_ATTR))
        spec = {"storage": self.storage_url, "study": study.study_name, "trial_id": trial_id, "seed_index": index,
                "seeds": self.n_seeds, "max_env_steps": self.cap if report else None, "prune": self.prune and report,
                "reference": reference, "leader": index == 0, "pruner": self.s["pruner"],
                "warmup_trials": self.s["warmup_trials"], "warmup_steps": self.s["warmup_steps"],
                "reports": self.s["reports"], "last_evals": self.s["last_evals"], "console": trial_console(self.launcher),
                "population": self.population}
        if pack:  # several trials in one job (rlexp.sweep.member_trials reports to each)
            spec.update(trial_id=None, pack=pack, population=True)
        values = {**params_of(trial), **self.fixed}
        if seed is not None:
            values.pop("seed", None)
            values["seed"] = seed
        return [*(f"{k}={v}" for k, v in values.items()),
                f"hydra.sweep.dir='{self.sweep_dir}'", f"hydra.sweep.subdir={subdir}",
                f"++hydra.job.env_set.{TRIAL_ENV}='{json.dumps(spec)}'"]

    # -- how jobs and trials ended ------------------------------------------------------------------------
    def outcome(self, ret: Any, trial: Any = None) -> tuple[TrialState, dict[str, float] | None, str | None]:
        """How one job ended for `trial`: (state, its metrics, its one-line error); a seed never started counts as
        pruned. A packed job's: the trial's own result in it."""
        if ret is None:
            return TrialState.PRUNED, None, None
        if isinstance(ret, BaseException):
            return TrialState.FAIL, None, f"the trial's process died: {one_line(ret)}"
        if ret.status.name == "COMPLETED":
            metrics = ret.return_value
            if not isinstance(metrics, dict):
                try:
                    metrics = {"final_eval": float(metrics)}
                except (TypeError, ValueError):
                    return TrialState.FAIL, None, f"the task returned {metrics!r}, not a number"
            if "trials" in metrics and trial is not None:  # a packed job's: this trial's part
                metrics = packed_result(metrics, trial._trial_id)
                if metrics["state"] != "complete":
                    return TrialState[metrics["state"].upper()], None, metrics.get("error")
            value = metrics.get(self.objective)
            if value is None or not math.isfinite(value):
                return TrialState.FAIL, None, f"objective {self.objective} is {value}"
            return TrialState.COMPLETE, metrics, None
        if isinstance(ret._return_value, optuna.TrialPruned):
            return TrialState.PRUNED, None, one_line(ret._return_value)
        return TrialState.FAIL, None, one_line(ret._return_value)

    def reclaim(self, study: optuna.Study, say: bool = True) -> list[int]:
        """Mark FAIL (and to be run again) the trials a killed sweeper left RUNNING: no heartbeat for grace_period
        on any storage. Each counts against max_env_steps at the full length it held (its folders can lag behind
        what it trained), or what its folders show if more."""
        stale = stale_trial_ids(self.storage, study._study_id, float(self.s["grace_period"]))
        for trial_id in list(stale):
            try:
                number = self.storage.get_trial_number_from_id(trial_id)
                self.storage.set_trial_user_attr(trial_id, "error", "left running by a sweep that was stopped")
                reserved = int(self.storage.get_trial(trial_id).user_attrs.get(RESERVED_ATTR, 0))
                self.storage.set_trial_user_attr(trial_id, STEPS_ATTR, max(reserved, self.steps_trained(number)))
                self.storage.set_trial_user_attr(trial_id, INTERRUPTED_ATTR, True)
                self.storage.set_trial_state_values(trial_id, TrialState.FAIL)
            except RuntimeError:  # finished meanwhile (Optuna's UpdateFinishedTrialError)
                stale.remove(trial_id)
        if stale and say:
            log.info(f"marked {len(stale)} trial(s) left running by a stopped sweep FAIL; they are run again")
        return stale

    def record(self, study: optuna.Study, owner: Running) -> int:
        """Tell the study how the trial (all its seeds) ended and print its line; returns 1 for a failure."""
        trial, jobs = owner.trial, sorted(owner.jobs, key=lambda j: j.seed_index)
        outcomes = [self.outcome(job.result, trial) for job in jobs]
        attrs = self.storage.get_trial(trial._trial_id).user_attrs  # what its processes recorded
        trial.set_user_attr(STEPS_ATTR, sum(self.job_steps_trained(job, attrs, trial) for job in jobs))
        started = [job.started for job in jobs if job.started]
        seconds = max(job.ended for job in jobs if job.started) - min(started) if started else 0.0
        trial.set_user_attr("started", round(min(started), 3) if started else None)
        trial.set_user_attr("ended", round(max(job.ended for job in jobs if job.started), 3) if started else None)
        states = [state for state, _, _ in outcomes]
        errors = [error for _, _, error in outcomes if error]
        values: list[float] | None = None
        if TrialState.FAIL in states:
            state = TrialState.FAIL
            if self.is_grid:
                self.failed_points.append(dict(trial.params))
        elif TrialState.PRUNED in states:
            state = TrialState.PRUNED
        else:
            state = TrialState.COMPLETE
            per_seed = [m[self.objective] for _, metrics, _ in outcomes for m in member_results(metrics)]
            # a seed's training seconds (a population's: its members' together, shared out)
            train_seconds = sum(metrics.get("train_seconds", math.nan) for _, metrics, _ in outcomes) / len(per_seed)
            if self.n_seeds > 1:
                trial.set_user_attr("seed_values", [round(v, 6) for v in per_seed])
            trial.set_user_attr("train_seconds", round(train_seconds, 3))
            values = [aggregate(per_seed, self.aggregate)]
            if self.multi:
                values.append(train_seconds)
        error = errors[0] if errors and state != TrialState.COMPLETE else None
        refused = bool(attrs.get(REFUSED_ATTR))  # never trained: not counted, and no failure of its values
        if refused:
            state, values = TrialState.FAIL, None
            error = next((e for e in errors if "not started" in e), error)
        self.tell(study, trial, state, values, error, seconds)
        params = " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in params_of(trial).items())
        shown = " ".join(map(_format, values)) if values else "-"
        log.info(f"trial {trial.number:>3} {state.name:<8} {shown:>9} {seconds:7.1f} s  {params}"
                 + (f"  | {error}" if error else ""))
        return int(state == TrialState.FAIL and not refused)

    def tell(self, study, trial, state, values, error, seconds) -> None:
        self.claimed.pop(trial._trial_id, None)
        trial.set_user_attr("seconds", round(seconds, 2))
        if error:
            trial.set_user_attr("error", error)
        try:
            study.tell(trial, values, state=state)
        except RuntimeError as e:  # already finished (marked FAIL by another sweeper)
            log.warning(f"trial {trial.number}: {e}")
