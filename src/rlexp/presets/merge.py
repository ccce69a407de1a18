"""A preset merged over the composed config as the defaults list would merge it: tuned presets, the command
line's values applied again over it, the user's own presets' values kept over what rlexp ships (said in a line),
and a recurrent model's minibatches of whole sequences."""
from __future__ import annotations

import logging
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf, open_dict

from rlexp.presets.sources import SECTIONS, own_keys, preset_sources, preset_values

log = logging.getLogger("rlexp")


def merge_tuned(cfg: DictConfig, path: Any, overrides: list[str]) -> DictConfig:
    """cfg with a tuned preset file merged in as the defaults list merges `tuned` (over the agent, env, model and
    buffer presets), the command line's values applied again over it."""
    preset = OmegaConf.load(path)
    merged = OmegaConf.merge(cfg, {key: preset[key] for key in SECTIONS if key in preset})
    apply_overrides(merged, overrides)
    with open_dict(merged):
        fit_sequences(merged)
    return merged


def apply_overrides(cfg: DictConfig, overrides: list[str]) -> None:
    """The command line's values of the hyperparameter sections set again (they win over any preset)."""
    for override in OverridesParser.create().parse_overrides(overrides):
        key = override.get_key_element().lstrip("+~")
        if key.split(".")[0] in SECTIONS and "." in key and not override.is_delete():
            OmegaConf.update(cfg, key, override.value(), force_add=True)


def keep_own(merged: DictConfig, layer: Any, choices: dict[str, str], by: str, users: bool = False,
             overrides: list[str] = ()) -> None:
    """The keys of the user's own presets (--config-dir: added, or changed from the shipped preset of the same
    name) that `layer` (the sections of `by`, an RL Zoo row or a tuned preset merged over them into `merged`) sets
    to other values: set back to the user's values in `merged`, as the user's presets win over what rlexp ships,
    and said in one line. Where `layer` is the user's own too (`users`: their tuned preset, zoo.file or zoo.row),
    it wins, and the line says that instead. Keys of the command line's `overrides` are left to it."""
    given = {o.lstrip("+~").split("=", 1)[0] for o in overrides}
    kept: dict[Any, list[str]] = {}
    lost: dict[Any, list[str]] = {}
    for group in SECTIONS:
        if group not in choices or group not in merged or group not in layer or not layer[group]:
            continue
        theirs = layer[group] if isinstance(layer[group], dict) else OmegaConf.to_container(layer[group])
        keys = own_keys(group, choices[group]) & set(theirs)
        mine = preset_sources(group, choices[group]) if keys else {}
        for key in sorted(keys):
            if key not in mine or mine[key][0] == theirs[key] or f"{group}.{key}" in given:
                continue
            value, path = mine[key]
            if users:
                lost.setdefault(path, []).append(f"{group}.{key}")
                continue
            OmegaConf.update(merged, f"{group}.{key}", value, force_add=True)
            kept.setdefault(path, []).append(f"{group}.{key} {value} (its {theirs[key]})")
    if lost:
        said = "; ".join(f"{', '.join(keys)} ({path})" for path, keys in lost.items())
        log.info(f"{by} sets {said} over your own presets: set them on the command line to keep yours")
    if kept:
        said = "; ".join(f"{', '.join(keys)} from {path}" for path, keys in kept.items())
        log.info(f"your own presets win over {by}: {said}")


def say_over_choices(preset: Any, choices: dict[str, str], overrides: list[str], by: str,
                     leave_out: str = " or leave the tuned preset out (~tuned)") -> None:
    """One line naming the keys of a group preset chosen on the command line (model=mlp_400_300) that `by` (a
    tuned preset or a fallback, merged over the groups' presets) sets to other values: the command line chose that
    preset, so losing its values is said, with the ways to keep them; a key the command line sets itself is not.
    (agent= and env= pick the pair the tuned preset is for.)"""
    chosen = {o.split("=", 1)[0] for o in overrides if "=" in o and not o.startswith(("+", "~"))}
    lost = []
    for group in ("model", "buffer"):
        if group not in chosen or group not in preset or group not in choices:
            continue
        mine = preset_values(group, choices[group])  # (with what it takes from the presets it starts from)
        theirs = OmegaConf.to_container(preset[group])
        keys = [key for key in theirs if key in mine and mine[key] != theirs[key] and f"{group}.{key}" not in chosen]
        lost += [f"{', '.join(f'{group}.{key}' for key in keys)} over {group}={choices[group]}"] if keys else []
    if lost:
        log.info(f"{by} sets {'; '.join(lost)} (the command line's choice): to train the chosen preset's values, "
                 f"set them on the command line{leave_out}")


def model_is_its_own(cfg: DictConfig, choices: dict[str, str]) -> bool:
    """The model keeps its own network and init over a row's or fallback's: it is recurrent (what such a run is
    about) or your own edited model preset."""
    return is_recurrent(cfg) or ("model" in choices and bool(own_keys("model", choices["model"])))


def is_recurrent(cfg: DictConfig) -> bool:
    """The model has an LSTM or GRU layer (rlexp.models.networks.is_recurrent, without importing Keras before
    TensorFlow is set up)."""
    return any(layer.get("type") in ("lstm", "gru") for layer in cfg.model.get("layers") or [])


def fit_sequences(cfg: DictConfig) -> None:
    """With a recurrent model, minibatches are whole sequences (see OnPolicyAgent's sequence_length): when
    agent.sequence_length is unset and the rollout's n_envs sequences don't split into agent.mini_batches,
    cut each env's rollout into the longest sequences that do (the fallbacks' minibatches of 64 transitions
    become one 64-step sequence each, as sb3-contrib's RecurrentPPO takes 64 consecutive steps)."""
    agent = cfg.agent
    if "mini_batches" not in agent or "sequence_length" not in agent or agent.sequence_length is not None:
        return
    if not is_recurrent(cfg):
        return
    n_steps, n_envs, mini_batches = int(agent.n_steps), int(cfg.env.n_envs), int(agent.mini_batches)
    if mini_batches < 1 or (n_envs % mini_batches == 0):
        return
    fits = [length for length in range(n_steps, 0, -1) if n_steps % length == 0
            and (n_steps // length * n_envs) % mini_batches == 0]
    if fits:
        agent.sequence_length = fits[0]
