"""Maths on rollout tensors [T, N, ...]: the time axis swapped or flattened, and generalised advantage
estimation."""
from __future__ import annotations

import tensorflow as tf

from rlexp.agents.distributions import no_autograph

GAE_UNROLL_STEPS = 64  # rollouts up to this length get GAE's recursion unrolled in the graph


@no_autograph
def swap_time(x: tf.Tensor) -> tf.Tensor:
    """[T, N, ...] <-> [N, T, ...]."""
    return tf.transpose(x, [1, 0, *range(2, x.shape.rank)])


@no_autograph
def flatten_time(x: tf.Tensor) -> tf.Tensor:
    """[T, N, ...] -> [T * N, ...]."""
    return tf.reshape(x, tf.concat([[-1], tf.shape(x)[2:]], 0))


@no_autograph
def compute_gae(rewards: tf.Tensor, values: tf.Tensor, dones: tf.Tensor, last_values: tf.Tensor,
                gamma: float, lam: float) -> tuple[tf.Tensor, tf.Tensor]:
    """Generalised advantage estimation over [T, N] tensors. Returns (advantages, returns).

    dones[t] marks that the episode ended at step t (no bootstrap from t+1).
    """
    not_done = 1.0 - dones
    next_values = tf.concat([values[1:], last_values[None]], 0)
    deltas = rewards + gamma * next_values * not_done - values
    n_steps = deltas.shape[0]
    if n_steps is not None and n_steps <= GAE_UNROLL_STEPS:  # a few ops per step instead of a loop's overhead
        gae, advantages = tf.zeros_like(last_values), [None] * n_steps
        for t in reversed(range(n_steps)):
            gae = advantages[t] = deltas[t] + gamma * lam * not_done[t] * gae
        advantages = tf.stack(advantages)
    else:
        advantages = tf.scan(lambda gae, step: step[0] + gamma * lam * step[1] * gae, (deltas, not_done),
                             initializer=tf.zeros_like(last_values), reverse=True)
    return advantages, advantages + values
