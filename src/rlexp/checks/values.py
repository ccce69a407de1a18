"""Every command-line value checked before work starts: one line naming the key and the fix."""
from __future__ import annotations

import math
from typing import Any, Mapping

from omegaconf import DictConfig, OmegaConf

from rlexp.errors import PLUS_OPTIONS, UserError

PROGRESS = ("auto", "bar", "log", "none")
PRECISIONS = ("auto", False, True, "float16", "bfloat16")
FALLBACKS = ("auto", "none", None)  # null: none
SECTIONS = {"run": "run.max_steps=1e5", "play": "play.episodes=3", "zoo": "zoo.rows=false"}
SEED_MAX = 2**32 - 1  # NumPy's legacy seeding (Keras' set_random_seed) takes seeds in [0, 2**32)
# make_envs' whole-number arguments: the least value each takes (max_episode_steps: null for the env's own limit)
ENV_WHOLE = {"n_envs": 1, "frame_stack": 1, "screen_size": 1, "noop_max": 0, "max_episode_steps": 1}
ENV_FLAGS = ("preprocess", "max_frame", "life_loss_terminal", "clip_rewards")
VECTORIZATIONS = ("auto", "sync", "async", "vector", "graph", "envpool")
FLAGS = {"zoo.rows": (True, False), "render": (True, False)}  # top-level switches: true or false only


def _one_of(value: Any, allowed: tuple) -> bool:
    """`value` is one of `allowed`, where true and false are only the booleans (not 1 and 0)."""
    return any(value is option if isinstance(option, bool) else value == option and not isinstance(value, bool)
               for option in allowed)


def _threads(key: str, value: Any) -> None:
    if value != "auto" and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise UserError(f"{key}={value!r} must be auto or a number of threads (0: all cores)")


def _number(key: str, value: Any, minimum: float | None = None, above: float | None = None,
            integer: bool = False, nullable: bool = False) -> float | None:
    """`value` as a number (YAML's 1e6 may arrive as a string), else one line naming `key`."""
    if value is None and nullable:
        return None
    kind = "an integer" if integer else "a number"
    try:
        if isinstance(value, bool):
            raise ValueError
        number = float(value)
        if integer and not number.is_integer():
            raise ValueError
    except (TypeError, ValueError):
        raise UserError(f"{key}={value!r} must be {kind}" + (" or null" if nullable else "")) from None
    if not math.isfinite(number):
        raise UserError(f"{key}={value!r} must be a finite number" + (" (null: none)" if nullable else ""))
    if minimum is not None and number < minimum:
        raise UserError(f"{key}={value!r} must be {kind} >= {minimum:g}")
    if above is not None and number <= above:
        raise UserError(f"{key}={value!r} must be {kind} > {above:g}")
    return number


def whole(key: str, value: Any, least: int, nullable: bool = False) -> int | None:
    """`value` as an int of at least `least` (1e3 and '1e3' too), else one line naming `key`."""
    if value is None and nullable:
        return None
    number = _number(key, value, integer=True, nullable=nullable)
    if number < least:
        raise UserError(f"{key}={value!r} must be at least {least}")
    return int(value) if isinstance(value, int) else int(number)


def check_seed(seed: Any, key: str = "seed") -> int | None:
    """A seed as an int in NumPy's range [0, 2**32), or None (no seed)."""
    if seed is None:
        return None
    _number(key, seed, integer=True)
    value = int(seed) if isinstance(seed, int) else int(float(seed))
    if not 0 <= value <= SEED_MAX:
        raise UserError(f"{key}={seed!r} is outside NumPy's seed range; use an integer from 0 to {SEED_MAX}")
    return value


def check_env_values(values: Mapping[str, Any], prefix: str = "env.") -> dict[str, Any]:
    """An env section's (or make_envs' arguments') counts as ints, flags as booleans, vectorization among its
    options; a one-line error naming the key otherwise. Keys that are absent are left out."""
    checked: dict[str, Any] = {}
    for key, least in ENV_WHOLE.items():
        if key in values:
            checked[key] = whole(f"{prefix}{key}", values[key], least, nullable=key == "max_episode_steps")
    for key in ENV_FLAGS:
        if key in values and not isinstance(values[key], bool):
            raise UserError(f"{prefix}{key}={values[key]!r} must be true or false")
    if "vectorization" in values and not _one_of(values["vectorization"], VECTORIZATIONS):
        raise UserError(f"{prefix}vectorization={values['vectorization']!r} must be one of "
                        f"{', '.join(VECTORIZATIONS)}")
    return checked


def check_fit_arguments(max_steps: Any, target_reward: Any, checkpoint_interval: Any, history_interval: Any) -> None:
    """`Agent.fit`'s arguments, checked as the run.* keys they mirror."""
    _number("run.max_steps", max_steps, above=0)
    _number("run.target_reward", target_reward, nullable=True)
    _number("run.checkpoint_interval", checkpoint_interval, minimum=0)
    _number("run.history_interval", history_interval, minimum=0)


def check_command(cfg: DictConfig) -> None:
    """Top-level values of this command line (not of a stored run config): fallback, the run/play sections, the
    switches (zoo.rows, +render: true or false) and the +options."""
    if not _one_of(cfg.get("fallback", "auto"), FALLBACKS):
        raise UserError(f"fallback={cfg.fallback!r} must be auto (RL Zoo's defaults for a pair without a tuned preset) "
                        "or none (or null: the agent preset's own values)")
    for section, example in SECTIONS.items():
        if not isinstance(cfg.get(section), DictConfig):
            raise UserError(f"{section}={cfg.get(section)!r}: {section} is a section of settings; set its keys "
                            f"instead, e.g. {example}")
    for key, allowed in FLAGS.items():
        value = OmegaConf.select(cfg, key, default=None)
        if value is not None and not _one_of(value, allowed):
            raise UserError(f"{'+' if key in PLUS_OPTIONS else ''}{key}={value!r} must be "
                            f"{' or '.join(str(option).lower() for option in allowed)}")
    check_plus_options()


def check_plus_options(overrides: list[str] | None = None) -> None:
    """A misspelt +option (`+resum=...`, `+video_dri=...`) is refused, naming the option it is close to: Hydra adds
    any key given with +, so the run would go on without it."""
    import difflib

    from rlexp.runs.dirs import task_overrides

    for override in task_overrides() if overrides is None else overrides:
        key, _, value = override.lstrip("+").partition("=")
        if not override.startswith("+") or "." in key or key in PLUS_OPTIONS:
            continue
        close = difflib.get_close_matches(key, PLUS_OPTIONS, n=1, cutoff=0.8)
        if close:
            raise UserError(f"+{key}: no such option; did you mean +{close[0]}={value}?")


def check_settings(cfg: DictConfig) -> None:
    """mode-independent values: seed, env.*, run.*, play.* by type and range."""
    check_seed(cfg.get("seed"))
    if isinstance(cfg.get("env"), DictConfig):
        check_env_values(cfg.env)
    run = cfg.run
    check_fit_arguments(run.max_steps, run.target_reward, run.checkpoint_interval, run.history_interval)
    _number("run.eval_episodes", run.eval_episodes, minimum=0, integer=True)
    _number("run.eval_interval", run.get("eval_interval", 0), minimum=0, integer=True)
    _number("run.keep_checkpoints", run.get("keep_checkpoints", 0), minimum=0, integer=True)
    if run.get("keep_checkpoints", 0) and not run.get("eval_interval", 0):
        raise UserError("run.keep_checkpoints keeps the checkpoints written at evaluations; "
                        "set run.eval_interval too (e.g. run.eval_interval=10000)")
    if run.get("eval_interval", 0) and not run.eval_episodes:
        raise UserError("run.eval_interval needs run.eval_episodes >= 1")
    if not _one_of(run.progress, PROGRESS):
        raise UserError(f"run.progress={run.progress!r} must be one of {', '.join(PROGRESS)}")
    if not _one_of(run.get("mixed_precision", False), PRECISIONS):
        raise UserError(f"run.mixed_precision={run.mixed_precision!r} must be auto, false, true, float16 or bfloat16")
    if not _one_of(run.get("eval_deterministic", "auto"), ("auto", True, False)):
        raise UserError(f"run.eval_deterministic={run.eval_deterministic!r} must be auto, true or false")
    if not _one_of(run.get("final_eval_deterministic"), (None, "auto", True, False)):
        raise UserError(f"run.final_eval_deterministic={run.final_eval_deterministic!r} must be null (as "
                        "run.eval_deterministic), auto, true or false")
    for key in ("tf_threads", "tf_inter_threads"):
        _threads(f"run.{key}", run.get(key, "auto"))
    from rlexp.runtime.compile_cache import cache_dir

    cache_dir(run.get("compile_cache", "auto"))  # one line for a value that is no folder
    play = cfg.play
    _number("play.episodes", play.episodes, minimum=1, integer=True)
    _number("play.frame_frequency", play.frame_frequency, minimum=1, integer=True)
    _number("play.frame_delay", play.frame_delay, minimum=0)
    _number("play.fps", play.fps, minimum=1, integer=True)
