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
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from hydra_plugins.rlexp_searchpath import user_config_dir
from rlexp.commands.autotune.budget import (
    Budget,
    check_budget,
    job_slots,
    portfolio_size,
)
from rlexp.commands.autotune.preset import (
    best_trial,
    env_preset,
    groups,
    to_yaml,
    tuned_header,
    tuned_values,
)
from rlexp.commands.autotune.request import (
    Overrides,
    baseline_values,
    check_config_dir,
    check_pair,
    check_space,
    command_overrides,
    pair_kind,
    pair_max_steps,
    searched_keys,
    split_overrides,
)
from rlexp.errors import UserError
from rlexp.presets.portfolio import portfolio
from rlexp.runs.dirs import absolute, choices, in_sweep, original_cwd
from rlexp.runs.files import check_writable, write_atomic
from rlexp.sweep.report import FOR_AUTOTUNE

log = logging.getLogger("rlexp")


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
    # the study's rungs count from trial 0's warm-up for every trial: trial 0 trains the pair's own values
    learning_start = int(OmegaConf.select(trial_cfg, "buffer.initial_size", default=0) or 0)
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
        log.info(f"trials 1-{len(starts)} start from the values tuned for other envs: "
                 f"{', '.join(c.label for c in starts)} (autotune.portfolio)")
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
    origin = f"the values of {starts[best - 1].label}" if 0 < best <= len(starts) else None
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
