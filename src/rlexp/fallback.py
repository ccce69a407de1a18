"""Defaults that learn where nothing is tuned: an agent+env pair without a conf/tuned/ preset takes
conf/fallbacks/<agent>_<discrete|continuous>_<vector|image>.yaml (RL Zoo's and SB3's defaults for that kind
of env), under the command line's own values. `fallback=none` keeps the agent presets' own (xagents') values."""
from __future__ import annotations

import importlib.resources
import logging
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf, open_dict

log = logging.getLogger("rlexp")
SECTIONS = ("agent", "env", "buffer", "model", "run")


def env_kind(env_cfg: Any, seed: int) -> str:
    """<action kind>_<vector|image> of the env (one copy, made and closed)."""
    from rlexp.envs import env_from_config, is_image, space_kind

    envs = env_from_config(env_cfg, seed, n_envs=1, vectorization="sync")
    try:
        obs = "image" if is_image(envs.single_observation_space) else "vector"
        return f"{space_kind(envs.single_action_space)}_{obs}"
    finally:
        envs.close()


def fallback_path(name: str):
    return importlib.resources.files("rlexp.conf") / "fallbacks" / f"{name}.yaml"


def fallback_name(agent: str, kind: str) -> str | None:
    name = f"{agent}_{kind}"
    return name if fallback_path(name).is_file() else None


def preset_exists(group: str, name: str) -> bool:
    """Whether <group>/<name>.yaml is in one of Hydra's config sources (an `optional` group's choice is recorded
    whether or not its file exists)."""
    from hydra.core.hydra_config import HydraConfig

    for source in HydraConfig.get().runtime.config_sources:
        if source.schema == "pkg":
            module, _, sub = str(source.path).partition("/")
            try:
                base = importlib.resources.files(module)
            except ModuleNotFoundError:
                continue
            candidate = (base / sub if sub else base) / group / f"{name}.yaml"
        elif source.schema == "file":
            candidate = Path(str(source.path)) / group / f"{name}.yaml"
        else:
            continue
        if candidate.is_file():
            return True
    return False


def apply_fallback(cfg: DictConfig, choices: dict[str, str], overrides: list[str]) -> DictConfig:
    """cfg with the fallback preset merged in, when no tuned preset was chosen; the command line's
    values (`overrides`) win over it."""
    tuned = choices.get("tuned")
    if str(cfg.get("fallback", "auto")) != "auto" or cfg.get("resume") or not choices or (tuned and preset_exists("tuned", tuned)):
        return cfg
    agent = choices.get("agent") or str(cfg.agent._target_).rsplit(".", 1)[-1].lower()
    name = fallback_name(agent, env_kind(cfg.env, int(cfg.seed)))
    if name is None:
        return cfg
    merged = merge_fallback(cfg, name, overrides)
    log.info(f"no tuned preset for {agent}+{choices.get('env', cfg.env.id)}: using fallbacks/{name}.yaml "
             "(RL Zoo's and SB3's defaults; fallback=none keeps the agent's own)")
    return merged


def merge_fallback(cfg: DictConfig, name: str, overrides: list[str]) -> DictConfig:
    """cfg with conf/fallbacks/<name>.yaml merged in and the command line's values applied again over it."""
    preset = OmegaConf.load(fallback_path(name))
    preset.pop("defaults", None)
    merged = OmegaConf.merge(cfg, preset)
    for override in OverridesParser.create().parse_overrides(overrides):
        key = override.get_key_element().lstrip("+~")
        if key.split(".")[0] in SECTIONS and "." in key and not override.is_delete():
            OmegaConf.update(merged, key, override.value(), force_add=True)
    with open_dict(merged):
        merged.fallback = name
    return merged
