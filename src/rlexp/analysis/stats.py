"""Seed statistics with rliable (Agarwal et al., 2021): interquartile mean, optimality gap, probability of
improvement and their stratified-bootstrap confidence intervals."""
from __future__ import annotations

import logging
import warnings
from typing import Callable, Mapping, Sequence

import numpy as np

REPS = 2000       # bootstrap resamples
CONFIDENCE = 0.95


def _rliable():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from rliable import library, metrics
    return library, metrics


def _estimate(scores: dict, func: Callable, seed: int):
    """rliable's stratified bootstrap, quietly (it logs a line per group; arch warns about RandomState)."""
    library, _ = _rliable()
    logging.disable(logging.INFO)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return library.get_interval_estimates(scores, func, reps=REPS, confidence_interval_size=CONFIDENCE,
                                                  random_state=np.random.RandomState(seed))
    finally:
        logging.disable(logging.NOTSET)


def iqm(values: Sequence[float]) -> float:
    """rliable's interquartile mean: the mean of the middle 50% of the values."""
    _, metrics = _rliable()
    return float(metrics.aggregate_iqm(np.asarray(values, dtype=float)))



def _aggregates() -> dict[str, Callable[[np.ndarray], float]]:
    _, metrics = _rliable()
    return {"mean": metrics.aggregate_mean, "median": metrics.aggregate_median, "iqm": metrics.aggregate_iqm}


def interval_estimates(scores: Mapping[str, Sequence[float] | np.ndarray], aggregate: str = "iqm",
                       seed: int = 0) -> dict[str, tuple[float, float, float]]:
    """{name: (point, low, high)}: an aggregate over seeds (rows) and tasks (columns) with its 95% stratified
    bootstrap interval. A 1-D sequence is one task."""
    func = _aggregates()[aggregate]
    matrices = {k: np.asarray(v, dtype=float).reshape(len(v), -1) for k, v in scores.items()}
    points, intervals = _estimate(matrices, lambda x: np.array([func(x)]), seed)
    return {k: (float(points[k][0]), float(intervals[k][0, 0]), float(intervals[k][1, 0])) for k in matrices}


def group_statistics(scores: Mapping[str, np.ndarray], gamma: float, seed: int = 0) -> dict[str, dict[str, tuple]]:
    """{group: {iqm, mean, optimality_gap: (point, low, high)}} of normalised final scores (seeds x tasks);
    the optimality gap is the mean shortfall below `gamma` (1.0 for scores normalised to the target)."""
    _, metrics = _rliable()
    matrices = {k: np.asarray(v, dtype=float).reshape(len(v), -1) for k, v in scores.items()}
    funcs = lambda x: np.array([metrics.aggregate_iqm(x), metrics.aggregate_mean(x),  # noqa: E731
                                metrics.aggregate_optimality_gap(x, gamma)])
    points, intervals = _estimate(matrices, funcs, seed)
    names = ("iqm", "mean", "optimality_gap")
    return {k: {n: (float(points[k][i]), float(intervals[k][0, i]), float(intervals[k][1, i]))
                for i, n in enumerate(names)} for k in matrices}


def improvement(x: np.ndarray, y: np.ndarray) -> float:
    """rliable's `metrics.probability_of_improvement` (the Mann-Whitney U of X over Y, divided by the number
    of pairs, averaged over tasks) in one NumPy expression: a SciPy call for each bootstrap resample made
    mode=plot take a minute over a few groups."""
    wins = (x[:, None, :] > y[None, :, :]) + 0.5 * (x[:, None, :] == y[None, :, :])
    return float(wins.mean())  # every task has the same number of pairs: the mean over pairs and tasks


def probability_of_improvement(x: np.ndarray, y: np.ndarray, seed: int = 0) -> tuple[float, float, float]:
    """P(X > Y): the probability that a run of X beats a run of Y on a task (ties count half), averaged over
    tasks, with its 95% bootstrap interval."""
    pair = (np.asarray(x, dtype=float).reshape(len(x), -1), np.asarray(y, dtype=float).reshape(len(y), -1))
    points, intervals = _estimate({"xy": pair}, improvement, seed)
    low, high = np.ravel(intervals["xy"])
    return float(np.ravel(points["xy"])[0]), float(low), float(high)


def pointwise_interval(matrix: np.ndarray, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The mean over runs (rows) of each column and its 95% bootstrap interval, each column resampled apart
    (a learning curve's band)."""
    matrix = np.asarray(matrix, dtype=float)
    points, intervals = _estimate({"curve": matrix}, lambda x: np.mean(x, axis=0), seed)
    return points["curve"], intervals["curve"][0], intervals["curve"][1]
