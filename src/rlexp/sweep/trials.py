"""A study's trials as the sweep marks them: its first trials (the baseline, enqueued values), interrupted or
refused ones (not counted), the steps a running one holds; the seeds' aggregate and the sampler's per-trial seed."""
from __future__ import annotations

import json
import zlib
from typing import Any, Mapping

import optuna
from optuna.trial import TrialState

from rlexp.sweep.report import STEPS_ATTR

RESERVED_ATTR = "reserved_steps"   # a running trial's env steps at its full length, held against max_env_steps
CEILING_ATTR = "most_steps"        # the most env steps each of a trial's seeds can train (declared before training)
REFUSED_ATTR = "refused"           # a trial the step budget could not hold at its most steps: never trained
INTERRUPTED_ATTR = "interrupted"   # a trial a stopped or killed sweep left unfinished: not counted, run again
REFERENCE_ATTR = "baseline"  # the baseline trial: never pruned (its scores still reach the pruner's rungs)
FIRST_ATTR = "first_trial"  # a baseline's or enqueued trial: the values it was asked to train (first_key)
MARKED_ATTR = "marks_first_trials"  # a study's: its first trials carry FIRST_ATTR (studies made before that don't)


def first_key(values: Mapping[str, Any]) -> str:
    """One of the study's first trials, named by its values (so that a continued study knows which it has)."""
    return json.dumps({str(k): v for k, v in values.items()}, sort_keys=True, default=str)


def counted_trials(study: optuna.Study | None, trials: list | None = None) -> list[optuna.trial.FrozenTrial]:
    """The trials n_trials counts: all but those a stopped or killed sweep left unfinished (run again) and those the
    step budget refused before they trained."""
    trials = study.get_trials(deepcopy=False) if trials is None else trials
    return [t for t in trials if not (t.user_attrs.get(INTERRUPTED_ATTR) or t.user_attrs.get(REFUSED_ATTR))]


def steps_held(trials: list[optuna.trial.FrozenTrial]) -> int:
    """The env steps `trials` hold against max_env_steps: a running one its reservation (its most steps), a
    finished one what it trained."""
    return sum(int(t.user_attrs.get(RESERVED_ATTR if t.state == TrialState.RUNNING else STEPS_ATTR, 0))
               for t in trials)


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
