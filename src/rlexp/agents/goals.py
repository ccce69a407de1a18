"""Goal-conditioned envs (gymnasium-robotics' Fetch, ...) for off-policy agents: their Dict observations hold
`achieved_goal` and `desired_goal`, and they train with Hindsight Experience Replay (`buffer=her`), which needs
those goals' columns in the flattened observations and the env's `compute_reward`."""
from __future__ import annotations

from typing import Any, Callable

import gymnasium as gym
import numpy as np

from rlexp.errors import UserError

GOAL_KEYS = ("achieved_goal", "desired_goal")


def goal_columns(parts: list[tuple[str, gym.Space]] | None) -> dict[str, slice] | None:
    """The columns of each goal in the flattened observations, or None where the observations hold no goals."""
    if not parts or not set(GOAL_KEYS) <= {key for key, _ in parts}:
        return None
    columns, start = {}, 0
    for key, space in parts:
        size = int(gym.spaces.flatdim(space))
        columns[key] = slice(start, start + size)
        start += size
    return {key: columns[key] for key in GOAL_KEYS}


def reward_function(envs: gym.vector.VectorEnv) -> Callable[..., np.ndarray]:
    """The env's batched `compute_reward(achieved_goal, desired_goal, info)`: an env copy's in this process, or
    (env copies in worker processes) a new env's of the same id."""
    copies = getattr(envs, "envs", None)
    env = copies[0] if copies else gym.make(envs.spec.id, **(envs.spec.kwargs or {}))
    return env.unwrapped.compute_reward


def use_goals(agent: Any, envs: gym.vector.VectorEnv, buffer: Any) -> None:
    """Give a `HerReplayBuffer` the goals' columns and the reward function; refuse HER without goals, goals
    without HER, and HER in a population, each in one line."""
    from rlexp.buffers.her import HerReplayBuffer

    columns = goal_columns(agent.obs_parts)
    env_id = getattr(getattr(envs, "spec", None), "id", None) or "this env"
    if not isinstance(buffer, HerReplayBuffer):
        if columns is not None:
            raise UserError(f"env.id={env_id} is goal-conditioned (achieved_goal and desired_goal observations): "
                            f"train {type(agent).__name__} on it with buffer=her (Hindsight Experience Replay)")
        return
    if columns is None:
        raise UserError(f"buffer=her relabels goals, but env.id={env_id} has no achieved_goal and desired_goal "
                        "observations; leave buffer= out (the agent's own replay)")
    if agent.members is not None:
        raise UserError("buffer=her trains one run at a time; leave run.seeds out")
    buffer.use_goals(columns["achieved_goal"], columns["desired_goal"], reward_function(envs))
