"""mode=autotune: from an agent+env pair to its tuned preset in one command. A budgeted Optuna study with rlexp's
sweeper (`--multirun +sweep=<agent>`: within a step budget, successive halving giving the trials that lead at
short lengths longer ones, each trial on several seeds), then the best trial's values as
tuned/<agent>_<env>.yaml in the user's config dir (with env=generic also env/<env.id>.yaml), then a normal
training run with it and the command that reproduces that run."""
from __future__ import annotations

import logging
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra_plugins.rlexp_searchpath import user_config_dir
from omegaconf import DictConfig, OmegaConf

from rlexp.checks.values import _number, _one_of
from rlexp.errors import UserError
from rlexp.presets.portfolio import portfolio
from rlexp.presets.sources import hydra_preset, parent_preset, preset_exists
from rlexp.runs.dirs import GENERIC_ENV, absolute, choices, env_display_name, in_sweep, original_cwd
from rlexp.runs.files import check_writable, write_atomic
from rlexp.sweep.report import FOR_AUTOTUNE

log = logging.getLogger("rlexp")
SECTIONS = ("agent", "env", "model", "buffer")  # the hyperparameters a tuned preset holds, with run's budget
HYPERPARAMETERS = ("agent.", "env.", "model.", "buffer.", "run.max_steps", "run.target_reward")
FINAL_ONLY = ("run_dir", "run.eval_interval", "run.eval_episodes", "run.eval_deterministic",
              "run.keep_checkpoints")  # the study sets its own


@dataclass
class Budget:
    """The study's size: at most `trials` trials on `seeds` seeds each, within `budget` x `max_steps` env steps
    in all. Successive halving compares trials at `rungs` lengths, `eval_interval` x 1, 3, 9, ... env steps up
    to `trial_steps`, each an evaluation of `eval_episodes` episodes (greedy or sampled actions:
    `eval_deterministic`, as run.eval_deterministic); a third of a rung's trials go on to the next. Trials 1 to
    `portfolio` train the agent's tuned presets for other envs of the kind (rlexp.presets.portfolio)."""

    budget: float
    max_steps: int
    trials: int
    seeds: int
    rungs: int
    trial_steps: int
    eval_interval: int
    eval_episodes: int
    eval_deterministic: bool | str = False
    learning_start: int = 0    # buffer.initial_size: random steps before an off-policy trial learns
    final_deterministic: bool | str = "auto"  # a trial's final evaluation (its score): as the pair's training's
    portfolio: int = 4          # trials after the baseline that train the agent's tuned values for similar envs

    @property
    def rung_steps(self) -> list[int]:
        """Where trials are compared: learning_start + L x 1, 3, ... before the trial's end, each moved up to the
        next evaluation step (a multiple of L), as the trials' pruner places them."""
        from rlexp.sweep.pruning import halving_rungs

        return halving_rungs(self.trial_steps, self.learning_start, self.eval_interval, grid=self.eval_interval)

    @property
    def env_steps(self) -> int:
        """The study's env steps, all trials and seeds together (hydra.sweeper.max_env_steps)."""
        return int(self.budget * self.max_steps)

    @property
    def warmup(self) -> int:
        """Trials before the sampler models (RL Zoo's 5, fewer in a small study)."""
        return min(5, max(1, self.trials // 3))


def first_rungs(trials: int, rungs: int, in_flight: int = 1) -> float:
    """The env steps (after each trial's warm-up) a study of `trials` trials needs on one seed, in first-rung
    lengths L: trial 0 (the baseline, first at every rung) trains all m = 3^(rungs-1) of them; each other trial
    is expected to train e = 1 + 2 (rungs - 1) / 3 (the first; the third of them that goes on, the next rung's
    2/3 of its length; the ninth the one after: 2/3 again). A trial starts only where the budget holds it at its
    full length, as it does the `in_flight` trials running beside the last one: m - e more for each."""
    m, e = 3 ** (rungs - 1), 1 + 2 * (rungs - 1) / 3
    return m + (trials - 1) * e + in_flight * (m - e)


@dataclass
class Overrides:
    """The command line's overrides by where they go. `study`: the study only (hyperparameters, whose values the
    tuned preset keeps; hydra.*; model=/buffer=, which it keeps as `defaults`). `shared`: the study and the
    final run (seed, logger, fallback, run.* settings). `final`: the final run only (run_dir and the
    evaluation settings autotune sets in the study). `env`: env.* of env=generic that make its env preset."""

    study: list[str]
    shared: list[str]
    final: list[str]
    env: list[str]
    space: str | None


def autotune(cfg: DictConfig) -> float:
    """The study, the tuned preset (and env preset) in the config dir, a training run with it; the best score."""
    if in_sweep():
        raise UserError("mode=autotune runs a study itself: drop --multirun (-m)")
    if cfg.get("resume"):
        raise UserError("+resume continues a training run; mode=autotune starts a study: drop +resume")
    agent, overrides = choices()["agent"], split_overrides(command_overrides())
    env_name, env_text = env_preset(cfg, overrides.env)
    trial_cfg = check_pair(cfg)
    kind = pair_kind(cfg)  # one env made to see its actions and observations: the space's and the portfolio's
    space = check_space(agent, overrides.space, kind)
    searched = searched_keys(space, overrides)
    learning_start = 0 if "buffer.initial_size" in searched else int(
        OmegaConf.select(trial_cfg, "buffer.initial_size", default=0) or 0)
    budget = check_budget(cfg, pair_max_steps(trial_cfg, overrides), learning_start, job_slots(overrides))
    baseline = baseline_values(trial_cfg, searched)
    config_dir = user_config_dir(sys.argv[1:])
    if config_dir is None:
        return with_default_dir(str(cfg.autotune.get("config_dir") or "rlexp_conf"))
    check_config_dir(config_dir, ("tuned", "env") if env_text is not None else ("tuned",))
    starts = portfolio(agent, str(cfg.env.id), kind, searched, lambda keys: baseline_values(trial_cfg, keys),
                       budget.max_steps, portfolio_size(budget, overrides), int(cfg.seed))
    study = f"autotune_{agent}_{env_name}_{time.strftime('%Y-%m-%d_%H-%M-%S')}"
    sweep_dir = original_cwd() / "multirun" / study
    seeds = f"{budget.seeds} seed{'s' if budget.seeds > 1 else ''}"
    rungs = ", ".join(f"{step:,}" for step in budget.rung_steps)
    halving = f"successive halving at {rungs} steps" if rungs else "no halving"
    warmup = f" after {budget.learning_start:,} random steps" if budget.learning_start else ""
    log.info(f"autotune {agent}+{env_name}: up to {budget.trials} trials x {seeds} within {budget.env_steps:,} env "
             f"steps ({budget.budget:g} x run.max_steps={budget.max_steps:,}), trials of up to "
             f"{budget.trial_steps:,} steps{warmup}, {halving} (evaluated every {budget.eval_interval:,}); search "
             f"space sweep/{space}.yaml; study {sweep_dir}")
    if starts:
        log.info(f"trials 1-{len(starts)} start from the values of the tuned presets "
                 f"{', '.join(c.name + (' (yours)' if c.own else '') for c in starts)} (autotune.portfolio)")
    run(study_command(config_dir, agent, space, overrides, budget, study, sweep_dir, baseline,
                      [c.values for c in starts]),
        env={**os.environ, FOR_AUTOTUNE: "1"})  # its report leaves the command to train to autotune
    best, preset, results = best_trial(sweep_dir)
    picked = groups(preset)  # model=/buffer=: on the command line, where a tuned preset can't choose them
    values = tuned_values(cfg, agent, overrides, preset, picked, budget)
    target = absolute(config_dir)
    if env_text is not None:
        write_atomic(target / "env" / f"{env_name}.yaml", lambda f: f.write(env_text.encode()))
    path = target / "tuned" / f"{agent}_{env_name}.yaml"
    replaced = path.exists()
    origin = f"the values of tuned/{starts[best - 1].name}.yaml" if 0 < best <= len(starts) else None
    text = tuned_header(cfg, study, sweep_dir, budget, best, results, picked, origin) + to_yaml(values)
    write_atomic(path, lambda f: f.write(text.encode()))
    command = ["python", "-m", "rlexp", "--config-dir", config_dir, f"agent={agent}", f"env={env_name}", *picked,
               *overrides.shared, *overrides.final]
    log.info(f"{'replaced' if replaced else 'wrote'} {path} (best trial {best}"
             f"{': ' + origin if origin else ''}, score {results['best_value']:.4g}); "
             f"training with it: {shlex.join(command)}")
    run([sys.executable, *command[1:]])
    log.info(f"reproduce this training: {shlex.join(command)}")
    return float(results["best_value"])


# ----- the request ----------------------------------------------------------------------------------------
def command_overrides() -> list[str]:
    """The command line's overrides: Hydra's own (hydra.sweeper.*, hydra/sweeper/sampler=...), then the task's."""
    overrides = HydraConfig.get().overrides
    return [o for o in overrides.hydra if not o.startswith("hydra.mode=")] + list(overrides.task)


def split_overrides(overrides: list[str]) -> Overrides:
    """Sort the command line's overrides (mode, agent, env and autotune.* are autotune's own)."""
    parsed = OverridesParser.create().parse_overrides(overrides)
    generic = any(o.key_or_group == "env" and o.value() == GENERIC_ENV for o in parsed)
    sorted_ = Overrides([], [], [], [], None)
    for override, text in zip(parsed, overrides):
        key = override.key_or_group
        if key == "sweep":
            sorted_.space = str(override.value())
        elif key == "tuned":
            raise UserError("mode=autotune writes the pair's tuned preset itself: drop tuned= / ~tuned")
        elif key in ("mode", "agent", "env") or key.startswith("autotune."):
            continue
        elif key.startswith(HYPERPARAMETERS) or key.startswith("hydra") or key in ("model", "buffer"):
            sorted_.study.append(text)
            if generic and key.startswith("env.") and key != "env.n_envs":
                sorted_.env.append(text)
        elif key in FINAL_ONLY:
            sorted_.final.append(text)
        else:
            sorted_.shared.append(text)
    return sorted_


def pair_max_steps(trial_cfg: DictConfig, overrides: Overrides) -> int:
    """The pair's run.max_steps as its trials resolve it (RL Zoo row, tuned preset or fallback, command line); a
    +sweep=<name> preset's run.max_steps (a plain sweep's trial length) gives way to the pair's own."""
    if overrides.space is None or any(o.lstrip("+").startswith("run.max_steps=") for o in overrides.study):
        return int(float(trial_cfg.run.max_steps))
    from hydra import compose

    from rlexp.presets.fallbacks import apply_fallback
    task = [o for o in HydraConfig.get().overrides.task if not o.lstrip("+").startswith(("sweep=", "mode="))]
    pair = compose(config_name=HydraConfig.get().job.config_name, overrides=task, return_hydra_config=True)
    return int(float(apply_fallback(pair, choices(), task)[0].run.max_steps))


def check_pair(cfg: DictConfig) -> DictConfig:
    """The trials' configuration (with the fallback's values where the pair is untuned), checked as a training
    run checks it, so that a bad value or env id is one line before the study, not a failure in every trial."""
    from rlexp.build import agent_class, check_types
    from rlexp.presets.complete import check_presets
    from rlexp.presets.fallbacks import apply_fallback
    from rlexp.runs.dirs import task_overrides

    check_presets(cfg, choices())
    trial_cfg, _ = apply_fallback(cfg, choices(), task_overrides())
    check_types("agent", {k: v for k, v in trial_cfg.agent.items() if k != "_target_"},
                agent_class(trial_cfg.agent._target_))
    return trial_cfg


def searched_keys(space: str, overrides: Overrides) -> set[str]:
    """The keys the study searches: the search space preset's hydra.sweeper.params and the command line's sweeps."""
    return space_keys(space) | {o.split("=", 1)[0].lstrip("+") for o in overrides.study if "(" in o or "," in o}


def space_keys(space: str) -> set[str]:
    """The keys of a search space preset's hydra.sweeper.params, with those of the sweep presets it builds on
    (`defaults: [a2c, _self_]` in sweep/a2c_continuous.yaml)."""
    path, _ = hydra_preset("sweep", space)
    if path is None:
        return set()
    preset = OmegaConf.load(path)
    keys: set[str] = set()
    for entry in preset.get("defaults") or []:
        parent = parent_preset("sweep", entry)
        if parent is not None and parent[0] == "sweep":
            keys |= space_keys(parent[1])
    return keys | set(OmegaConf.select(preset, "hydra.sweeper.params", default=None) or {})


def job_slots(overrides: Overrides) -> int:
    """The study's job slots: hydra.sweeper.n_jobs on the command line, else the sweeper's default 2."""
    text = next((o.split("=", 1)[1] for o in overrides.study if o.startswith("hydra.sweeper.n_jobs=")), "2")
    try:
        return max(1, int(float(text)))
    except ValueError:
        return 1  # the study's check of its settings names it


def check_budget(cfg: DictConfig, max_steps: int, learning_start: int = 0, slots: int = 1) -> Budget:
    """autotune.* checked, and the trials' lengths derived from them: budget x max_steps env steps in all, each
    trial `learning_start` random steps then up to 3^(rungs-1) first-rung lengths L (`first_rungs`, with
    `slots` job slots, each trial taking autotune.seeds of them), and no trial longer than max_steps: a trial's
    score is meant to predict a training of max_steps (a larger budget than that needs is left unspent)."""
    section = cfg.get("autotune")
    if not isinstance(section, DictConfig):
        raise UserError(f"autotune={section!r}: autotune is a section of settings; set its keys instead, e.g. "
                        "autotune.trials=10")
    budget = _number("autotune.budget", section.get("budget"), above=0)
    trials, seeds, rungs, episodes = (
        int(_number(f"autotune.{key}", section.get(key), minimum=1, integer=True))
        for key in ("trials", "seeds", "rungs", "eval_episodes"))
    deterministic = section.get("eval_deterministic")
    if not _one_of(deterministic, ("auto", True, False)):
        raise UserError(f"autotune.eval_deterministic={deterministic!r} must be auto, true or false (as "
                        "run.eval_deterministic; false: the trials' evaluations draw actions from the policy)")
    in_flight_trials = max(1, slots // seeds)
    first_rung = int((budget * max_steps / seeds - trials * learning_start) / first_rungs(trials, rungs,
                                                                                       in_flight_trials))
    first_rung = min(first_rung, (max_steps - learning_start) // 3 ** (rungs - 1))  # no trial past the training's end
    if first_rung < 1:
        warmup = (f" past each trial's buffer.initial_size={learning_start:,} random steps" if learning_start
                  else "")
        raise UserError(f"autotune.budget={budget:g}: {budget:g} x run.max_steps={max_steps:,} over autotune.trials="
                        f"{trials} x autotune.seeds={seeds} with autotune.rungs={rungs} leaves trials no env steps"
                        f"{warmup}; raise autotune.budget or run.max_steps, or lower autotune.trials, autotune.seeds "
                        "or autotune.rungs" + (", or set a smaller buffer.initial_size" if learning_start else ""))
    final = OmegaConf.select(cfg, "run.eval_deterministic", default="auto")
    portfolio_size = int(_number("autotune.portfolio", section.get("portfolio", 4), minimum=0, integer=True))
    return Budget(budget, max_steps, trials, seeds, rungs, learning_start + first_rung * 3 ** (rungs - 1), first_rung,
                  episodes, deterministic, learning_start, "auto" if final is None else final, portfolio_size)


def portfolio_size(budget: Budget, overrides: Overrides) -> int:
    """The portfolio's trials: autotune.portfolio, fewer than the study's trials; none where your command line
    sets the first trials itself (hydra.sweeper.baseline or enqueue) or picks the grid sampler, which runs its
    points only."""
    own = ("hydra.sweeper.baseline=", "hydra.sweeper.enqueue=", "hydra/sweeper/sampler=grid")
    if any(o.lstrip("+~").startswith(own) for o in overrides.study):
        return 0
    return min(budget.portfolio, budget.trials - 1)


def pair_kind(cfg: DictConfig) -> str:
    """<actions>_<observations> of the pair's env (discrete_vector, continuous_image, ...)."""
    from rlexp.presets.fallbacks import env_kind

    return env_kind(cfg.env, int(cfg.seed))


def check_space(agent: str, space: str | None, kind: str | None = None) -> str:
    """The search space's preset: +sweep=<name>, else sweep/<agent>_<continuous|discrete>.yaml where there is one
    for the env's actions (a2c_continuous: gSDE), else sweep/<agent>.yaml (the user's own or rlexp's)."""
    if space is None and kind is not None:
        actions = kind.split("_")[0]
        if preset_exists("sweep", f"{agent}_{actions}"):
            return f"{agent}_{actions}"
    name = space or agent
    if not preset_exists("sweep", name):
        given = f"+sweep={space}" if space else f"agent={agent}"
        raise UserError(f"mode=autotune: {given} has no search space (conf/sweep/{name}.yaml); add sweep/{name}.yaml "
                        "to your --config-dir (as conf/sweep/ppo.yaml), or pick one of conf/sweep/ with +sweep=<name>")
    return name


def check_config_dir(directory: str, groups: tuple[str, ...]) -> None:
    """The config dir takes the presets: a writable directory whose `groups` are directories or can be made."""
    target = absolute(directory)
    check_writable(target, f"--config-dir {directory}")
    for group in groups:
        if (target / group).exists() and not (target / group).is_dir():
            raise UserError(f"--config-dir {directory}: {target / group} is a file, so the {group} presets can't go "
                            "there; move it away or pass another config dir")
        check_writable(target / group, f"--config-dir {directory}: {group}/")


def with_default_dir(directory: str) -> float:
    """Without --config-dir: the same command with --config-dir autotune.config_dir (made if missing; removed
    again when the command is refused before writing into it)."""
    target = absolute(directory)
    check_writable(target, f"autotune.config_dir={directory}")
    made = not target.exists()
    target.mkdir(parents=True, exist_ok=True)
    log.info(f"no --config-dir: the tuned preset goes into {directory}/ ({'made now' if made else 'existing'}); use "
             f"--config-dir {directory} from now on (python -m rlexp mode=init +dir={directory} adds copies of every "
             "shipped preset to edit)")
    code = wait_for([sys.executable, "-m", "rlexp", "--config-dir", directory, *sys.argv[1:]])
    if code and made and not any(target.iterdir()):
        target.rmdir()
    if code:
        sys.exit(code)
    return 0.0


def env_preset(cfg: DictConfig, env_overrides: list[str]) -> tuple[str, str | None]:
    """The env's name in the tuned preset's and the printed command's `env=`: its preset's, or for env=generic
    its env.id's (as run dirs name it), with the text of env/<that name>.yaml (generic, env.id and the command
    line's other env.* but n_envs), which a tuned preset named <agent>_generic would not tell apart."""
    choice = choices()["env"]
    if choice != GENERIC_ENV:
        return choice, None
    env_id = str(cfg.env.id)
    name = env_display_name(GENERIC_ENV, env_id)
    env = OmegaConf.to_container(cfg.env, resolve=True)
    keys = dict.fromkeys(text.lstrip("+~").split("=", 1)[0].split(".")[1] for text in env_overrides)
    preset = {"defaults": [GENERIC_ENV], "id": env_id, **{key: env[key] for key in keys if key != "id" and key in env}}
    path, own = hydra_preset("env", name)
    if path is not None and not own:
        raise UserError(f"env.id={env_id}: env/{name}.yaml is one of rlexp's env presets; run it as env={name}")
    if path is not None:  # written by an earlier autotune, or the user's own
        if OmegaConf.to_container(OmegaConf.load(path)) == preset:
            return name, None
        raise UserError(f"env.id={env_id}: your env preset {path} sets other values; tune that preset: "
                        f"python -m rlexp mode=autotune env={name} ...")
    text = (f"# {env_id}, written by `python -m rlexp mode=autotune` for its tuned presets: env={name} is "
            f"env=generic env.id={env_id}\n" + to_yaml(preset))
    return name, text


# ----- the study ------------------------------------------------------------------------------------------
def baseline_values(trial_cfg: DictConfig, keys: set[str]) -> dict[str, Any]:
    """The values the pair trains with untuned (its fallback's, or its tuned preset's, under the command line's)
    for the searched keys: the study's first trial, so that its best is never a trial the study scored below them."""
    values, picked = {}, choices()
    for key in sorted(keys):
        if key in ("model", "buffer") and key in picked:  # a group's choice: the preset the pair trains with
            values[key] = picked[key]
            continue
        value = OmegaConf.select(trial_cfg, key, default=None)
        if isinstance(value, (bool, int, float, str)):
            values[key] = value
    return values


def hydra_dict(values: dict[str, Any]) -> str:
    """`{key:value,...}` in Hydra's override grammar."""
    def shown(value: Any) -> str:
        return str(value).lower() if isinstance(value, bool) else repr(value) if isinstance(value, float) else \
            f"'{value}'" if isinstance(value, str) else str(value)

    return "{" + ",".join(f"{key}:{shown(value)}" for key, value in values.items()) + "}"


def study_command(config_dir: str, agent: str, space: str, overrides: Overrides, budget: Budget, study: str,
                  sweep_dir: Path, baseline: dict[str, Any] | None = None,
                  starts: list[dict[str, Any]] | None = None) -> list[str]:
    """`python -m rlexp --multirun +sweep=<space> ...`: successive halving from the first rung once trial 0 (alone
    at every rung) finished, the step budget, the sampler's start, the first trial's baseline values and the
    portfolio's `starts` after it (the user's hydra.sweeper.* win over them), the user's overrides, then the
    budget's values."""
    sampler = [] if any(o.startswith("hydra/sweeper/sampler") for o in overrides.study) else [
        f"hydra.sweeper.sampler.n_startup_trials={budget.warmup}"]
    first = [f"hydra.sweeper.baseline={hydra_dict(baseline)}"] if baseline else []
    if starts:
        first.append(f"hydra.sweeper.enqueue=[{','.join(hydra_dict(values) for values in starts)}]")
    return [sys.executable, "-m", "rlexp", "--multirun", "--config-dir", config_dir, f"+sweep={space}",
            f"agent={agent}", f"env={choices()['env']}", "hydra.sweeper.pruner=halving",
            f"hydra.sweeper.warmup_steps={budget.eval_interval}", "hydra.sweeper.warmup_trials=1",
            f"hydra.sweeper.max_env_steps={budget.env_steps}",
            *sampler, *first, *overrides.study, *overrides.shared,
            f"run.max_steps={budget.trial_steps}", f"run.eval_interval={budget.eval_interval}",
            f"run.eval_episodes={budget.eval_episodes}",
            f"run.eval_deterministic={str(budget.eval_deterministic).lower()}",
            f"run.final_eval_deterministic={str(budget.final_deterministic).lower()}",
            f"hydra.sweeper.n_trials={budget.trials}",
            f"hydra.sweeper.seeds_per_trial={budget.seeds}", f"hydra.sweeper.study_name={study}",
            f"hydra.sweep.dir='{sweep_dir}'"]


def wait_for(command: list[str], env: dict[str, str] | None = None) -> int:
    """Run a command; its exit code. A Ctrl-C reaches it too (one process group), and it stops in its own way
    (the study reports, a training run checkpoints) while this process waits for it."""
    sys.stdout.flush()
    with subprocess.Popen(command, env=env) as child:
        while True:
            try:
                return child.wait()
            except KeyboardInterrupt:
                continue


def run(command: list[str], env: dict[str, str] | None = None) -> None:
    """A command of its own (its output is the user's); its failure, which it reported, ends autotune's too."""
    code = wait_for(command, env)
    if code:
        sys.exit(code)


def best_trial(sweep_dir: Path) -> tuple[int, dict[str, Any], dict[str, Any]]:
    """(the best trial's number, its whole configuration as the study's report keeps it in tuned/best.yaml,
    optimization_results.yaml)."""
    results_path, preset_path = sweep_dir / "optimization_results.yaml", sweep_dir / "tuned" / "best.yaml"
    results = yaml.safe_load(results_path.read_text()) if results_path.is_file() else None
    if not results or "best_trial" not in results or not preset_path.is_file():
        log.error(f"error: no trial of the study finished: their errors are in {sweep_dir}/trials.csv; for trials "
                  "that were too short, raise autotune.budget or run.max_steps")
        sys.exit(1)
    return int(results["best_trial"]), yaml.safe_load(preset_path.read_text()), results


# ----- the tuned preset -----------------------------------------------------------------------------------
def tuned_values(cfg: DictConfig, agent: str, overrides: Overrides, preset: dict[str, Any], picked: list[str],
                 budget: Budget) -> dict[str, Any]:
    """The tuned preset: the best trial's values that differ from the presets they compose over (with its
    model/buffer choices `picked`), and the pair's training budget."""
    env = [f"env={choices()['env']}", *overrides.env]  # env=generic: as its env preset
    return {**changed(preset, base_config(agent, env, picked)),
            "run": {"max_steps": budget.max_steps, "target_reward": OmegaConf.select(cfg, "run.target_reward")}}


def groups(preset: dict[str, Any]) -> list[str]:
    """The model=/buffer= choices the best trial trained with (its preset's `defaults`: `override /model: lstm`)."""
    return [f"{key.split('/')[-1]}={value}" for entry in preset.get("defaults") or [] for key, value in entry.items()]


def base_config(agent: str, env: list[str], group_choices: list[str]) -> dict[str, Any]:
    """The hyperparameter sections composed without a tuned preset (and so without the fallback, which only an
    untuned pair takes): what the tuned preset's values go on top of."""
    from hydra import compose

    config = compose(config_name=HydraConfig.get().job.config_name,
                     overrides=[f"agent={agent}", *env, *group_choices, "~tuned"])
    return {section: OmegaConf.to_container(config[section], resolve=True) for section in SECTIONS if section in config}


def changed(preset: dict[str, Any], base: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """{section: {key: value}} of the best trial's configuration where it differs from `base`."""
    values = {section: {key: value for key, value in (preset.get(section) or {}).items()
                        if key not in base.get(section, {}) or base[section][key] != value} for section in SECTIONS}
    return {section: keys for section, keys in values.items() if keys}


def to_yaml(values: dict[str, Any]) -> str:
    """As conf/tuned/ writes them: one line a section, `agent: {lr: 0.001, n_steps: 64}`."""
    return yaml.safe_dump(values, default_flow_style=None, sort_keys=False, width=110)


def tuned_header(cfg: DictConfig, study: str, sweep_dir: Path, budget: Budget, best: int,
                 results: dict[str, Any], picked: list[str], origin: str | None = None) -> str:
    """The tuned preset's first lines: its package, who wrote it when, the study, the best trial and its score."""
    agent, date = str(cfg.agent._target_).rsplit(".", 1)[-1], time.strftime("%Y-%m-%d %H:%M")
    counts = ", ".join(f"{n} {state.lower()}" for state, n in (results.get("trials") or {}).items())
    seeds = f"{budget.seeds} seed{'s' if budget.seeds > 1 else ''}"
    return (f"# @package _global_\n"
            f"# {agent} on {cfg.env.id}, written by `python -m rlexp mode=autotune` on {date}\n"
            f"# study {study} ({sweep_dir}):\n"
            f"#   {sum((results.get('trials') or {}).values())} trials ({counts}) x {seeds} of up to "
            f"{budget.trial_steps:,} steps; best: trial {best}{' (' + origin + ')' if origin else ''}, "
            f"score {results['best_value']:.6g} (the sweeper's objective)\n"
            "# Its values where they differ from the agent, env, model and buffer presets: those of the tuned or\n"
            "# fallback preset it trained over, of the command line and of the search; run.max_steps: the pair's\n"
            "# training budget.\n"
            + (f"# Train with {' '.join(picked)} on the command line too (a tuned preset can't pick a preset "
               "of another group).\n" if picked else ""))
