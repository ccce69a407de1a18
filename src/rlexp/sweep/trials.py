"""A study's trials as the sweep marks them: its first trials (the baseline, enqueued values), interrupted ones
(run again, not counted), the steps a running one holds; the seeds' aggregate and the sampler's per-trial seed."""
from __future__ import annotations

import json
import zlib
from typing import Any, Mapping

import optuna

RESERVED_ATTR = "reserved_steps"   # a running trial's env steps at its full length, held against max_env_steps
INTERRUPTED_ATTR = "interrupted"   # a trial a stopped or killed sweep left unfinished: not counted, run again
REFERENCE_ATTR = "baseline"  # the baseline trial: never pruned (its scores still reach the pruner's rungs)
FIRST_ATTR = "first_trial"  # a baseline's or enqueued trial: the values it was asked to train (first_key)


def first_key(values: Mapping[str, Any]) -> str:
    """One of the study's first trials, named by its values (so that a continued study knows which it has)."""
    return json.dumps({str(k): v for k, v in values.items()}, sort_keys=True, default=str)


def counted_trials(study: optuna.Study, trials: list | None = None) -> list[optuna.trial.FrozenTrial]:
    """The trials n_trials counts: all but those a stopped or killed sweep left unfinished (run again)."""
    trials = study.get_trials(deepcopy=False) if trials is None else trials
    return [t for t in trials if not t.user_attrs.get(INTERRUPTED_ATTR)]


def aggregate(values: list[float], how: str) -> float:
    """The trial's objective from its seeds' objectives: their mean, or rliable's interquartile mean."""
    if how == "iqm":
        from rlexp.analysis.stats import iqm

        return float(iqm(values))
    return float(sum(values) / len(values))


def trial_seed(study_name: str, seed: int, number: int) -> int:
    """The sampler's seed for a trial: a hash of the study's name, the sweep's seed and the trial's number."""
    return zlib.crc32(f"{study_name}:{seed}:{number}".encode())


def reseed(sampler: optuna.samplers.BaseSampler, seed: int) -> None:
    """Reseed the sampler (and the random sampler it starts with) in place."""
    for part in (sampler, getattr(sampler, "_random_sampler", None), getattr(sampler, "_independent_sampler", None)):
        for attr in ("_rng", "_cma_rng"):
            state = getattr(part, attr, None)
            state = getattr(state, "rng", state)  # Optuna's LazyRandomState wraps a NumPy RandomState
            if hasattr(state, "seed"):
                state.seed(seed % 2**32)
