"""Defaults that learn where nothing is tuned: an agent+env pair without a conf/tuned/ preset takes
conf/fallbacks/<agent>_<discrete|continuous>_<vector|image>.yaml (RL Zoo's and SB3's defaults for that kind
of env), under the values the user set: the command line's, and those of their own presets (--config-dir).
`fallback=none` keeps the agent presets' own (xagents') values."""
from __future__ import annotations

import importlib.resources
import logging
import shlex
import sys
from typing import Any

from hydra_plugins.rlexp_searchpath import user_config_dir
from omegaconf import DictConfig, OmegaConf, open_dict

from rlexp.errors import UserError
from rlexp.presets.merge import (apply_overrides, fit_sequences, keep_own, merge_tuned, model_is_its_own,
                                 say_over_choices)
from rlexp.presets.sources import edited, hydra_choices, hydra_preset, own_values, preset_exists
from rlexp.presets.zoo.merge import merge_zoo, over_row, registered, zoo_row
from rlexp.runs.dirs import GENERIC_ENV, env_command, env_display_name, in_sweep

log = logging.getLogger("rlexp")


def env_kind(env_cfg: Any, seed: int) -> str:
    """<action kind>_<vector|image> of the env (from the one copy the run's checks share)."""
    from rlexp.envs.make import probe_spaces
    from rlexp.envs.spaces import is_image, space_kind

    obs_space, action_space = probe_spaces(env_cfg, seed)
    return f"{space_kind(action_space)}_{'image' if is_image(obs_space) else 'vector'}"


def fallback_path(name: str):
    return importlib.resources.files("rlexp.conf") / "fallbacks" / f"{name}.yaml"


def fallback_name(agent: str, kind: str) -> str | None:
    name = f"{agent}_{kind}"
    return name if fallback_path(name).is_file() else None


def apply_fallback(cfg: DictConfig, choices: dict[str, str], overrides: list[str]) -> tuple[DictConfig, str | None]:
    """cfg as the pair trains: a tuned preset set over RL Zoo's row for the pair with the row under it (a tuned
    preset of the pair's whole values alone); else the pair's RL Zoo row (shipped, or zoo.file / zoo.row); else
    the fallback preset of the env's kind, under the user's values (the command line's `overrides`, their own
    presets'). The values the user's own presets set win over a shipped row and a shipped tuned preset (said in a
    line; `keep_own`); their own tuned preset and RL Zoo row win over those. Also the line that names what the run
    uses (the run's first log line, logged once the envs and agent are built: bad input stays a single error
    line)."""
    if cfg.get("fallback", "auto") is None:
        with open_dict(cfg):
            cfg.fallback = "none"  # null is none, saved as such
    if cfg.get("resume") or not choices:
        return cfg, None
    agent = choices.get("agent") or str(cfg.agent._target_).rsplit(".", 1)[-1].lower()
    pair = f"{agent}+{env_display_name(choices.get('env'), cfg.env.id)}"
    tuned = choices.get("tuned")
    users_zoo = bool((cfg.get("zoo") or {}).get("file") or (cfg.get("zoo") or {}).get("row"))
    if tuned and preset_exists("tuned", tuned) and not (users_zoo and not edited("tuned", tuned)):
        path, own = hydra_preset("tuned", tuned)  # (your own RL Zoo row wins over a shipped tuned preset)
        preset = OmegaConf.load(path)
        say_over_choices(preset, choices, overrides, f"tuned/{tuned}.yaml")
        users = edited("tuned", tuned)  # (an unchanged copy of rlexp's preset is rlexp's)
        where = f"tuned/{tuned}.yaml " + (f"(your own: {path})" if users else f"(your unchanged copy: {path})"
                                          if own else "(shipped with rlexp)")
        if not over_row(path):  # the pair's whole values (an autotuned preset, an rlexp agent's)
            keep_own(cfg, preset, choices, f"tuned/{tuned}.yaml", users, overrides)
            return cfg, f"tuned preset for {pair}: {where}"
        row, refused = zoo_row(agent, cfg, shipped_rows=True)  # what rlexp (or your copy) sets over the row
        if row is None and not registered(str(cfg.env.id)):
            return cfg, f"tuned preset for {pair}: {where}"  # (building the env says what is wrong with its id)
        if row is None:
            raise UserError(f"tuned/{tuned}.yaml ({path}) is set over RL Zoo's row for {pair}, which "
                            f"{refused.strip(' ();') or 'is not found for this agent, model and env'}; train the "
                            "pair with its row (drop the option that changes it) or with your own tuned preset")
        merged = merge_zoo(cfg, row, overrides, choices, over=preset)
        keep_own(merged, preset, choices, f"tuned/{tuned}.yaml", users, overrides)
        with open_dict(merged):
            fit_sequences(merged)
        return merged, f"RL Zoo's row for {pair}: {row.source}, with {where} over it"
    if choices.get("env") == GENERIC_ENV:  # env=generic env.id=X: autotune's tuned/<agent>_<X as run dirs name it>
        named = f"{agent}_{env_display_name(GENERIC_ENV, str(cfg.env.id))}"
        path, own = hydra_preset("tuned", named)
        if path is not None:
            say_over_choices(OmegaConf.load(path), choices, overrides, f"tuned/{named}.yaml", leave_out="")
            merged = merge_tuned(cfg, path, overrides)
            keep_own(merged, OmegaConf.load(path), choices, f"tuned/{named}.yaml", edited("tuned", named), overrides)
            return merged, (f"tuned preset for {pair}: tuned/{named}.yaml "
                            + (f"(your own: {path})" if own else "(shipped with rlexp)"))
    hint = autotune_hint(agent, choices.get("env"), str(cfg.env.id))
    if str(cfg.get("fallback", "auto")) != "auto" and not users_zoo:
        return cfg, f"no tuned preset for {pair}: fallback=none, so the agent preset's own values{hint}"
    row, refused = zoo_row(agent, cfg)
    if row is not None:
        return merge_zoo(cfg, row, overrides, choices), f"RL Zoo's row for {pair}: {row.source}"
    kind = env_kind(cfg.env, int(cfg.seed))
    name = fallback_name(agent, kind)
    if name is None:
        return cfg, (f"no tuned preset for {pair} and no fallback preset for {agent} on {kind.replace('_', ' ')} "
                     f"envs: the agent preset's own values{hint}")
    merged = merge_fallback(cfg, name, overrides, choices)
    length = merged.agent.get("sequence_length")
    cut = f"; agent.sequence_length={length}: minibatches of whole sequences" if length != cfg.agent.get(
        "sequence_length") else ""
    return merged, (f"no tuned preset for {pair}: using fallbacks/{name}.yaml (SB3's defaults and RL Zoo's values "
                    f"for that kind of env; fallback=none keeps the agent's own){cut}{refused}{hint}")


def autotune_hint(agent: str, env_choice: str | None, env_id: str) -> str:
    """`; tune it: python -m rlexp mode=autotune ...` for this pair (with the user's --config-dir), where the agent
    has a search space (sweep/<agent>.yaml); nothing inside a sweep's trials."""
    if in_sweep() or not preset_exists("sweep", agent):
        return ""
    config_dir = user_config_dir(sys.argv[1:])
    words = ["python", "-m", "rlexp", "mode=autotune", f"agent={agent}", *env_command(env_choice, env_id).split()]
    words += ["--config-dir", config_dir] if config_dir else []
    return f"; tune it: {shlex.join(words)}"


def merge_fallback(cfg: DictConfig, name: str, overrides: list[str], choices: dict[str, str] | None = None
                   ) -> DictConfig:
    """cfg with conf/fallbacks/<name>.yaml merged in, then the values the user's own presets of `choices` set
    and the command line's values applied again over it; a recurrent model's minibatches whole sequences. The
    fallback's `model` (SB3's init, over whichever network: a search's `model: choice(mlp, mlp_large)` is RL Zoo's
    net_arch choice) is left out for a recurrent model or your own model preset, and said over a chosen one."""
    preset = OmegaConf.load(fallback_path(name))
    preset.pop("defaults", None)
    choices = choices if choices is not None else hydra_choices()
    if model_is_its_own(cfg, choices):
        preset.pop("model", None)
    say_over_choices(preset, choices, overrides, f"fallbacks/{name}.yaml", leave_out=" or fallback=none")
    merged = OmegaConf.merge(cfg, preset, own_values(cfg, choices))
    apply_overrides(merged, overrides)
    with open_dict(merged):
        fit_sequences(merged)
        merged.fallback = name
    return merged
