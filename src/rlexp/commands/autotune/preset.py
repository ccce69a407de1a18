"""What autotune writes: the best trial's values as tuned/<agent>_<env>.yaml (where they differ from the presets
they compose over) with its header, and for env=generic the env preset."""
from __future__ import annotations

import logging
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from rlexp.commands.autotune.budget import Budget
from rlexp.commands.autotune.request import SECTIONS, Overrides
from rlexp.errors import UserError
from rlexp.presets.sources import hydra_preset
from rlexp.runs.dirs import GENERIC_ENV, choices, env_display_name

log = logging.getLogger("rlexp")


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
