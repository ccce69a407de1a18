"""Quantile regression shared by QR-DQN and TQC: the quantile Huber loss of Dabney et al. (2018)."""
from __future__ import annotations

import tensorflow as tf

from rlexp.agents.distributions import no_autograph


@no_autograph
def quantile_huber_loss(current: tf.Tensor, target: tf.Tensor, sum_over_quantiles: bool = True) -> tf.Tensor:
    """Each row's quantile Huber loss (kappa 1) of the N estimates `current` [rows, ..., N], at the fractions
    tau_i = (i + 0.5) / N, against the M samples `target` [rows, ..., M] (broadcast over the middle axes):
    rho_i(u) = |tau_i - 1{u < 0}| * huber(u), u = target_j - current_i. QR-DQN sums over the estimates and
    averages over the samples (`sum_over_quantiles`); TQC averages over both. Returns [rows]."""
    n = current.shape[-1]
    fractions = (tf.range(n, dtype=current.dtype) + 0.5) / n
    delta = target[..., None, :] - current[..., :, None]  # [rows, ..., N, M]
    absolute = tf.abs(delta)
    huber = tf.where(absolute <= 1.0, 0.5 * tf.square(delta), absolute - 0.5)
    below = tf.cast(tf.stop_gradient(delta) < 0.0, current.dtype)
    losses = tf.abs(fractions[:, None] - below) * huber
    if sum_over_quantiles:
        losses = tf.reduce_sum(losses, axis=-2)
    axes = list(range(1, len(losses.shape)))
    return tf.reduce_mean(losses, axis=axes)
