"""The values of an RL Zoo row checked as RL Zoo and SB3 read them (a number, an integer, a schedule RL Zoo knows,
a boolean), and every key of a row rlexp cannot honour gathered into one error line."""
from __future__ import annotations

import math
from typing import Any, Callable

from rlexp.presets.zoo.rows import ZooRow, ZooRowError

INTEGERS = {"n_delta", "n_eval_episodes", "n_steps", "batch_size", "n_epochs", "buffer_size", "learning_starts", "gradient_steps",
            "target_update_interval", "policy_delay", "n_critic_updates", "cg_max_steps", "line_search_max_iter",
            "sub_sampling_factor", "sde_sample_freq", "n_envs", "frame_stack", "top_quantiles_to_drop_per_net"}
NUMBERS = {"gamma", "gae_lambda", "vf_coef", "max_grad_norm", "tau", "exploration_fraction", "exploration_initial_eps",
           "exploration_final_eps", "noise_std", "target_policy_noise", "target_noise_clip", "rms_prop_eps",
           "cg_damping", "line_search_shrinking_factor", "n_timesteps"}
SCHEDULES = {"learning_rate", "clip_range", "clip_range_vf"}  # RL Zoo's `_preprocess_schedules`
BOOLEANS = {"use_sde", "normalize_advantage", "use_rms_prop", "use_sde_at_warmup", "optimize_memory_usage",
            "zero_policy"}
OPTIONAL = {"clip_range_vf", "target_kl", "n_top"}  # null: off (n_top: all directions)


class Problems:
    """The keys of one row that rlexp cannot honour, all of them, raised as one line."""

    def __init__(self, row: ZooRow) -> None:
        self.row, self.found = row, []

    def add(self, key: str, why: str) -> None:
        self.found.append(f"{key} {why}")

    def attempt(self, make: Callable[[], Any], default: Any = None) -> Any:
        """make(), or `default` with its ZooRowError's problem noted (a step that cannot go on past one)."""
        try:
            return make()
        except ZooRowError as error:
            self.found.append(str(error).split(": ", 1)[-1])
            return default

    def raise_any(self) -> None:
        if len(self.found) == 1:
            raise ZooRowError(f"RL Zoo row {self.row.file} {self.row.key}: {self.found[0]}")
        if self.found:
            listed = "; ".join(f"({i}) {problem}" for i, problem in enumerate(self.found, 1))
            raise ZooRowError(f"RL Zoo row {self.row.file} {self.row.key}: {len(self.found)} problems: {listed}")


def as_number(value: Any) -> float | None:
    """A number (YAML's `1e-3` without a dot is text: read as the number it spells), or None."""
    if isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def checked(values: dict[str, Any], defaults: dict[str, Any], problems: Problems) -> dict[str, Any]:
    """`values` with each number, integer, schedule and boolean checked; a wrong one is noted and SB3's default
    takes its place, or none (so the rest of the row is still checked)."""
    out = dict(values)
    for key, value in values.items():
        why = None
        if (key in OPTIONAL or key in defaults and defaults[key] is None) and value is None:
            continue  # (null: off, where SB3's own default is null)
        if key in SCHEDULES:
            text = value[4:] if isinstance(value, str) and value.startswith("lin_") else value
            if as_number(text) is None:
                why = f"= {value!r} is neither a number nor an RL Zoo schedule (lin_<number>)"
        elif key in INTEGERS or key in NUMBERS or key in OPTIONAL:
            number = as_number(value)
            if number is None:
                why = f"= {value!r} is not a number"
            elif key in INTEGERS and not number.is_integer():
                why = f"= {value!r} is not a whole number"
            else:
                out[key] = int(number) if key in INTEGERS else number
        elif key in BOOLEANS and not isinstance(value, bool):
            why = f"= {value!r} is not a boolean (true or false)"
        if why is not None:
            problems.add(key, why)
            if key in defaults:
                out[key] = defaults[key]
            else:
                del out[key]
    return out
