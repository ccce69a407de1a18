"""Action distributions in TensorFlow: categorical (discrete) and diagonal Gaussian (continuous).

Sampling draws from a `tf.random.Generator`, whose state is saved in checkpoints (exact resume).
`log_std` may be a vector (state-independent) or a [batch, actions] tensor (state-dependent).
"""
from __future__ import annotations

import math

import tensorflow as tf

LOG_2PI = math.log(2 * math.pi)

# Graph helpers with no tensor-dependent Python control flow skip AutoGraph's source conversion, which
# was 70% of the first call's trace time. Functions with `for _ in tf.range` or `if tensor` keep it.
no_autograph = tf.autograph.experimental.do_not_convert


@no_autograph
def categorical_sample(logits: tf.Tensor, rng: tf.random.Generator) -> tf.Tensor:
    """Gumbel-max sample of one action per row."""
    u = rng.uniform(tf.shape(logits), minval=1e-9, maxval=1.0)
    return tf.argmax(logits - tf.math.log(-tf.math.log(u)), axis=-1)


@no_autograph
def categorical_log_prob(logits: tf.Tensor, actions: tf.Tensor) -> tf.Tensor:
    return -tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.cast(actions, tf.int32), logits=logits)


@no_autograph
def categorical_entropy(logits: tf.Tensor) -> tf.Tensor:
    log_p = tf.nn.log_softmax(logits)
    return -tf.reduce_sum(tf.exp(log_p) * log_p, axis=-1)


@no_autograph
def categorical_kl(old_logits: tf.Tensor, new_logits: tf.Tensor) -> tf.Tensor:
    """KL(old || new) per row."""
    old_log_p, new_log_p = tf.nn.log_softmax(old_logits), tf.nn.log_softmax(new_logits)
    return tf.reduce_sum(tf.exp(old_log_p) * (old_log_p - new_log_p), axis=-1)


@no_autograph
def gaussian_sample(mean: tf.Tensor, log_std: tf.Tensor, rng: tf.random.Generator) -> tf.Tensor:
    return mean + tf.exp(log_std) * rng.normal(tf.shape(mean))


@no_autograph
def gaussian_log_prob(mean: tf.Tensor, log_std: tf.Tensor, actions: tf.Tensor) -> tf.Tensor:
    z = (actions - mean) * tf.exp(-log_std)
    return tf.reduce_sum(-0.5 * tf.square(z) - log_std - 0.5 * LOG_2PI, axis=-1)


@no_autograph
def gaussian_entropy(mean: tf.Tensor, log_std: tf.Tensor) -> tf.Tensor:
    """Entropy per row (the mean only gives the batch shape)."""
    return tf.reduce_sum(tf.broadcast_to(log_std, tf.shape(mean)) + 0.5 * (LOG_2PI + 1.0), axis=-1)


@no_autograph
def sde_std(log_std: tf.Tensor, expln: bool = False) -> tf.Tensor:
    """gSDE's stds from their learned logs: exp, or with `expln` SB3's `use_expln` (gSDE paper): exp(x) for x <= 0,
    log1p(x) + 1 above (1e-6 inside, as SB3), so a std grows slowly instead of exponentially."""
    if not expln:
        return tf.exp(log_std)
    above = tf.math.log1p(tf.nn.relu(log_std) + 1e-6) + 1.0
    return tf.where(log_std <= 0.0, tf.exp(tf.minimum(log_std, 0.0)), above)


@no_autograph
def gaussian_kl(old_mean: tf.Tensor, old_log_std: tf.Tensor, mean: tf.Tensor, log_std: tf.Tensor) -> tf.Tensor:
    """KL(old || new) per row for diagonal Gaussians."""
    old_var, var = tf.exp(2.0 * old_log_std), tf.exp(2.0 * log_std)
    kl = log_std - old_log_std + (old_var + tf.square(old_mean - mean)) / (2.0 * var) - 0.5
    return tf.reduce_sum(tf.broadcast_to(kl, tf.shape(mean)), axis=-1)


# ----- factorised distributions for MultiDiscrete and MultiBinary actions --------------------------------
@no_autograph
def multi_categorical_sample(logits: tf.Tensor, nvec: list[int], rng: tf.random.Generator) -> tf.Tensor:
    """One Gumbel-max sample per sub-action: [batch, len(nvec)] from logits [batch, sum(nvec)]."""
    return tf.stack([categorical_sample(part, rng) for part in tf.split(logits, nvec, axis=-1)], axis=-1)


@no_autograph
def multi_categorical_log_prob(logits: tf.Tensor, nvec: list[int], actions: tf.Tensor) -> tf.Tensor:
    """The sum of the sub-actions' categorical log-probabilities."""
    parts = tf.split(logits, nvec, axis=-1)
    return tf.add_n([categorical_log_prob(part, actions[..., i]) for i, part in enumerate(parts)])


@no_autograph
def multi_categorical_entropy(logits: tf.Tensor, nvec: list[int]) -> tf.Tensor:
    return tf.add_n([categorical_entropy(part) for part in tf.split(logits, nvec, axis=-1)])


@no_autograph
def multi_categorical_mode(logits: tf.Tensor, nvec: list[int]) -> tf.Tensor:
    return tf.stack([tf.argmax(part, axis=-1) for part in tf.split(logits, nvec, axis=-1)], axis=-1)


@no_autograph
def bernoulli_sample(logits: tf.Tensor, rng: tf.random.Generator) -> tf.Tensor:
    """Independent 0/1 draws with P(1) = sigmoid(logit)."""
    return tf.cast(rng.uniform(tf.shape(logits)) < tf.sigmoid(logits), tf.int64)


@no_autograph
def bernoulli_log_prob(logits: tf.Tensor, actions: tf.Tensor) -> tf.Tensor:
    """sum_i a_i log sigmoid(l_i) + (1 - a_i) log sigmoid(-l_i)."""
    return -tf.reduce_sum(tf.nn.sigmoid_cross_entropy_with_logits(labels=tf.cast(actions, logits.dtype),
                                                                  logits=logits), axis=-1)


@no_autograph
def bernoulli_entropy(logits: tf.Tensor) -> tf.Tensor:
    p = tf.sigmoid(logits)
    return tf.reduce_sum(tf.nn.sigmoid_cross_entropy_with_logits(labels=p, logits=logits), axis=-1)
