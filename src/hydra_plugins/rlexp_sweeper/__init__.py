"""rlexp's Hydra plugins: the `rlexp` Optuna sweeper (pruning, resume, report) and launchers that give each
trial its own process and turn any trial error into a recorded failure (`rlexp_local`, `rlexp_slurm`).

conf/config.yaml selects `hydra/sweeper: rlexp` and `hydra/launcher: rlexp_local`; the work is done in
rlexp.sweep, imported only when a sweep starts (plugin discovery stays fast).
"""

import logging
import sys
from dataclasses import dataclass, field
from typing import Any, List, Optional

from hydra.core.config_store import ConfigStore
from hydra.core.utils import JobReturn, JobStatus
from hydra.plugins.sweeper import Sweeper
from hydra.core.singleton import Singleton
from hydra.core.utils import run_job, setup_globals
from hydra.plugins.launcher import Launcher
from hydra_plugins.hydra_submitit_launcher.config import SlurmQueueConf
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher
from omegaconf import MISSING, DictConfig, OmegaConf, open_dict


# The settings are typed Any: rlexp.sweep.check_settings checks them (a wrong one is one line naming the key
# and the fix) before anything is written. The sampler presets are hydra-optuna-sweeper 1.4's, argument for
# argument (its configs work unchanged; null leaves Optuna's default), except that TPE's constant_liar is on:
# rlexp's job slots run trials in parallel.
@dataclass
class SamplerConf:
    """hydra.sweeper.sampler: any Optuna sampler by `_target_`, with any of its arguments."""

    _target_: str = MISSING
    seed: Any = None                     # a whole number, or null (the run's seed)


@dataclass
class TPESamplerConf(SamplerConf):
    _target_: str = "optuna.samplers.TPESampler"
    consider_prior: Any = None
    prior_weight: Any = None
    consider_magic_clip: Any = None
    consider_endpoints: Any = None
    n_startup_trials: Any = 10
    n_ei_candidates: Any = 24
    multivariate: Any = False
    group: Any = False
    warn_independent_sampling: Any = None
    constant_liar: Any = True            # parallel trials don't all pick the same point
    constraints_func: Any = None


@dataclass
class RandomSamplerConf(SamplerConf):
    _target_: str = "optuna.samplers.RandomSampler"


@dataclass
class GridSamplerConf(SamplerConf):
    """Every point of the search space once (each distribution's values: a choice's options, a range's steps)."""

    _target_: str = "optuna.samplers.GridSampler"
    _partial_: bool = True               # the search space is filled in from hydra.sweeper.params


@dataclass
class CmaEsSamplerConf(SamplerConf):
    _target_: str = "optuna.samplers.CmaEsSampler"
    x0: Any = None
    sigma0: Any = None
    n_startup_trials: Any = 1
    independent_sampler: Any = None
    warn_independent_sampling: Any = True
    consider_pruned_trials: Any = False
    restart_strategy: Any = None
    popsize: Any = None
    inc_popsize: Any = -1
    use_separable_cma: Any = False
    with_margin: Any = False
    lr_adapt: Any = False
    source_trials: Any = None


@dataclass
class NSGAIISamplerConf(SamplerConf):
    _target_: str = "optuna.samplers.NSGAIISampler"
    population_size: Any = 50
    mutation_prob: Any = None
    mutation: Any = None
    crossover: Any = None
    crossover_prob: Any = 0.9
    swapping_prob: Any = 0.5
    constraints_func: Any = None


@dataclass
class NSGAIIISamplerConf(NSGAIISamplerConf):
    _target_: str = "optuna.samplers.NSGAIIISampler"
    reference_points: Any = None
    dividing_parameter: Any = 3


@dataclass
class GPSamplerConf(SamplerConf):
    _target_: str = "optuna.samplers.GPSampler"
    independent_sampler: Any = None
    n_startup_trials: Any = 10
    deterministic_objective: Any = False
    constraints_func: Any = None
    warn_independent_sampling: Any = True


@dataclass
class QMCSamplerConf(SamplerConf):
    _target_: str = "optuna.samplers.QMCSampler"
    qmc_type: Any = "sobol"              # sobol | halton
    scramble: Any = False
    independent_sampler: Any = None
    warn_asynchronous_seeding: Any = True
    warn_independent_sampling: Any = True


@dataclass
class MOTPESamplerConf(SamplerConf):
    _target_: str = "optuna.samplers.MOTPESampler"   # removed in Optuna 4: refused with one line


@dataclass
class RlexpSweeperConf:
    """hydra.sweeper.*: the Optuna sweeper's settings plus pruning and resume."""

    _target_: str = "hydra_plugins.rlexp_sweeper.RlexpOptunaSweeper"
    _recursive_: bool = False            # the sweeper makes the sampler itself, after checking its arguments
    defaults: List[Any] = field(default_factory=lambda: [{"sampler": "tpe"}])
    sampler: Any = MISSING               # tpe | random | cmaes | nsgaii | qmc (hydra/sweeper/sampler=...)
    direction: Any = "maximize"          # of the objective (a return: maximize); [maximize, minimize]: two
                                         # objectives, the return and the training seconds (as directions)
    directions: Any = None               # [maximize, minimize]: the objective and the training seconds (NSGA-II)
    objective: Any = "final_eval"        # final_eval | mean_last_evals (of run.eval_interval's) | auc (eval curve)
    last_evals: Any = 3                  # mean_last_evals: how many of the last evaluations
    seeds_per_trial: Any = 1             # seeds each configuration runs on, as parallel jobs
    population: Any = False              # true: a trial's seeds as one population in one job (run.seeds)
    trials_per_job: Any = 1              # >1: up to that many trials that differ only in members' values
                                         # (run.members) train as one population in one job
    aggregate: Any = "mean"              # mean | iqm of the seeds' objectives (and of the confirmation's)
    confirm: Any = None                  # {top_k: 3, seeds: 5}: re-run the best on fresh seeds; best.yaml: the winner
    storage: Any = None                  # null: sqlite:///<sweep dir>/optuna.db; or postgresql://user@host/db
    study_name: Any = None               # null: <agent>_<env>_<hash of the search space and fixed values>, so
                                         # the same command continues its study and another sweep starts its own
    n_trials: Any = 20                   # the study's trials in all: this command (and any other worker on the
                                         # same storage) runs trials until the study holds this many
    n_jobs: Any = 2                      # trials at once, each in its own process
    max_failure_rate: Any = 0.5          # stop the sweep when more trials than this fraction fail
    params: Any = None                   # search space in YAML (key: "interval(1e-5,1e-2)"), as on the command line
    custom_search_space: Any = None      # dotted path of a function (config, optuna trial) -> None that suggests
                                         # more parameters per trial (conditional ones: lr only when optimizer=adam)
    baseline: Any = None                 # {key: value}: a new study's first trial trains these values of the searched
                                         # keys (e.g. those the run takes untuned), those outside the space as fixed values
    enqueue: Any = None                  # [{key: value}, ...]: configurations a new study trains next, one trial each
                                         # (Optuna's enqueue_trial; values outside the space as the baseline's)
    max_env_steps: Any = None            # the study's env steps, all trials and seeds: no trial starts that could
                                         # pass it (each held at its most steps, last rollouts included)
    pruner: Any = "median"               # median | halving | hyperband | none
    warmup_trials: Any = 5               # median: complete trials before any pruning; halving: trials at a rung
    warmup_steps: Any = "auto"             # median: env steps before a trial can be pruned (auto: a third of those
                                         # after the study's learning start, trial 0's warm-up); halving, hyperband:
                                         # the first rung's length after it (auto: a ninth)
    reports: Any = 10                    # mean-return reports per trial (evenly spaced over run.max_steps)
    heartbeat_interval: Any = 10         # seconds; trials without a heartbeat for grace_period are stale
    grace_period: Any = 60               # a killed sweep's RUNNING trials are marked FAIL after this


@dataclass
class RlexpLocalConf:
    """hydra.launcher.* of the local launcher: each trial its own process (see rlexp.runtime.launch)."""

    _target_: str = "hydra_plugins.rlexp_sweeper.RlexpLocalLauncher"
    start_method: Any = "forkserver"     # forkserver: forked from a process that imported TensorFlow once | spawn
    timeout_min: Any = 7 * 24 * 60       # a trial running longer is recorded FAIL


@dataclass
class RlexpSlurmConf(SlurmQueueConf):
    _target_: str = "hydra_plugins.rlexp_sweeper.RlexpSlurmLauncher"
    timeout_min: int = 24 * 60
    partition: Optional[str] = None      # hydra.launcher.partition=<your partition>
    cpus_per_task: Optional[int] = 4
    gpus_per_task: Optional[int] = 0
    mem_gb: Optional[int] = 16


store = ConfigStore.instance()
for _name, _node in {"tpe": TPESamplerConf, "random": RandomSamplerConf, "grid": GridSamplerConf,
                     "cmaes": CmaEsSamplerConf, "nsgaii": NSGAIISamplerConf, "nsgaiii": NSGAIIISamplerConf,
                     "gp": GPSamplerConf, "qmc": QMCSamplerConf, "motpe": MOTPESamplerConf}.items():
    store.store(group="hydra/sweeper/sampler", name=_name, node=_node, provider="rlexp")
store.store(group="hydra/sweeper", name="rlexp", node=RlexpSweeperConf, provider="rlexp")
# configs written for hydra-optuna-sweeper (`override /hydra/sweeper: optuna`) run on rlexp's through rlexp's own
# conf/hydra/sweeper/optuna.yaml: a name stored here would change every Hydra app's `optuna` sweeper
OPTUNA_SWEEPER = "hydra_plugins.hydra_optuna_sweeper.optuna_sweeper.OptunaSweeper"
store.store(group="hydra/launcher", name="rlexp_local", node=RlexpLocalConf, provider="rlexp")
store.store(group="hydra/launcher", name="rlexp_slurm", node=RlexpSlurmConf, provider="rlexp")


def alias_optuna_sweeper() -> None:
    """Let Hydra build rlexp's sweeper where a config names hydra-optuna-sweeper's class (unless that plugin is
    installed: then its class is the one named). Hydra instantiates a plugin by the class path its config names,
    and 1.4 only that path, so the path is made importable: a module of that name (in this process; rlexp's trial
    processes call this too) whose OptunaSweeper is rlexp's."""
    import importlib.util
    import types

    from hydra.core.plugins import Plugins

    module_name, _, name = OPTUNA_SWEEPER.rpartition(".")
    package_name = module_name.rpartition(".")[0]
    if module_name not in sys.modules:
        try:
            installed = importlib.util.find_spec(module_name) is not None
        except ImportError:
            installed = False
        if installed:
            return
        package = sys.modules.setdefault(package_name, types.ModuleType(package_name))
        module = types.ModuleType(module_name, "rlexp's sweeper under hydra-optuna-sweeper's class path")
        module.OptunaSweeper = type(name, (RlexpOptunaSweeper,), {"__module__": module_name,
                                                                  "__doc__": RlexpOptunaSweeper.__doc__})
        package.optuna_sweeper = module
        sys.modules[module_name] = module
    Plugins.instance().class_name_to_class.setdefault(OPTUNA_SWEEPER, sys.modules[module_name].OptunaSweeper)


class RlexpOptunaSweeper(Sweeper):
    """Hydra's entry point; see rlexp.sweep for what it does."""

    def __init__(self, **settings: Any) -> None:
        self.settings = settings

    def setup(self, *, hydra_context, task_function, config) -> None:
        from hydra.core.plugins import Plugins

        self.config, self.config_loader = config, hydra_context.config_loader
        self.launcher = Plugins.instance().instantiate_launcher(config=config, hydra_context=hydra_context,
                                                                task_function=task_function)
        logging.getLogger("hydra_plugins.hydra_submitit_launcher.submitit_launcher").setLevel(logging.WARNING)
        module = type(self.launcher).__module__
        if not module.startswith("hydra_plugins.rlexp_sweeper"):  # Hydra's, joblib's: each job's overrides
            logging.getLogger(module.rsplit(".", 1)[0]).setLevel(logging.WARNING)  # (the trial's JSON spec)

    def sweep(self, arguments: List[str]) -> None:
        from rlexp.errors import Started, SweepError
        from rlexp.sweep import OptunaSweep

        settings = {k: (OmegaConf.to_container(v, resolve=True) if OmegaConf.is_config(v) else v)
                    for k, v in self.settings.items()}
        try:
            launcher = self.launcher
            if isinstance(launcher, (RlexpLocalLauncher, RlexpSlurmLauncher)):
                launcher.check()
                launcher.for_rlexp_sweeper = True
            elif any(c.__name__ == "BaseSubmititLauncher" for c in type(launcher).__mro__):  # submitit_local,
                # submitit_slurm (Hydra's plugin scan may have imported their module apart from ours)
                launcher = _FreshSubmititFolder(launcher, self.config)
            check_launcher_jobs(self.config, settings)
            return OptunaSweep(settings, self.config, launcher, self.config_loader).run(arguments)
        except SweepError as e:  # one line, no traceback: 2 for a mistake in the command, 1 once trials ran
            logging.getLogger("rlexp").error(f"error: {e}")
            sys.exit(1 if Started.value else 2)


def check_launcher_jobs(config: DictConfig, settings: dict[str, Any]) -> None:
    """hydra.launcher.n_jobs (joblib's) is not how many trials run at once here: the sweeper hands its launcher one
    trial's job at a time and keeps hydra.sweeper.n_jobs of them running."""
    from rlexp.errors import SweepError

    launcher_jobs = OmegaConf.select(config, "hydra.launcher.n_jobs", default=None)
    if launcher_jobs not in (None, -1) and launcher_jobs != settings.get("n_jobs"):
        raise SweepError(f"hydra.launcher.n_jobs={launcher_jobs}: rlexp's sweeper runs hydra.sweeper.n_jobs trials "
                         f"at once (now {settings.get('n_jobs')}), handing the launcher one at a time; set "
                         f"hydra.sweeper.n_jobs={launcher_jobs} instead")


def fresh_submitit_folder(params: dict[str, Any], config: DictConfig, job_overrides) -> None:
    """hydra.launcher.submitit_folder with ${hydra.sweep.dir} as the jobs' own (the study's folder, which their
    overrides name), not as the config resolved it before the sweeper picked the study."""
    raw = OmegaConf.select(config, "hydra.launcher.submitit_folder", throw_on_resolution_failure=False)
    node = config.hydra.launcher._get_node("submitit_folder") if "submitit_folder" in config.hydra.launcher else None
    text = str(node._value()) if node is not None else str(raw or "")
    sweep_dir = next((o.split("=", 1)[1].strip("'\"") for overrides in job_overrides for o in overrides
                      if o.startswith("hydra.sweep.dir=")), None)
    if sweep_dir and "${hydra.sweep.dir}" in text:
        params["submitit_folder"] = text.replace("${hydra.sweep.dir}", sweep_dir)
    elif raw:
        params["submitit_folder"] = str(raw)


class _FreshSubmititFolder:
    """A submitit launcher whose folder (by default ${hydra.sweep.dir}/.submitit/%j) is resolved at each launch:
    the sweep dir names the study, which the sweeper picks after the launcher was made."""

    def __init__(self, launcher: Any, config: DictConfig) -> None:
        self.launcher, self.config = launcher, config

    def launch(self, job_overrides, initial_job_idx: int):
        fresh_submitit_folder(self.launcher.params, self.config, job_overrides)
        return self.launcher.launch(job_overrides, initial_job_idx)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.launcher, name)


class _SacctOnce(logging.Filter):
    """submitit warns at every poll where `sacct` fails (Slurm's accounting off): one line the first time."""

    said = False

    def filter(self, record: logging.LogRecord) -> bool:
        if "sacct" not in record.getMessage():
            return True
        if not _SacctOnce.said:  # (submitit's logger prints through two handlers and the root's: said here once)
            _SacctOnce.said = True
            logging.getLogger("rlexp").warning("Slurm's accounting is off here (sacct fails): submitit reads job "
                                               "states from squeue and a finished job's from its result file")
        return False


def _safe_call(launcher_call, *args: Any) -> JobReturn:
    """Run one trial; any error (also config composition, SystemExit) comes back as a failed JobReturn with
    a one-line, picklable TrialFailed (or optuna's TrialPruned) instead of ending the sweep."""
    from rlexp.errors import TrialFailed

    try:
        ret = launcher_call(*args)
    except BaseException as e:  # noqa: BLE001 - reported to the sweeper as this trial's failure
        ret = _failed(e)
    error = ret._return_value if ret.status == JobStatus.FAILED else None
    if error is not None and type(error).__name__ != "TrialPruned" and not isinstance(error, TrialFailed):
        logging.getLogger("rlexp").error("trial failed", exc_info=error)
        text = str(error).strip().splitlines()
        ret._return_value = TrialFailed(f"{type(error).__name__}: {text[0] if text else ''}"[:300])
    return ret


class RlexpLocalLauncher(Launcher):
    """Each trial in its own process (rlexp.runtime.launch: forked from a preloaded forkserver), results back by pipe;
    like submitit's local launcher, but without a new interpreter and a polling loop per trial. rlexp's sweeper
    hands it one trial per call and keeps `hydra.sweeper.n_jobs` calls running. Under another sweeper it prints
    what Hydra's basic launcher prints (the jobs, then each job's console output as it ends), running the jobs of
    Hydra's basic grid one at a time and another sweeper's batch at once."""

    for_rlexp_sweeper = False  # set by rlexp's sweeper

    def __init__(self, **params: Any) -> None:
        self.params = params

    def setup(self, *, hydra_context, task_function, config) -> None:
        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function

    def check(self) -> None:
        """hydra.launcher.* checked before any trial starts."""
        from rlexp.errors import SweepError

        method, timeout = self.params.get("start_method"), self.params.get("timeout_min")
        if method not in ("forkserver", "spawn"):
            raise SweepError(f"hydra.launcher.start_method={method}: use forkserver or spawn")
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0):
            raise SweepError(f"hydra.launcher.timeout_min={timeout}: use minutes (a number of 0 or more; 0 or "
                             "null: no limit)")

    def __call__(self, sweep_overrides: List[str], job_num: int, job_id: str, singleton_state: Any) -> JobReturn:
        """In the trial's process: compose its config and run it as Hydra runs a job."""
        Singleton.set_state(singleton_state)
        setup_globals()
        config = self.hydra_context.config_loader.load_sweep_config(self.config, sweep_overrides)
        with open_dict(config.hydra.job) as job:
            job.id, job.num = job_id, job_num
        return run_job(hydra_context=self.hydra_context, task_function=self.task_function, config=config,
                       job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")

    def launch(self, job_overrides, initial_job_idx: int) -> List[JobReturn]:
        from pathlib import Path

        from rlexp.runtime.launch import run_jobs

        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        state = Singleton.get_state()
        numbers = [initial_job_idx + i for i in range(len(job_overrides))]
        jobs = [(list(overrides), n, f"local_{n}", state) for n, overrides in zip(numbers, job_overrides)]
        names = [_log_name(overrides, n) for n, overrides in zip(numbers, job_overrides)]

        def run(batch: range) -> list:
            results = run_jobs(self._safe, [jobs[i] for i in batch], sweep_dir / ".launcher",
                               str(self.params.get("start_method", "forkserver")),
                               timeout_s=float(self.params.get("timeout_min") or 0) * 60 or None,
                               names=[names[i] for i in batch],
                               setup=alias_optuna_sweeper)  # the sweeper's class may go by hydra-optuna-sweeper's path
            return [r if isinstance(r, JobReturn) else _failed(r) for r in results]

        if self.for_rlexp_sweeper:
            return run(range(len(jobs)))
        from rlexp.errors import TrialFailed

        log = logging.getLogger("rlexp")
        grid = str(self.config.hydra.sweeper.get("_target_", "")).endswith(".BasicSweeper")  # its whole grid at once
        log.info(f"Launching {len(jobs)} jobs locally, {'one at a time' if grid else 'at once'}, each in its own "
                 "process")
        results = []
        for batch in ([range(i, i + 1) for i in range(len(jobs))] if grid else [range(len(jobs))]):
            for i in batch:
                log.info(f"\t#{numbers[i]} : {' '.join(job_overrides[i])}")
            for i, ret in zip(batch, run(batch)):
                if ret.status == JobStatus.FAILED:  # (Hydra's sweeper raises it: one line from rlexp.main)
                    ret.overrides = ret.overrides or list(job_overrides[i])
                    if not isinstance(ret._return_value, TrialFailed):  # killed, or past timeout_min
                        ret._return_value = TrialFailed(str(ret._return_value))
                _echo_job_output(sweep_dir / ".launcher" / names[i], ret)
                results.append(ret)
        return results

    def _safe(self, *args: Any) -> JobReturn:
        return _safe_call(self.__call__, *args)


def _echo_job_output(stem: Any, result: JobReturn) -> None:
    """A job's console output once it has ended: its .out, then its .err (where it failed: the error's line)."""
    import os

    def read(path: str) -> str:
        return open(path).read() if os.path.exists(path) else ""

    for stream, text in ((sys.stdout, read(f"{stem}.out")), (sys.stderr, read(f"{stem}.err"))):
        if stream is sys.stderr and result.status == JobStatus.FAILED:
            lines = text.strip().splitlines()
            text = (lines[-1] if lines and lines[-1].startswith("error: ") else f"error: {result._return_value}")
        if text.strip():
            stream.write(text if text.endswith("\n") else text + "\n")
            stream.flush()


def _log_name(overrides: List[str], number: int) -> str:
    """A job's console output is .launcher/<name>.out|.err: job_<n> for a search trial's job; a confirmation
    run's is named after its folder (confirm/trial_3_seed_10000: confirm_trial_3_seed_10000)."""
    subdir = next((o.split("=", 1)[1] for o in overrides if o.startswith("hydra.sweep.subdir=")), "")
    return subdir.replace("/", "_") if subdir.startswith("confirm/") else f"job_{number}"


def _failed(error: BaseException) -> JobReturn:
    ret = JobReturn()
    ret.status, ret._return_value = JobStatus.FAILED, error
    return ret


class RlexpSlurmLauncher(SlurmLauncher):
    """submitit's Slurm launcher, likewise."""

    def __call__(self, *args: Any) -> JobReturn:
        return _safe_call(super().__call__, *args)

    def check(self) -> None:
        """A request no node of the partition can hold would pend for ever (reason PartitionConfig): refused in one
        line before any trial is submitted, with what the nodes have (sinfo). Slurm's accounting being off (sacct
        failing at every poll) is said once, not at each poll."""
        import subprocess

        from rlexp.errors import SweepError

        logging.getLogger("submitit").addFilter(_SacctOnce())
        partition = self.params.get("partition")
        command = ["sinfo", "-h", "-o", "%P %c %m"] + (["-p", str(partition)] if partition else [])
        try:
            out = subprocess.run(command, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise SweepError(f"hydra/launcher=rlexp_slurm: sinfo failed ({e}); run the sweep on a Slurm login node "
                             "(or use hydra/launcher=rlexp_local)") from None
        rows = [line.split() for line in out.stdout.splitlines() if len(line.split()) == 3]
        if not partition:  # Slurm's default partition is marked with *
            rows = [row for row in rows if row[0].endswith("*")] or rows
        if out.returncode or not rows:
            where = f"partition {partition}" if partition else "the default partition"
            raise SweepError(f"hydra.launcher.partition={partition}: sinfo shows no nodes in {where} "
                             f"({(out.stderr or out.stdout).strip()[:200] or 'empty'}); pick one from `sinfo -s`")
        cpus = max(int(row[1].rstrip("+")) for row in rows)
        memory_mb = max(int(row[2].rstrip("+")) for row in rows)
        name = rows[0][0].rstrip("*")
        wanted_cpus = int(self.params.get("cpus_per_task") or 1) * int(self.params.get("tasks_per_node") or 1)
        if wanted_cpus > cpus:
            raise SweepError(f"hydra.launcher.cpus_per_task={self.params.get('cpus_per_task')}: the nodes of "
                             f"partition {name} have at most {cpus} CPUs; ask for {cpus} or fewer")
        mem_gb = self.params.get("mem_gb")
        if mem_gb is not None and int(mem_gb) * 1024 > memory_mb:
            raise SweepError(f"hydra.launcher.mem_gb={mem_gb}: the nodes of partition {name} have at most "
                             f"{memory_mb // 1024} GB ({memory_mb} MB); ask for {memory_mb // 1024} or less")

    def launch(self, job_overrides, initial_job_idx: int):
        """submitit's folder resolved again: its default ${hydra.sweep.dir}/.submitit/%j names the study's folder,
        which the sweeper picks after this launcher was made."""
        fresh_submitit_folder(self.params, self.config, job_overrides)
        return super().launch(job_overrides, initial_job_idx)
