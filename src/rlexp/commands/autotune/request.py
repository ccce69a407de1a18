"""What the autotune command asks for: the command line's overrides sorted by where they go, the pair's
configuration as its trials train it (checked before the study), its search space, its config dir, and the
baseline trial's values."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf

from rlexp.errors import UserError
from rlexp.presets.sources import hydra_preset, parent_preset, preset_exists
from rlexp.runs.dirs import GENERIC_ENV, absolute, choices
from rlexp.runs.files import check_writable

log = logging.getLogger("rlexp")


SECTIONS = ("agent", "env", "model", "buffer")  # the hyperparameters a tuned preset holds, with run's budget

HYPERPARAMETERS = ("agent.", "env.", "model.", "buffer.", "run.max_steps", "run.target_reward")

FINAL_ONLY = ("run_dir", "run.eval_interval", "run.eval_episodes", "run.eval_deterministic",
              "run.keep_checkpoints")  # the study sets its own

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

def pair_kind(cfg: DictConfig) -> str:
    """<actions>_<observations> of the pair's env (discrete_vector, continuous_image, ...)."""
    from rlexp.envs.make import close_probe_copies
    from rlexp.presets.fallbacks import env_kind

    kind = env_kind(cfg.env, int(cfg.seed))
    close_probe_copies()  # the study's trials make their envs in their own processes
    return kind

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
