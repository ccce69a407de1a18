"""The search space: Hydra's sweep grammar (choice, range, interval, tag(log, ...), comma lists) as Optuna
distributions, the grid of comma lists, a baseline's values, and the short hash that names a sweep's study."""
from __future__ import annotations

import hashlib
import itertools
import json
import math
from typing import Any, Mapping

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, Override, RangeSweep, Transformer
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution

from rlexp.errors import SweepError


def distribution(override: Override) -> BaseDistribution | None:
    """The Optuna distribution of one sweep override (None for a plain value)."""
    if not override.is_sweep_override():
        return None
    value, key = override.value(), override.get_key_element()
    if override.is_choice_sweep() or (override.is_range_sweep() and value.shuffle):
        return CategoricalDistribution(list(override.sweep_iterator(transformer=Transformer.encode)))
    if override.is_range_sweep():  # Hydra's range excludes stop; Optuna's bounds are inclusive
        assert isinstance(value, RangeSweep)
        start, stop, step = value.start, value.stop, value.step
        count = math.ceil(round((stop - start) / step, 9))  # round: (0.4 - 0.1) / 0.1 is 3.0000000000000004
        if count <= 0:
            raise SweepError(f"{key}: range({start},{stop},{step}) is empty; range(start, stop, step) excludes stop")
        last = round(start + (count - 1) * step, 12)
        if any(isinstance(v, float) for v in (start, stop, step)):
            return FloatDistribution(start, last, step=step)
        return IntDistribution(int(start), int(last), step=int(step))
    if override.is_interval_sweep():
        assert isinstance(value, IntervalSweep)
        low, high = value.start, value.end
        if low > high:
            raise SweepError(f"{key}: interval({low},{high}) is reversed; write the lower bound first: "
                             f"interval({high},{low})")
        ints = isinstance(low, int) and isinstance(high, int)
        if "log" in value.tags:
            if low <= 0:
                raise SweepError(f"{key}: tag(log, interval({low},{high})) needs a lower bound above 0")
            return IntDistribution(low, high, log=True) if ints else FloatDistribution(low, high, log=True)
        return IntDistribution(low, high) if ints else FloatDistribution(low, high)
    raise SweepError(f"{override.input_line}: this sweep is not supported; use choice, range, interval or tag(log, ...)")


def search_space(arguments: list[str]) -> tuple[dict[str, BaseDistribution], dict[str, str], bool]:
    """(distributions, fixed values, is_grid) from the sweep's overrides; is_grid: only comma lists. A key given
    twice takes its last value, as on Hydra's command line (a command-line value wins over `params`)."""
    distributions, fixed, grid = {}, {}, {}
    for override in OverridesParser.create().parse_overrides(arguments):
        key = override.get_key_element()
        dist = distribution(override)
        distributions.pop(key, None)
        fixed.pop(key, None)
        grid.pop(key, None)
        if dist is None:
            fixed[key] = override.get_value_element_as_str()
            continue
        distributions[key] = dist
        grid[key] = override.is_choice_sweep() and isinstance(override.value(), ChoiceSweep) \
            and override.value().simple_form
    return distributions, fixed, bool(distributions) and all(grid.values())


def grid_points(distributions: Mapping[str, BaseDistribution]) -> list[dict[str, Any]]:
    names = list(distributions)
    return [dict(zip(names, values)) for values in itertools.product(*(distributions[n].choices for n in names))]


def grid_choices(key: str, dist: BaseDistribution) -> CategoricalDistribution:
    """A distribution as the grid sampler walks it: a choice's options, an int range's values, a stepped float
    range's values (its high end included, as hydra-optuna-sweeper's grid does)."""
    if isinstance(dist, CategoricalDistribution):
        return dist
    if isinstance(dist, IntDistribution) and not dist.log:
        return CategoricalDistribution(list(range(dist.low, dist.high + 1, dist.step)))
    if isinstance(dist, FloatDistribution) and dist.step is not None:
        count = int(round((dist.high - dist.low) / dist.step)) + 1
        return CategoricalDistribution([round(dist.low + i * dist.step, 12) for i in range(count)])
    raise SweepError(f"{key}: hydra/sweeper/sampler=grid walks discrete values only; use choice(...), range(...) or "
                     "a comma list, or another sampler")


def describe(dist: BaseDistribution) -> str:
    return f"{type(dist).__name__}({', '.join(f'{k}={v}' for k, v in dist._asdict().items())})"


def described(distributions: Mapping[str, BaseDistribution]) -> dict[str, str]:
    """The search space as text (kept in the study, compared when it is continued)."""
    return {key: describe(dist) for key, dist in sorted(distributions.items())}


DEFAULT_MEASURE = {"objective": "final_eval", "aggregate": "mean", "seeds_per_trial": 1}


def sweep_hash(distributions: Mapping[str, BaseDistribution], fixed: Mapping[str, str],
               measure: Mapping[str, Any] | None = None) -> str:
    """Six hex digits naming a sweep: its search space, the fixed values its trials train with and how a trial is
    scored (objective, aggregate, seeds per trial; the default's studies keep the names they had). The same command
    gives the same hash (and continues its study); another space, other fixed values or scores another one."""
    parts = {"space": described(distributions), "fixed": dict(sorted(fixed.items()))}
    if measure is not None and dict(measure) != DEFAULT_MEASURE:
        parts["measure"] = dict(measure)
    text = json.dumps(parts, sort_keys=True)
    return hashlib.sha1(text.encode()).hexdigest()[:6]


def baseline_params(baseline: Mapping[str, Any], distributions: Mapping[str, BaseDistribution],
                    unsearched: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
    """The baseline's values of searched keys: (those that lie in their distribution, a choice's option or a value
    in an interval: the trial's Optuna parameters; the others, which the trial trains with as fixed values).
    `unsearched`: keys the study does not search are fixed values too (an enqueued configuration's), else dropped."""
    inside, outside = {}, {}
    for key, value in baseline.items():
        dist = distributions.get(key)
        if dist is None:
            if unsearched:
                outside[key] = value
            continue
        try:
            contained = dist._contains(dist.to_internal_repr(value))
        except (ValueError, TypeError):
            contained = False
        (inside if contained else outside)[key] = value
    return inside, outside


def basic_sweeper_line(arguments: list[str]) -> str:
    """One line for Hydra's basic sweeper (hydra/sweeper=basic) given a sweep it can't run, Optuna's interval:
    the override it was given and the fix."""
    parser = OverridesParser.create()
    for argument in arguments:
        try:
            override = parser.parse_override(argument)
        except Exception:  # noqa: BLE001 - not an override (a flag), or one Hydra has said is wrong
            continue
        if override.is_sweep_override() and not override.is_discrete_sweep():
            key = override.get_key_element()
            return (f"{argument}: hydra/sweeper=basic runs a grid of the values listed and can't sample an interval; "
                    f"drop hydra/sweeper=basic (rlexp's Optuna sweeper searches it), or list values: {key}=a,b,c")
    return ("hydra/sweeper=basic runs a grid of the values listed and can't sample an interval "
            "(hydra.sweeper.params); drop hydra/sweeper=basic, or list values: key=a,b,c")
