"""Models of a population: N members' copies of one network as one Keras model with stacked weights.

Each `Dense` layer becomes a `StackedDense` whose kernel is [N, in, out] and bias [N, out]. The model takes the
members' rows one after the other (member-major: [N * B, ...]) and each layer multiplies member n's B rows by member
n's kernel in one batched matmul, so N small matmuls become one N-wide op. On the CPU a batched matmul computes
member's product exactly as a plain matmul of its rows does, bit for bit, except where the plain one is a
matrix-vector product (a value head's one column); and a bias's gradient is summed over the rows in another order
than Keras' BiasAddGrad. A member's numbers are its own whatever the others compute (tests/test_population.py),
and they agree with a single run's to float rounding (docs/performance.md).
"""
from __future__ import annotations

from typing import Sequence

import keras
import numpy as np
import tensorflow as tf

from rlexp.errors import UserError


class StackedDense(keras.layers.Layer):
    """N Dense layers side by side: member n's rows (the n-th of N equal blocks of the batch) go through its own
    kernel and bias."""

    def __init__(self, members: int, units: int, activation: str | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.members, self.units = int(members), int(units)
        self.activation = keras.activations.get(activation)

    def build(self, input_shape) -> None:
        n, d = self.members, int(input_shape[-1])
        self.kernel = self.add_weight(name="kernel", shape=(n, d, self.units), initializer="zeros")
        self.bias = self.add_weight(name="bias", shape=(n, self.units), initializer="zeros")

    def call(self, x):
        d = tf.shape(x)[-1]
        rows = tf.reshape(x, tf.stack([self.members, -1, d]))  # [N, B, in]
        y = tf.matmul(rows, tf.cast(self.kernel, rows.dtype)) + tf.cast(self.bias, rows.dtype)[:, None, :]
        return self.activation(tf.reshape(y, tf.stack([-1, self.units])))

    def get_config(self):
        return super().get_config() | {"members": self.members, "units": self.units,
                                       "activation": keras.activations.serialize(self.activation)}


def stack_models(models: Sequence[keras.Model], name: str | None = None) -> keras.Model:
    """One model computing each of `models` (same architecture, own weights) on its block of rows; its weights
    are theirs stacked on a new first axis (member n's are `w[n]` of each)."""
    n = len(models)
    first = models[0]
    for layer in first.layers:
        if layer.weights and not isinstance(layer, keras.layers.Dense):
            raise UserError(f"run.seeds: a population's model may hold only dense layers, not "
                            f"{type(layer).__name__} ({layer.name}); use model=mlp or another dense preset")

    def clone(layer):
        if isinstance(layer, keras.layers.Dense):
            return StackedDense(n, layer.units, keras.activations.serialize(layer.activation), name=layer.name,
                                dtype=layer.dtype_policy)
        return layer.__class__.from_config(layer.get_config())

    stacked = keras.models.clone_model(first, clone_function=clone)
    if name:
        stacked.name = name
    for position, layer in enumerate(stacked.layers):
        if isinstance(layer, StackedDense):
            parts = [m.layers[position].get_weights() for m in models]
            layer.set_weights([np.stack([p[0] for p in parts]), np.stack([p[1] for p in parts])])
    return stacked


def member_weights(stacked: keras.Model, member: int) -> list[np.ndarray]:
    """Member `member`'s weights, in the order of its single model's `get_weights()`."""
    return [w[member] for w in stacked.get_weights()]


def set_member_weights(stacked: keras.Model, member: int, weights: Sequence[np.ndarray]) -> None:
    """Write a single model's weights into member `member`'s slices."""
    for variable, value in zip(stacked.weights, weights):
        full = np.array(variable.numpy())
        full[member] = value
        variable.assign(full)
