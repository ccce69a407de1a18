"""Where presets come from: Hydra's config sources (rlexp's shipped presets, Hydra's, the user's own from
--config-dir), the file Hydra reads for <group>/<name>.yaml, and the keys the user's own presets set."""
from __future__ import annotations

import importlib.resources
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

SECTIONS = ("agent", "env", "buffer", "model", "run")
SHIPPED = ("rlexp.conf", "hydra.conf")  # the config sources of rlexp's own presets and Hydra's


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


def hydra_choices() -> dict[str, str]:
    from rlexp.runs.dirs import choices

    return choices()


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


def preset_values(group: str, name: str) -> dict[str, Any]:
    """<group>/<name>.yaml's values as Hydra composes that preset alone: each `defaults` entry, then its own."""
    return {key: value for key, (value, _) in preset_sources(group, name).items()}


def preset_sources(group: str, name: str, seen: frozenset[str] = frozenset()) -> dict[str, tuple[Any, Any]]:
    """{key: (its value, the file that sets it)} of <group>/<name>.yaml composed alone, as `preset_values`."""
    path, _ = hydra_preset(group, name)
    if path is None or f"{group}/{name}" in seen:
        return {}
    preset = OmegaConf.to_container(OmegaConf.load(path))
    if not isinstance(preset, dict):
        return {}
    defaults = preset.get("defaults")
    entries = list(defaults) if isinstance(defaults, list) else []
    entries += [] if "_self_" in entries else ["_self_"]
    values: dict[str, tuple[Any, Any]] = {}
    for entry in entries:
        if entry == "_self_":
            values.update({k: (v, path) for k, v in preset.items() if k != "defaults"})
        elif (parent := parent_preset(group, entry)) is not None:
            values.update(preset_sources(*parent, seen | {f"{group}/{name}"}))
    return values


def shipped_file(group: str, name: str) -> Any:
    """rlexp's own <group>/<name>.yaml (which may not exist)."""
    return importlib.resources.files("rlexp.conf") / group / f"{name}.yaml"


def edited(group: str, name: str) -> bool:
    """Whether <group>/<name>.yaml is the user's own and not an unchanged copy of rlexp's preset of that name (as
    `mode=init` makes): such a copy is rlexp's preset, whoever holds it."""
    path, users = hydra_preset(group, name)
    if not users:
        return False
    shipped = shipped_file(group, name)
    return not shipped.is_file() or OmegaConf.to_container(OmegaConf.load(path)) != OmegaConf.to_container(
        OmegaConf.load(shipped))


def changed_keys(group: str, name: str, preset: dict) -> set[str]:
    """Keys of `preset` absent from, or set differently in, the shipped <group>/<name>.yaml."""
    shipped_path = shipped_file(group, name)
    shipped = OmegaConf.to_container(OmegaConf.load(shipped_path)) if shipped_path.is_file() else {}
    return {key for key, value in preset.items() if key != "defaults" and (key not in shipped or shipped[key] != value)}


def env_preset_for_id(env_id: str, config_dir: str | None = None) -> str | None:
    """The env preset whose own file sets `id: <env_id>` (your own in `config_dir` first, then rlexp's shipped ones
    that yours do not replace; by name where several do), read without Hydra; None where there is none."""
    import yaml

    folders: list[Any] = [Path(config_dir) / "env"] if config_dir else []
    folders.append(importlib.resources.files("rlexp.conf") / "env")
    seen: set[str] = set()
    for folder in folders:
        if not folder.is_dir():
            continue
        for path in sorted((p for p in folder.iterdir() if p.name.endswith(".yaml")), key=lambda p: p.name):
            name = path.name[:-len(".yaml")]
            if name in seen:
                continue
            seen.add(name)
            try:
                preset = yaml.safe_load(path.read_text())
            except (OSError, yaml.YAMLError):
                continue
            if isinstance(preset, dict) and str(preset.get("id")) == env_id:
                return name
    return None


def own_values(cfg: DictConfig, choices: dict[str, str]) -> DictConfig:
    """{group: {key: composed value}} for the keys the user's own presets of the chosen options set."""
    values = {}
    for group in SECTIONS:
        if group in choices and group in cfg:
            keys = own_keys(group, choices[group]) & set(cfg[group].keys())
            if keys:
                values[group] = {key: cfg[group][key] for key in sorted(keys)}
    return OmegaConf.create(values)
