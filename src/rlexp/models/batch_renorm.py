"""Batch Renormalization (Ioffe 2017) as CrossQ uses it (Bhatt et al. 2024; sb3-contrib's BatchRenorm1d): batch
statistics for the first `warmup_steps` training calls, then the running statistics corrected by the clipped ratios
r and d, so that an outlier batch moves the output less than plain batch norm lets it."""
from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf


class BatchRenorm(keras.layers.Layer):
    """Normalises features over the batch (training) or by running statistics (inference), then scales and shifts.

    Training calls (training=True) use the batch mean and unbiased variance (PyTorch's `x.var(0)`) and update the
    running mean and variance by `momentum`; after `warmup_steps` such calls they normalise with the running
    statistics instead, through r = clip(std_batch / std_running, 1/3, 3) and d = clip((mean_batch -
    mean_running) / std_running, -5, 5), both held constant in the gradient. Inference calls use the running
    statistics and change nothing.
    """

    R_MAX, D_MAX = 3.0, 5.0

    def __init__(self, momentum: float = 0.01, epsilon: float = 1e-3, warmup_steps: int = 100_000,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.momentum, self.epsilon, self.warmup_steps = float(momentum), float(epsilon), int(warmup_steps)

    def build(self, input_shape: tuple[int | None, ...]) -> None:
        n = int(input_shape[-1])
        self.scale = self.add_weight(shape=(n,), initializer="ones", name="scale")
        self.bias = self.add_weight(shape=(n,), initializer="zeros", name="bias")
        self.running_mean = self.add_weight(shape=(n,), initializer="zeros", name="running_mean", trainable=False)
        self.running_var = self.add_weight(shape=(n,), initializer="ones", name="running_var", trainable=False)
        self.steps = self.add_weight(shape=(), initializer="zeros", name="steps", trainable=False, dtype="int64")

    def call(self, x: tf.Tensor, training: bool = False) -> tf.Tensor:
        if training:
            mean, var = self.batch_moments(x)
            renorm = lambda: self.renormalised(mean, var)  # noqa: E731
            use_mean, use_var = tf.cond(self.steps > self.warmup_steps, renorm, lambda: (mean, var))
            self.running_mean.assign_add(self.momentum * (tf.stop_gradient(mean) - self.running_mean))
            self.running_var.assign_add(self.momentum * (tf.stop_gradient(var) - self.running_var))
            self.steps.assign_add(1)
        else:
            use_mean, use_var = self.running_mean, self.running_var
        return self.scale * (x - use_mean) / tf.sqrt(use_var + self.epsilon) + self.bias

    @staticmethod
    def batch_moments(x: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """The batch mean and the unbiased (n - 1) variance of each feature."""
        mean = tf.reduce_mean(x, axis=0)
        n = tf.cast(tf.shape(x)[0], x.dtype)
        return mean, tf.reduce_sum(tf.square(x - mean), axis=0) / (n - 1.0)

    def renormalised(self, mean: tf.Tensor, var: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """The mean and variance that normalise as the running statistics do, with batch-statistics gradients."""
        running_std = tf.sqrt(self.running_var + self.epsilon)
        r = tf.stop_gradient(tf.clip_by_value(tf.sqrt(var + self.epsilon) / running_std, 1 / self.R_MAX, self.R_MAX))
        d = tf.stop_gradient(tf.clip_by_value((mean - self.running_mean) / running_std, -self.D_MAX, self.D_MAX))
        return mean - d * tf.sqrt(var) / r, var / tf.square(r)

    def get_config(self) -> dict[str, Any]:
        return super().get_config() | {"momentum": self.momentum, "epsilon": self.epsilon,
                                       "warmup_steps": self.warmup_steps}
