"""RL Zoo's row for a pair merged into the run's config (over the agent, env, model and buffer presets, as a
tuned preset is): which row a run trains (shipped, or the user's zoo.file / zoo.row), and the merge itself."""
from __future__ import annotations

import importlib.resources
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from rlexp.presets.merge import apply_overrides, fit_sequences, keep_own, model_is_its_own
from rlexp.presets.sources import SECTIONS
from rlexp.presets.zoo import ZooRow, ZooRowError, row_for, translate


def zoo_row(agent: str, cfg: DictConfig, shipped_rows: bool = False) -> tuple[ZooRow | None, str]:
    """(the RL Zoo row the run trains, or None; why a shipped row is not used, or the shipped `default` row RL Zoo
    would train where rlexp's fallback does). A row of the user's own file
    (zoo.file / zoo.row) that is missing or that rlexp cannot honour stops the run in one line; a shipped one is
    said and the fallback takes over. zoo.rows=false turns the shipped rows off, except under a tuned preset set
    over its row (`shipped_rows`)."""
    zoo = cfg.get("zoo") or {}
    users = bool(zoo.get("file") or zoo.get("row"))
    if not zoo.get("rows", True) and not users and not shipped_rows:
        return None, ""
    row = row_for(agent, cfg)
    if row is None:
        from rlexp.presets.zoo import load_file, zoo_file_of
        from rlexp.presets.zoo.rows import default_row

        algo = zoo_file_of(agent, cfg.get("model"))
        if users:
            rows, name, _ = load_file(algo or agent, zoo.get("file"))
            raise ZooRowError(f"zoo.file={zoo.get('file')}: {name} has no row for {cfg.env.id}; it has "
                              f"{', '.join(sorted(rows))} (zoo.row=<name> trains one of them on this env; a "
                              "`default` row, as in RL Zoo, trains the envs without one)")
        default = default_row(algo) if algo and not shipped_rows else None  # RL Zoo's; rlexp trains its fallback
        return None, f" (RL Zoo trains {default} here, SB3's defaults; zoo.row=default trains it)" if default else ""
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

    from rlexp.envs.spaces import is_atari

    is_atari(env_id)  # (importing rlexp.envs.spaces registered ale-py's games)
    from rlexp.envs.make import package_of

    package = package_of(env_id)
    if package is not None:  # (MiniGrid's ids: registered by importing it, where it is installed)
        try:
            __import__(package[0])
        except ImportError:
            return False
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
    or it is your own edited preset. A key your own presets set keeps your value over a shipped row, said in a line
    (`keep_own`)."""
    sections = translate(row)
    model = sections.pop("model")
    # run.*: the row's n_timesteps only where nothing but config.yaml set the length (a config group of yours, a
    # tuned preset and the command line win); the stop rule is rlexp's (tuned presets set it)
    steps = sections.pop("run")["max_steps"]
    if float(cfg.run.max_steps) == default_max_steps():
        sections["run"] = {"max_steps": steps}
    chosen = {o.lstrip("+~").split("=", 1)[0] for o in overrides}
    row_buffer = sections.get("buffer", {})
    if "buffer" in chosen:  # buffer=prioritized etc.: the row's sizes, the chosen buffer's class (and its options)
        row_buffer.pop("_target_", None)
        for key in set(row_buffer) - set(cfg.buffer):
            row_buffer.pop(key)
    elif row_buffer.get("_target_") and "buffer" in cfg:  # the row's class brings its own options (HER's)
        OmegaConf.set_struct(cfg.buffer, False)
    if sections["env"].get("wrappers") and cfg.env.get("wrappers"):  # the env preset's wrappers first
        sections["env"]["wrappers"] = [*OmegaConf.to_container(cfg.env.wrappers), *sections["env"]["wrappers"]]
    above = {key: over[key] for key in SECTIONS if over is not None and key in over and key != "run"}  # (composed)
    merged = OmegaConf.merge(cfg, sections, {key: value for key, value in above.items() if key != "model"})
    with open_dict(merged):
        if "model" not in chosen and not model_is_its_own(cfg, choices):  # model=: the chosen network
            merged.model = OmegaConf.merge(OmegaConf.create(model), above.get("model", {}))
    by_row = {group: {key: value for key, value in keys.items() if key not in (above.get(group) or {})}
              for group, keys in sections.items()}  # (what `over` sets again, its own line names)
    keep_own(merged, by_row, choices, f"RL Zoo's row {row.file} {row.key}",  # a row you chose or wrote wins
             users=row.version == "your own file" or bool((cfg.get("zoo") or {}).get("row")), overrides=overrides)
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
    if row.algo not in ("dqn", "qrdqn") or "agent.epsilon_decay_steps" in given:
        return None
    from rlexp.presets.zoo import SB3_DEFAULTS

    fraction = float({**SB3_DEFAULTS[row.algo], **row.values}["exploration_fraction"])
    return int(fraction * float(cfg.run.max_steps))
