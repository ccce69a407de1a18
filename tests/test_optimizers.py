"""The fused optimizers make the same updates, and keep the same slot variables, as Keras's own."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from rlexp.models.optimizers import FusedAdam, FusedRMSprop


@pytest.mark.parametrize("keras_cls, fused_cls, kwargs", [
    (keras.optimizers.Adam, FusedAdam, dict(learning_rate=1e-2, beta_1=0.9, beta_2=0.99, epsilon=1e-7)),
    (keras.optimizers.RMSprop, FusedRMSprop, dict(learning_rate=1e-2, rho=0.99, epsilon=1e-5)),
])
def test_fused_optimizer_matches_keras(keras_cls, fused_cls, kwargs):
    rng = np.random.default_rng(0)
    init = [rng.standard_normal((5, 3)).astype(np.float32), rng.standard_normal(3).astype(np.float32)]
    grads = [[rng.standard_normal(x.shape).astype(np.float32) for x in init] for _ in range(25)]
    results = []
    for cls in (keras_cls, fused_cls):
        variables = [tf.Variable(x) for x in init]
        optimizer = cls(**kwargs)
        optimizer.build(variables)
        step = tf.function(lambda g0, g1: optimizer.apply_gradients(zip([g0, g1], variables)))
        for i, (g0, g1) in enumerate(grads):
            if i == 10:
                optimizer.learning_rate = kwargs["learning_rate"] / 2  # a schedule changes it between calls
            step(g0, g1)
        results.append([v.numpy() for v in variables] + [np.asarray(v) for v in optimizer.variables])
    assert len(results[0]) == len(results[1])  # same slots, so the same checkpoints
    for ours, theirs in zip(*results):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)
