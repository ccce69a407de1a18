"""User-facing errors: one line, exit code 2, no traceback."""
from __future__ import annotations

import difflib
import re
from typing import Any

import yaml
from hydra.errors import (CompactHydraException, ConfigCompositionException, MissingConfigException,
                          OverrideParseException)
from omegaconf import DictConfig, ValueNode


class UserError(Exception):
    """A mistake in the user's input; the message says what is wrong and how to fix it."""


class SweepError(UserError, CompactHydraException):
    """A mistake in a sweep's command (search space, study); Hydra prints it as one line."""


class RunFailed(Exception):
    """A run that could not go on (a write failed: disk full, permissions); the message says what is left on disk
    and how to continue."""


class TrialFailed(Exception):
    """A sweep trial that ended with an error; the message is the one line the sweep records."""


class Started:
    """Set once the command has got past parsing its input (the task, or a sweep's first trial), so that
    an exit code 1 from then on is a failure of the run and not a mistake in the command."""

    value = False


# other libraries' names for rlexp's settings (Stable-Baselines3, RL Zoo)
KEY_ALIASES = {"learning_rate": "agent.lr", "discount": "agent.gamma", "gae_lambda": "agent.lam",
               "n_epochs": "agent.ppo_epochs", "ent_coef": "agent.entropy_coef", "vf_coef": "agent.value_loss_coef",
               "max_grad_norm": "agent.grad_norm", "clip_range": "agent.clip_norm",
               "target_update_interval": "agent.target_sync_steps", "exploration_final_eps": "agent.epsilon_end",
               "exploration_initial_eps": "agent.epsilon_start", "target_policy_noise": "agent.policy_noise_coef",
               "target_noise_clip": "agent.noise_clip", "buffer_size": "buffer.max_size",
               "learning_starts": "buffer.initial_size", "batch_size": "buffer.batch_size",
               "n_timesteps": "run.max_steps", "total_timesteps": "run.max_steps"}


# options the config holds only once given, with a + (`+resume=<run dir>`, `+video_dir=videos/`)
PLUS_OPTIONS = ("resume", "checkpoint", "init_from", "video_dir", "frame_dir", "render", "demo_dir", "runs", "output",
                "gamma", "dir")


def hydra_error_line(error: Exception) -> str | None:
    """One line for a Hydra error about the command line (an unknown preset, key or override syntax), naming
    what is wrong and the closest valid choice; None for other errors."""
    if isinstance(error, MissingConfigException) and "/" in str(error.missing_cfg_file or "") \
            and error.options is not None:
        return _missing_preset(error.missing_cfg_file, list(error.options), str(error))
    if isinstance(error, ConfigCompositionException):
        text = str(error)
        unknown = re.match(r"Could not override '([^']+)'", text)
        if unknown and error.__cause__ is not None and getattr(error.__cause__, "parent_node", None) is not None:
            value = re.search(r"use \+[^=\s]+=(.*)$", text, re.MULTILINE)
            return _unknown_key(unknown.group(1), value.group(1) if value else "...", error.__cause__)
        group = re.match(r"Could not override '([^']+)'\. No match in the defaults list", text)
        append = re.search(r"use (\+\S+)\s*$", text)
        if group and append:
            given = append.group(1)
            return f"{given[1:]}: {group.group(1)} is a config group without a default; add it with {given}"
        exists = re.match(r"Could not append to config\. An item is already at '([^']+)'", text)
        if exists:
            plain = re.search(r"remove \+ prefix: '([^']+)'", text)
            return (f"+{exists.group(1)}: {exists.group(1)} is a setting already; set it without the +"
                    + (f": {plain.group(1)}" if plain else ""))
        cause = f": {_first_line(error.__cause__)}" if error.__cause__ is not None else ""
        return f"{_first_line(error)}{cause}"
    if isinstance(error, yaml.YAMLError):
        return yaml_error_line(error)
    if isinstance(error, OverrideParseException):
        docs = re.search(r"https://\S+", str(error))
        return (f"can't read an override: {_first_line(error)}; write group=option or key=value, quoting values "
                f"with spaces or brackets ('key=[1, 2]')" + (f" (syntax: {docs.group(0)})" if docs else ""))
    return None


OUTPUT_DIR_KEYS = ("hydra.run.dir", "hydra.sweep.dir")


def output_dir_error(error: OSError, args: list[str]) -> str:
    """One line for an output dir that Hydra could not make before the task started, naming the setting given."""
    given = next((arg for arg in args if arg.split("=", 1)[0].lstrip("+") in OUTPUT_DIR_KEYS), None)
    return (f"{given + ': ' if given else ''}can't make {error.filename or 'the output directory'} "
            f"({error.strerror or error}); pick a directory you can write to")


def yaml_error_line(error: yaml.YAMLError) -> str:
    """A preset file that is not valid YAML: where, and what the parser expected."""
    mark = getattr(error, "problem_mark", None)
    where = f"{mark.name}, line {mark.line + 1}, column {mark.column + 1}" if mark else "a preset"
    what = "; ".join(str(part) for part in (getattr(error, "context", None), getattr(error, "problem", None)) if part)
    return f"{where}: not valid YAML ({what or _first_line(error)}); fix the file"


def _first_line(error: BaseException) -> str:
    return next((line.strip() for line in str(error).splitlines() if line.strip()), type(error).__name__)


def _missing_preset(missing: str, options: list[str], text: str) -> str:
    """agent=ppp: the group, the closest options and all of them."""
    group, _, name = missing.rpartition("/")
    where = re.match(r"In '([^']+)'", text)
    source = where.group(1) if where else "config"
    what = f"{group}={name}" if source == "config" else f"{source}.yaml's defaults: {group}/{name}"
    close = difflib.get_close_matches(name, options, n=3, cutoff=0.5)
    hint = f"did you mean {' or '.join(f'{group}={c}' for c in close)}? " if close else ""
    return f"{what}: Could not find '{missing}' (no such preset); {hint}{group} presets: {', '.join(options)}"


def _unknown_key(key: str, value: str, cause: Any) -> str:
    """agent.learning_rate=1e-3: the closest existing key (a sibling, a known alias, the same name in another
    section), or at the top level an option given without its + (video_dir=videos/: +video_dir=videos/); a
    free-form mapping such as env.kwargs takes new keys with +."""
    failed = str(getattr(cause, "full_key", "") or key)
    rest = key[len(failed):] if key.startswith(failed) else ""
    parent, _, leaf = failed.rpartition(".")
    siblings = [str(k) for k in cause.parent_node.keys()]
    if not siblings:
        return f"{key}: {parent or 'the config'} has no key {leaf!r} yet; add it with +{key}={value}"
    root = _root(cause.parent_node)
    prefix = f"{parent}." if parent else ""
    plus = [] if parent else [f"+{c}" for c in ([leaf] if leaf in PLUS_OPTIONS else _close(leaf, list(PLUS_OPTIONS)))]
    suggestions = plus if leaf in PLUS_OPTIONS else plus + [f"{prefix}{c}" for c in _close(leaf, siblings)]
    alias = KEY_ALIASES.get(leaf.lower())
    if alias and _has_key(root, alias) and alias not in suggestions:
        suggestions.insert(0, alias)
    if not suggestions:
        suggestions = [f"{section}.{leaf}" for section in ("agent", "buffer", "env", "model", "run", "play")
                       if section != parent and _has_key(root, f"{section}.{leaf}")]
    if suggestions:
        options = " or ".join(f"{s}{rest}={value}" for s in suggestions[:3])
        return f"{key}: no such setting; did you mean {options}?"
    return (f"{key}: no such setting; {parent or 'the config'}'s keys are "
            f"{', '.join(s for s in siblings if not s.startswith('_'))}")


def value_as_section(key: str, config: DictConfig) -> str | None:
    """`agent.lr.x=3` where agent.lr is a value in `config`: the line that says so (Hydra would replace the value
    by an empty section and report x as missing); None when no part of the key before its last is a value."""
    node: Any = config
    parts = key.split(".")
    for depth, part in enumerate(parts[:-1], 1):
        if not isinstance(node, DictConfig) or part not in node.keys():
            return None
        node = node._get_node(part)
        if isinstance(node, ValueNode) and not node._is_none() and not node._is_interpolation():
            parent = ".".join(parts[:depth])
            return f"{key}: {parent} is a value, not a section; set it with {parent}=<value>"
    return None


def _close(word: str, candidates: list[str]) -> list[str]:
    """difflib's closest names, then names spelt by the word's initials (learning_rate -> lr)."""
    close = difflib.get_close_matches(word.lower(), candidates, n=3, cutoff=0.6)
    initials = "".join(part[0] for part in word.lower().split("_") if part)
    if len(initials) > 1 and initials in candidates and initials not in close:
        close.append(initials)
    return close


def _root(node: Any) -> Any:
    while node._get_parent() is not None:
        node = node._get_parent()
    return node


def _has_key(root: Any, dotted: str) -> bool:
    """Whether the config holds `dotted` (without resolving any value)."""
    node = root
    for part in dotted.split("."):
        if not isinstance(node, DictConfig) or part not in node.keys():
            return False
        node = node._get_node(part)
    return True
