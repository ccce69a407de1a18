"""hydra.sweeper.* checked and normalised before anything is written: a wrong setting is one line naming the key
and the fix; the sampler made from its preset."""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import optuna

from rlexp.errors import SweepError


def one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return (text[0] if text else type(error).__name__)[:300]


OBJECTIVES = ("final_eval", "mean_last_evals", "auc")
WHOLE = {"n_trials": 1, "n_jobs": 1, "seeds_per_trial": 1, "trials_per_job": 1, "last_evals": 1, "reports": 1, "warmup_trials": 0,
         "heartbeat_interval": 1, "grace_period": 1}  # whole numbers: their least value
CHOICES = {"direction": ("maximize", "minimize"), "objective": OBJECTIVES, "aggregate": ("mean", "iqm"),
           "pruner": ("median", "none", "halving", "hyperband")}
SETTINGS = (*WHOLE, *CHOICES, "population", "warmup_steps", "sampler", "directions", "confirm", "storage", "study_name", "max_failure_rate",
            "params", "baseline", "enqueue", "max_env_steps", "custom_search_space")
SAMPLER_WHOLE = {"n_startup_trials": 0, "population_size": 2}
SAMPLERS = "hydra/sweeper/sampler=tpe|random|grid|cmaes|nsgaii|nsgaiii|gp|qmc"
SAMPLER_ALIASES = {  # hydra-optuna-sweeper's own factories, as its configs name them
    "hydra_plugins.hydra_optuna_sweeper._impl.create_nsgaii_sampler": "optuna.samplers.NSGAIISampler",
    "hydra_plugins.hydra_optuna_sweeper._impl.create_nsgaiii_sampler": "optuna.samplers.NSGAIIISampler"}


def _shown(value: Any) -> str:
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def whole_number(key: str, value: Any, least: int) -> int:
    """`value` as an int of at least `least` (5, 5.0 and 1e4 too), else one line naming hydra.sweeper.<key>."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
            and float(value).is_integer() and value >= least:
        return int(value)
    raise SweepError(f"hydra.sweeper.{key}={_shown(value)}: use a whole number of {least} or more")


def check_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """hydra.sweeper.* checked and normalised (whole numbers as ints, the sampler made), before anything is
    written; a wrong one is one line naming the key and the fix."""
    s = dict(settings)
    s.pop("_target_", None)  # rlexp's class, or hydra-optuna-sweeper's that stands for it
    if isinstance(s.get("direction"), (list, tuple)):  # hydra-optuna-sweeper's two objectives: as directions
        if s.get("directions") is not None:
            raise SweepError("hydra.sweeper.direction is a list and hydra.sweeper.directions is set: keep one")
        s["directions"], s["direction"] = list(s["direction"]), (list(s["direction"]) or ["maximize"])[0]
    unknown = sorted(set(s) - set(SETTINGS))
    if unknown:
        raise SweepError(f"hydra.sweeper.{unknown[0]} is not a setting of rlexp's sweeper; use one of "
                         f"{', '.join(sorted(SETTINGS))} (docs/tuning.md)")
    s.setdefault("trials_per_job", 1)
    for key, least in WHOLE.items():
        s[key] = whole_number(key, s.get(key), least)
    if s["grace_period"] <= s["heartbeat_interval"]:
        raise SweepError(f"hydra.sweeper.grace_period={s['grace_period']}: use more than hydra.sweeper."
                         f"heartbeat_interval ({s['heartbeat_interval']}), e.g. {s['heartbeat_interval'] * 6}")
    s["pruner"] = "none" if s.get("pruner") is None else s["pruner"]
    for key, options in CHOICES.items():
        if s.get(key) not in options:
            raise SweepError(f"hydra.sweeper.{key}={_shown(s.get(key))} is unknown; use {' | '.join(options)}")
    s["max_failure_rate"] = check_rate(s.get("max_failure_rate"))
    s["population"] = s.get("population", False)
    if s["population"] not in (True, False):
        raise SweepError(f"hydra.sweeper.population={_shown(s['population'])} is unknown; use true | false")
    s["warmup_steps"] = None if s.get("warmup_steps") in (None, "auto") else whole_number(
        "warmup_steps", s["warmup_steps"], 0)
    if s.get("max_env_steps") is not None:
        s["max_env_steps"] = whole_number("max_env_steps", s["max_env_steps"], 1)
    s["directions"] = check_directions(s.get("directions"))
    s["confirm"] = check_confirm(s.get("confirm"))
    s["study_name"] = check_names(s.get("storage"), s.get("study_name"))
    if s.get("params") is not None and not isinstance(s["params"], Mapping):
        raise SweepError(f"hydra.sweeper.params={_shown(s['params'])}: use a mapping of keys to sweeps, e.g. "
                         "{agent.lr: 'tag(log,interval(1e-5,1e-2))', agent.n_steps: 'choice(16,32)'}")
    if s.get("baseline") is not None and not isinstance(s["baseline"], Mapping):
        raise SweepError(f"hydra.sweeper.baseline={_shown(s['baseline'])}: use a mapping of searched keys to the "
                         "values the first trial trains, e.g. {agent.lr: 3e-4, agent.n_steps: 64}")
    s["enqueue"] = check_enqueue(s.get("enqueue"))
    sampler = s.get("sampler")
    s["sampler_seed"] = sampler.get("seed") if isinstance(sampler, Mapping) else None  # null: the run's seed
    s["sampler"] = make_sampler(sampler)
    s["custom_search_space"] = check_custom_space(s.get("custom_search_space"))
    return s


def check_enqueue(entries: Any) -> list[dict[str, Any]]:
    """hydra.sweeper.enqueue: a list of mappings (configurations a new study trains after the baseline)."""
    if entries is None:
        return []
    if not isinstance(entries, Sequence) or isinstance(entries, str) or not all(
            isinstance(entry, Mapping) for entry in entries):
        raise SweepError(f"hydra.sweeper.enqueue={_shown(entries)}: use a list of mappings of searched keys to "
                         "values, one a trial, e.g. [{agent.lr: 3e-4, env.n_envs: 16}, {agent.lr: 1e-3}]")
    return [dict(entry) for entry in entries]


def check_custom_space(path: Any):
    """hydra.sweeper.custom_search_space: the function it names (config, trial) -> None, or None."""
    if path is None:
        return None
    import importlib

    module, _, name = str(path).rpartition(".")
    try:
        function = getattr(importlib.import_module(module), name)
        if not callable(function):
            raise TypeError(f"{path} is not a function")
        return function
    except Exception as e:  # noqa: BLE001 - a module or function that isn't there
        raise SweepError(f"hydra.sweeper.custom_search_space={path}: {one_line(e.__cause__ or e)}; name a function "
                         "f(config, trial) as module.function, importable from the directory you run in") from None


def check_rate(rate: Any) -> float:
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 <= rate <= 1:
        raise SweepError(f"hydra.sweeper.max_failure_rate={_shown(rate)}: use a fraction from 0 to 1 (0.5: stop "
                         "once more than half of the trials failed)")
    return float(rate)


def check_names(storage: Any, name: Any) -> str | None:
    """The study's name (also its folder's; null: made from the agent, env and the sweep's hash) and its
    storage's URL, which make_storage opens."""
    if storage is not None and (not isinstance(storage, str) or not storage.strip()):
        raise SweepError(f"hydra.sweeper.storage={_shown(storage)}: use sqlite:///path/optuna.db, "
                         "journal:///path/study.log, postgresql://user@host/db or null (<sweep dir>/optuna.db)")
    if name is None:
        return None
    text = str(name)
    if isinstance(name, bool) or not isinstance(name, (str, int)) or not text.strip() or text in (".", "..") \
            or "/" in text or "\\" in text:
        raise SweepError(f"hydra.sweeper.study_name={_shown(name)}: use a name without / (the study's folder is "
                         "multirun/<study_name>)")
    return text


def check_directions(directions: Any) -> list[str] | None:
    if directions is None:
        return None
    shape_ok = isinstance(directions, (list, tuple)) and 1 <= len(directions) <= 2
    if not shape_ok or directions[0] not in ("maximize", "minimize") or list(directions)[1:] not in ([], ["minimize"]):
        raise SweepError(f"hydra.sweeper.directions={_shown(directions)}: use [maximize,minimize] (the objective's "
                         "direction, then the training time's), or hydra.sweeper.direction for one objective")
    return [str(d) for d in directions]


def check_confirm(confirm: Any) -> dict[str, int]:
    """hydra.sweeper.confirm: null (no confirmation round) or {top_k: 3, seeds: 5}."""
    if confirm is None or confirm == {}:
        return {}
    fix = "use {top_k: 3, seeds: 5} (the top_k configurations re-run on that many fresh seeds), or null"
    if not isinstance(confirm, Mapping) or set(confirm) - {"top_k", "seeds"}:
        raise SweepError(f"hydra.sweeper.confirm={_shown(confirm)}: {fix}")
    return {key: whole_number(f"confirm.{key}", confirm.get(key, default), 1)
            for key, default in (("top_k", 3), ("seeds", 5))}


def make_sampler(sampler: Any):
    """The Optuna sampler of hydra.sweeper.sampler ({_target_: ..., seed: ..., any of its arguments}; null ones
    leave Optuna's defaults); the grid sampler as a partial that the sweep gives its search space."""
    if isinstance(sampler, optuna.samplers.BaseSampler):
        return sampler
    if not isinstance(sampler, Mapping) or not isinstance(sampler.get("_target_"), str):
        raise SweepError(f"hydra.sweeper.sampler={_shown(sampler)}: pick one with {SAMPLERS}")
    arguments = {k: v for k, v in sampler.items() if v is not None or k == "seed"}
    target = SAMPLER_ALIASES.get(arguments.pop("_target_"), sampler["_target_"])
    partial = bool(arguments.pop("_partial_", False))
    seed = arguments.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise SweepError(f"hydra.sweeper.sampler.seed={_shown(seed)}: use a whole number, or null (the run's seed)")
    if target.rsplit(".", 1)[-1] == "MOTPESampler":
        raise SweepError("hydra/sweeper/sampler=motpe: Optuna 4 removed MOTPESampler; use hydra/sweeper/sampler=tpe "
                         "(TPESampler handles two objectives) or nsgaii")
    for key, least in SAMPLER_WHOLE.items():
        if key in arguments:
            arguments[key] = whole_number(f"sampler.{key}", arguments[key], least)
    for key in ("multivariate", "constant_liar", "group"):
        if key in arguments and not isinstance(arguments[key], bool):
            raise SweepError(f"hydra.sweeper.sampler.{key}={_shown(arguments[key])}: use true or false")
    from hydra.utils import get_class

    try:
        cls = get_class(target)
    except Exception as e:  # noqa: BLE001 - not an importable class
        raise SweepError(f"hydra.sweeper.sampler._target_={target}: {one_line(e.__cause__ or e)}; pick a sampler "
                         f"with {SAMPLERS}") from None
    import inspect

    accepted = [name for name in inspect.signature(cls).parameters if name not in ("self", "search_space")]
    wrong = sorted(set(arguments) - set(accepted))
    if wrong:
        raise SweepError(f"hydra.sweeper.sampler.{wrong[0]} is not an argument of {target}; use one of "
                         f"{', '.join(accepted)}")
    from hydra.utils import instantiate

    import inspect

    trusted = {"_execution_whitelist_": ["optuna.*"]} if "_execution_whitelist_" in inspect.signature(
        instantiate).parameters else {}  # Hydra 1.4: a sampler's own parts come from Optuna
    arguments = {k: instantiate(v, **trusted) if isinstance(v, Mapping) and "_target_" in v else v
                 for k, v in arguments.items()}
    if "reference_points" in arguments:  # NSGA-III: a list of points in YAML, an array for Optuna
        import numpy as np

        arguments["reference_points"] = np.asarray(arguments["reference_points"], dtype=float)
    if partial:
        import functools

        return functools.partial(cls, **arguments)
    try:
        return cls(**arguments)
    except Exception as e:  # noqa: BLE001 - a value the sampler refuses
        raise SweepError(f"hydra.sweeper.sampler ({target}): {type(e).__name__}: {one_line(e)}; fix its "
                         f"arguments (Optuna's {target.rsplit('.', 1)[-1]}) or pick another with {SAMPLERS}") from None
