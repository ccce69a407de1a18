"""Action distributions in TensorFlow: categorical (discrete) and diagonal Gaussian (continuous).

Sampling draws from a `tf.random.Generator`, whose state is saved in checkpoints (exact resume).
"""
from __future__ import annotations

import math

import tensorflow as tf


def categorical_sample(logits: tf.Tensor, rng: tf.random.Generator) -> tf.Tensor:
    """Gumbel-max sample of one action per row."""
    u = rng.uniform(tf.shape(logits), minval=1e-9, maxval=1.0)
    return tf.argmax(logits - tf.math.log(-tf.math.log(u)), axis=-1)


def categorical_log_prob(logits: tf.Tensor, actions: tf.Tensor) -> tf.Tensor:
    return -tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.cast(actions, tf.int32), logits=logits)


def categorical_entropy(logits: tf.Tensor) -> tf.Tensor:
    log_p = tf.nn.log_softmax(logits)
    return -tf.reduce_sum(tf.exp(log_p) * log_p, axis=-1)


def gaussian_sample(mean: tf.Tensor, log_std: tf.Tensor, rng: tf.random.Generator) -> tf.Tensor:
    return mean + tf.exp(log_std) * rng.normal(tf.shape(mean))


def gaussian_log_prob(mean: tf.Tensor, log_std: tf.Tensor, actions: tf.Tensor) -> tf.Tensor:
    z = (actions - mean) * tf.exp(-log_std)
    return tf.reduce_sum(-0.5 * tf.square(z) - log_std - 0.5 * math.log(2 * math.pi), axis=-1)


def gaussian_entropy(log_std: tf.Tensor, batch: tf.Tensor) -> tf.Tensor:
    per_row = tf.reduce_sum(log_std + 0.5 * math.log(2 * math.pi * math.e))
    return tf.fill([batch], per_row)
