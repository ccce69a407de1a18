"""Defaults that learn where nothing is tuned: an agent+env pair without a conf/tuned/ preset takes
conf/fallbacks/<agent>_<discrete|continuous>_<vector|image>.yaml (RL Zoo's and SB3's defaults for that kind
of env), under the values the user set: the command line's, and those of their own presets (--config-dir).
`fallback=none` keeps the agent presets' own (xagents') values."""
from __future__ import annotations

import importlib.resources
import logging
import shlex
import sys
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra_plugins.rlexp_searchpath import user_config_dir
from omegaconf import DictConfig, OmegaConf, open_dict

from rlexp.errors import UserError
from rlexp.rundirs import GENERIC_ENV, env_command, env_display_name, in_sweep
from rlexp.zoo import ZooRow, ZooRowError, row_for, translate

log = logging.getLogger("rlexp")
SECTIONS = ("agent", "env", "buffer", "model", "run")
SHIPPED = ("rlexp.conf", "hydra.conf")  # the config sources of rlexp's own presets and Hydra's


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

    return any(source_file(source, group, name) for source in HydraConfig.get().runtime.config_sources)


def source_file(source: Any, group: str, name: str) -> Any:
    """<group>/<name>.yaml in one of Hydra's config sources (a path, or a package resource), or None."""
    if source.schema == "pkg":
        module, _, sub = str(source.path).partition("/")
        try:
            base = importlib.resources.files(module)
        except ModuleNotFoundError:
            return None
        candidate = (base / sub if sub else base) / group / f"{name}.yaml"
    elif source.schema == "file":
        candidate = Path(str(source.path)) / group / f"{name}.yaml"
    else:
        return None
    return candidate if candidate.is_file() else None


def apply_fallback(cfg: DictConfig, choices: dict[str, str], overrides: list[str]) -> tuple[DictConfig, str | None]:
    """cfg as the pair trains: a tuned preset set over RL Zoo's row for the pair with the row under it (a tuned
    preset of the pair's whole values alone); else the pair's RL Zoo row (shipped, or zoo.file / zoo.row); else
    the fallback preset of the env's kind, under the user's values (the command line's `overrides`, their own
    presets'). Also the line that names what the run uses (the run's first log line, logged once the envs and
    agent are built: bad input stays a single error line)."""
    if cfg.get("fallback", "auto") is None:
        with open_dict(cfg):
            cfg.fallback = "none"  # null is none, saved as such
    if cfg.get("resume") or not choices:
        return cfg, None
    agent = choices.get("agent") or str(cfg.agent._target_).rsplit(".", 1)[-1].lower()
    pair = f"{agent}+{env_display_name(choices.get('env'), cfg.env.id)}"
    tuned = choices.get("tuned")
    users_zoo = bool((cfg.get("zoo") or {}).get("file") or (cfg.get("zoo") or {}).get("row"))
    if tuned and preset_exists("tuned", tuned) and not (users_zoo and not hydra_preset("tuned", tuned)[1]):
        path, own = hydra_preset("tuned", tuned)  # (your own RL Zoo row wins over a shipped tuned preset)
        preset = OmegaConf.load(path)
        say_overridden(cfg, preset, choices, f"tuned/{tuned}.yaml")
        where = f"tuned/{tuned}.yaml " + (f"(your own: {path})" if own else "(shipped with rlexp)")
        if not over_row(path):  # the pair's whole values (an autotuned preset, an rlexp agent's)
            return cfg, f"tuned preset for {pair}: {where}"
        row, refused = zoo_row(agent, cfg, shipped_rows=True)  # what rlexp (or your copy) sets over the row
        if row is None and not registered(str(cfg.env.id)):
            return cfg, f"tuned preset for {pair}: {where}"  # (building the env says what is wrong with its id)
        if row is None:
            raise UserError(f"tuned/{tuned}.yaml ({path}) is set over RL Zoo's row for {pair}, which "
                            f"{refused.strip(' ();') or 'is not found for this agent, model and env'}; train the "
                            "pair with its row (drop the option that changes it) or with your own tuned preset")
        return merge_zoo(cfg, row, overrides, choices, over=preset), (f"RL Zoo's row for {pair}: {row.source}, "
                                                                     f"with {where} over it")
    if choices.get("env") == GENERIC_ENV:  # env=generic env.id=X: autotune's tuned/<agent>_<X as run dirs name it>
        named = f"{agent}_{env_display_name(GENERIC_ENV, str(cfg.env.id))}"
        path, own = hydra_preset("tuned", named)
        if path is not None:
            return merge_tuned(cfg, path, overrides), (f"tuned preset for {pair}: tuned/{named}.yaml "
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
    and the command line's values applied again over it; a recurrent model's minibatches whole sequences."""
    preset = OmegaConf.load(fallback_path(name))
    preset.pop("defaults", None)
    merged = OmegaConf.merge(cfg, preset, own_values(cfg, choices if choices is not None else hydra_choices()))
    apply_overrides(merged, overrides)
    with open_dict(merged):
        fit_sequences(merged)
        merged.fallback = name
    return merged


def zoo_row(agent: str, cfg: DictConfig, shipped_rows: bool = False) -> tuple[ZooRow | None, str]:
    """(the RL Zoo row the run trains, or None; why a shipped row is not used). A row of the user's own file
    (zoo.file / zoo.row) that is missing or that rlexp cannot honour stops the run in one line; a shipped one is
    said and the fallback takes over. zoo.rows=false turns the shipped rows off, except under a tuned preset set
    over its row (`shipped_rows`)."""
    zoo = cfg.get("zoo") or {}
    users = bool(zoo.get("file") or zoo.get("row"))
    if not zoo.get("rows", True) and not users and not shipped_rows:
        return None, ""
    row = row_for(agent, cfg)
    if row is None:
        if users:
            from rlexp.zoo import load_file, zoo_file_of

            rows, name, _ = load_file(zoo_file_of(agent, cfg.get("model")) or agent, zoo.get("file"))
            raise ZooRowError(f"zoo.file={zoo.get('file')}: {name} has no row for {cfg.env.id}; it has "
                              f"{', '.join(sorted(rows))} (zoo.row=<name> trains one of them on this env)")
        return None, ""
    try:
        translate(row)
    except ZooRowError as error:
        if users:
            raise
        return None, f" ({error}, so not that row)"
    return row, ""


def registered(env_id: str) -> bool:
    """Whether gymnasium knows the id (ale-py's games included)."""
    import gymnasium as gym

    from rlexp.envs import is_atari

    is_atari(env_id)  # (rlexp.envs registers ale-py's games)
    try:
        gym.spec(env_id)
        return True
    except Exception:  # noqa: BLE001 - unknown ids, namespaces, modules
        return False


def over_row(path: Any) -> bool:
    """Whether a tuned preset is set over its pair's RL Zoo row (rlexp's shipped ones, and copies of them, say so
    in their first comment lines); others (autotune's, an rlexp agent's) hold the pair's whole values."""
    head = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        head.append(line)
    return "RL Zoo's row" in " ".join(head[:3])


def merge_zoo(cfg: DictConfig, row: ZooRow, overrides: list[str], choices: dict[str, str],
              over: DictConfig | None = None) -> DictConfig:
    """cfg with an RL Zoo row merged in over the agent, env, model and buffer presets (as a tuned preset is), the
    `over` preset's sections (a shipped tuned preset's) and the command line's values applied again over it. The
    row's network replaces the model preset unless the command line chose one (`model=`), the model is recurrent,
    or it is your own edited preset. A key the user's own presets set that the row overrides is said."""
    sections = translate(row)
    model = sections.pop("model")
    # run.*: the row's n_timesteps only where nothing but config.yaml set the length (a config group of yours, a
    # tuned preset and the command line win); the stop rule is rlexp's (tuned presets set it)
    steps = sections.pop("run")["max_steps"]
    if float(cfg.run.max_steps) == default_max_steps():
        sections["run"] = {"max_steps": steps}
    chosen = {o.lstrip("+~").split("=", 1)[0] for o in overrides}
    if "buffer" in chosen:  # buffer=prioritized etc.: the row's sizes, the chosen buffer's class
        sections.get("buffer", {}).pop("_target_", None)
    if sections["env"].get("wrappers") and cfg.env.get("wrappers"):  # the env preset's wrappers first
        sections["env"]["wrappers"] = [*OmegaConf.to_container(cfg.env.wrappers), *sections["env"]["wrappers"]]
    above = {key: over[key] for key in SECTIONS if over is not None and key in over and key != "run"}  # (composed)
    merged = OmegaConf.merge(cfg, sections, {key: value for key, value in above.items() if key != "model"})
    recurrent = any(layer.get("type") in ("lstm", "gru") for layer in cfg.model.get("layers") or [])
    yours = "model" in choices and bool(own_keys("model", choices["model"]))  # your own edited model preset
    with open_dict(merged):
        if "model" not in chosen and not recurrent and not yours:  # (a recurrent model: what such a run is about)
            merged.model = OmegaConf.merge(OmegaConf.create(model), above.get("model", {}))
    by_row = {group: {key: value for key, value in keys.items() if key not in (above.get(group) or {})}
              for group, keys in sections.items()}  # (what `over` sets again, its own line names)
    say_overridden(cfg, by_row, choices, f"RL Zoo's row {row.file} {row.key}")
    apply_overrides(merged, overrides)
    with open_dict(merged):
        fit_sequences(merged)
        given = chosen | {f"agent.{key}" for key in (above.get("agent") or {})}
        decay = exploration_steps(row, merged, given)
        if decay is not None:
            merged.agent.epsilon_decay_steps = decay
    return merged


def default_max_steps() -> float:
    """conf/config.yaml's run.max_steps: a run whose length nothing else set."""
    return float(OmegaConf.load(importlib.resources.files("rlexp.conf") / "config.yaml").run.max_steps)


def exploration_steps(row: ZooRow, cfg: DictConfig, given: set[str]) -> int | None:
    """DQN's epsilon decays over exploration_fraction of the run's own length (SB3: of total_timesteps), also
    where run.max_steps is not the row's n_timesteps; None where the decay was given (command line, preset)."""
    if row.algo != "dqn" or "agent.epsilon_decay_steps" in given:
        return None
    from rlexp.zoo import SB3_DEFAULTS

    fraction = float({**SB3_DEFAULTS["dqn"], **row.values}["exploration_fraction"])
    return int(fraction * float(cfg.run.max_steps))


def say_overridden(cfg: DictConfig, sections: Any, choices: dict[str, str], by: str) -> None:
    """One line naming the keys of the user's own presets (--config-dir) that `by` (a tuned preset or an RL Zoo
    row, merged over them) sets to other values."""
    lost = []
    for group in SECTIONS:
        if group not in choices or group not in cfg or group not in sections:
            continue
        keys = own_keys(group, choices[group]) & set(sections[group].keys())
        path, _ = hydra_preset(group, choices[group])
        mine = OmegaConf.load(path) if keys else {}
        changed = [f"{group}.{key}" for key in sorted(keys) if mine.get(key, None) != sections[group][key]]
        lost += [f"{', '.join(changed)} ({path})"] if changed else []
    if lost:
        log.info(f"{by} sets {'; '.join(lost)} over your own presets: set them on the command line to keep yours")


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


def hydra_choices() -> dict[str, str]:
    from rlexp.rundirs import choices

    return choices()


# ----- the user's own presets ---------------------------------------------------------------------------
def hydra_preset(group: str, name: str) -> tuple[Any, bool]:
    """The file Hydra reads for <group>/<name>.yaml (None where there is none), and whether it is the user's own
    (from --config-dir) rather than a shipped one."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return None, False
    for source in HydraConfig.get().runtime.config_sources:
        found = source_file(source, group, name)
        if found is not None:
            return found, not (source.schema == "pkg" and str(source.path) in SHIPPED)
    return None, False


def parent_preset(group: str, entry: Any) -> tuple[str, str] | None:
    """(group, name) of a `defaults` entry of a <group> preset that merges another preset into the same section:
    `name` (or `name@_here_`) of that group, or `/other/group/name@_here_` (`/name@_here_` at the top level)."""
    if not isinstance(entry, str) or entry == "_self_" or " " in entry.strip():
        return None
    path, _, package = entry.strip().partition("@")
    if path.startswith("/") and package == "_here_":
        parent_group, _, name = path[1:].rpartition("/")
        return parent_group, name
    if not path.startswith("/") and "/" not in path and package in ("", "_here_"):
        return group, path
    return None


def own_keys(group: str, name: str) -> set[str]:
    """Keys of <group>/<name>.yaml whose composed value is one the user set: a user's own preset (that one, or
    one it starts from through `defaults`) sets it differently from the shipped preset of that name (or the
    shipped one lacks it), and no preset merged after it sets it again. An unchanged copy from `mode=init`
    sets none."""
    return preset_keys(group, name, frozenset())[1]


def preset_keys(group: str, name: str, seen: frozenset[str]) -> tuple[set[str], set[str]]:
    """(the keys <group>/<name>.yaml and the presets it starts from set, those of them own_keys counts), in
    Hydra's order: each `defaults` entry, then the preset's own values (`_self_`, last unless placed)."""
    path, users = hydra_preset(group, name)
    if path is None or f"{group}/{name}" in seen:
        return set(), set()
    preset = OmegaConf.to_container(OmegaConf.load(path))
    if not isinstance(preset, dict):
        return set(), set()
    defaults = preset.get("defaults")
    entries = list(defaults) if isinstance(defaults, list) else []
    entries += [] if "_self_" in entries else ["_self_"]
    every, own = set(), set()
    for entry in entries:
        if entry == "_self_":
            sets, mine = set(preset) - {"defaults"}, changed_keys(group, name, preset) if users else set()
        elif (parent := parent_preset(group, entry)) is not None:
            sets, mine = preset_keys(*parent, seen | {f"{group}/{name}"})
        else:
            continue
        every, own = every | sets, (own - sets) | mine
    return every, own


def shipped_file(group: str, name: str) -> Any:
    """rlexp's own <group>/<name>.yaml (which may not exist)."""
    return importlib.resources.files("rlexp.conf") / group / f"{name}.yaml"


def changed_keys(group: str, name: str, preset: dict) -> set[str]:
    """Keys of `preset` absent from, or set differently in, the shipped <group>/<name>.yaml."""
    shipped_path = shipped_file(group, name)
    shipped = OmegaConf.to_container(OmegaConf.load(shipped_path)) if shipped_path.is_file() else {}
    return {key for key, value in preset.items() if key != "defaults" and (key not in shipped or shipped[key] != value)}


def own_values(cfg: DictConfig, choices: dict[str, str]) -> DictConfig:
    """{group: {key: composed value}} for the keys the user's own presets of the chosen options set."""
    values = {}
    for group in SECTIONS:
        if group in choices and group in cfg:
            keys = own_keys(group, choices[group]) & set(cfg[group].keys())
            if keys:
                values[group] = {key: cfg[group][key] for key in sorted(keys)}
    return OmegaConf.create(values)


# ----- recurrent models -----------------------------------------------------------------------------------
def fit_sequences(cfg: DictConfig) -> None:
    """With a recurrent model, minibatches are whole sequences (see OnPolicyAgent's sequence_length): when
    agent.sequence_length is unset and the rollout's n_envs sequences don't split into agent.mini_batches,
    cut each env's rollout into the longest sequences that do (the fallbacks' minibatches of 64 transitions
    become one 64-step sequence each, as sb3-contrib's RecurrentPPO takes 64 consecutive steps)."""
    agent = cfg.agent
    if "mini_batches" not in agent or "sequence_length" not in agent or agent.sequence_length is not None:
        return
    if not any(layer.get("type") in ("lstm", "gru") for layer in cfg.model.get("layers") or []):
        return  # (rlexp.models.is_recurrent, without importing Keras before TensorFlow is set up)
    n_steps, n_envs, mini_batches = int(agent.n_steps), int(cfg.env.n_envs), int(agent.mini_batches)
    if mini_batches < 1 or (n_envs % mini_batches == 0):
        return
    fits = [length for length in range(n_steps, 0, -1) if n_steps % length == 0
            and (n_steps // length * n_envs) % mini_batches == 0]
    if fits:
        agent.sequence_length = fits[0]
