"""SB3's `train_freq` in episodes (`train_freq=[n, "episode"]`; rlexp's agent.train_freq_unit=episode) for the
actor-critic agents: exploratory env steps until n episodes have ended, counted over all envs, then an update phase
of `gradient_steps` updates (-1: one per transition collected). The steps are taken from Python one at a time, each
action drawn by one graph call: a phase's length is known only when it ends."""
from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from rlexp.errors import UserError

UNITS = ("step", "episode")


def check_unit(agent: Any, unit: str) -> str:
    """agent.train_freq_unit, refused in one line where the agent's loop counts only env steps."""
    if unit not in UNITS:
        raise UserError(f"agent.train_freq_unit={unit!r}: use step or episode (SB3's train_freq=[n, \"episode\"])")
    if unit == "episode":
        if not agent.episode_phases:
            raise UserError(f"agent.train_freq_unit=episode: {type(agent).__name__} counts train_freq in env steps; "
                            "DQN, QR-DQN, DDPG, TD3, SAC, TQC and CrossQ count it in episodes too")
        if agent.members is not None:
            raise UserError("agent.train_freq_unit=episode trains one run at a time; leave run.seeds out")
    return unit


def episode_phase(agent: Any, updates_per_transition: bool) -> dict[str, float]:
    """Env steps until `agent.train_freq` episodes end (or the run's next stop), then the update phase: the mean
    metrics, or {} when nothing was learned."""
    if not hasattr(agent, "_explore_fn"):
        agent._explore_fn = tf.function(agent.explore, autograph=False)
    ended = steps = 0
    while ended < agent.train_freq and agent.steps_left() > 0:
        actions = agent._explore_fn(tf.convert_to_tensor(agent._obs)).numpy()
        agent._obs = agent._numpy_step(agent._obs, actions)
        ended += int(np.count_nonzero(agent.episode_ends))
        steps += 1
    updates = steps * agent.n_envs if updates_per_transition else agent.gradient_steps
    totals: dict[str, float] = {}
    for _ in range(updates):  # one graph call per update: a phase's count varies, a batch's shape does not
        for key, value in agent.run_updates(agent.normalize_batch(agent.buffer.sample(1))).items():
            totals[key] = totals.get(key, 0.0) + value
    return {key: value / updates for key, value in totals.items()}
