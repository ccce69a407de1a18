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


def tf1_rmsprop(param, grads, lr, rho, eps, momentum=0.0, centered=False):
    """TensorFlow 1's RMSProp as SB3's RMSpropTFLike writes it, in NumPy: the mean square starts at ones and epsilon
    is inside the square root; the momentum buffer holds g / d and the learning rate multiplies it."""
    ms, mg, buf = np.ones_like(param), np.zeros_like(param), np.zeros_like(param)
    for g, rate in zip(grads, lr):
        ms = rho * ms + (1 - rho) * g * g
        if centered:
            mg = rho * mg + (1 - rho) * g
        step = g / np.sqrt(ms - mg * mg + eps)
        if momentum:
            buf = momentum * buf + step
            step = buf
        param = param - rate * step
    return param


def run_tf_like(init, grads, lr, **kwargs):
    from rlexp.models.optimizers import RMSpropTFLike

    variable = tf.Variable(init)
    optimizer = RMSpropTFLike(learning_rate=lr[0], **kwargs)
    optimizer.build([variable])
    step = tf.function(lambda g: optimizer.apply_gradients([(g, variable)]))
    for g, rate in zip(grads, lr):
        optimizer.learning_rate = rate
        step(tf.constant(g))
    return variable.numpy()


def test_rmsprop_tf_like_first_steps_by_hand():
    """A constant gradient 0.01 (lr 7e-4, rho 0.99, eps 1e-5, RL Zoo's A2C Atari row): ms = 0.99 + 0.01 x 1e-4 =
    0.990001, so the first step is 7e-4 x 0.01 / sqrt(0.990011) = 7.03523e-6; the second ms = 0.98010199, step
    7e-4 x 0.01 / sqrt(0.98011199) = 7.07066e-6. Keras' RMSprop (ms from zero) steps 7e-4 x 0.01 /
    sqrt(1e-6 + 1e-5) = 2.11e-3 first, 300x more."""
    grads = [np.full(3, 0.01, np.float32)] * 2
    after = run_tf_like(np.zeros(3, np.float32), grads, [7e-4] * 2, rho=0.99, epsilon=1e-5)
    np.testing.assert_allclose(after, -(7.03523e-6 + 7.07066e-6), rtol=1e-5)


@pytest.mark.parametrize("kwargs", [dict(), dict(momentum=0.9), dict(centered=True), dict(momentum=0.5, centered=True)],
                         ids=["plain", "momentum", "centered", "both"])
def test_rmsprop_tf_like_matches_tensorflow_1s_rmsprop(kwargs):
    rng = np.random.default_rng(1)
    init = rng.standard_normal((4, 3)).astype(np.float32)
    grads = [(0.05 * rng.standard_normal(init.shape)).astype(np.float32) for _ in range(30)]
    lr = list(np.linspace(1e-2, 1e-3, 30))  # a linear schedule: SB3 multiplies the momentum buffer by today's lr
    ours = run_tf_like(init, grads, lr, rho=0.9, epsilon=1e-5, **kwargs)
    theirs = tf1_rmsprop(init.astype(np.float64), grads, lr, rho=0.9, eps=1e-5, **kwargs)
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


def test_adam_with_torch_epsilon_is_pytorchs_adam():
    """PyTorch's Adam (SB3's) adds eps to the bias-corrected root: with g = 0.01, lr 1, eps 1e-5 the first step is
    m_hat / (sqrt(v_hat) + eps) = 0.01 / 0.01001 = 0.999000999; Keras' adds it to the uncorrected root
    sqrt(v) = sqrt(0.001) x 0.01 and steps 0.969346 (lr_t = sqrt(0.001) / 0.1)."""
    steps = {}
    for torch_epsilon in (True, False):
        weight = tf.Variable([0.0])
        optimizer = FusedAdam(learning_rate=1.0, epsilon=1e-5, torch_epsilon=torch_epsilon)
        optimizer.build([weight])
        optimizer.apply_gradients([(tf.constant([0.01]), weight)])
        steps[torch_epsilon] = -float(weight.numpy()[0])
    assert steps[True] == pytest.approx(0.999000999, rel=1e-6) and steps[False] == pytest.approx(0.969346, rel=1e-5)
    rng = np.random.default_rng(2)
    grads = [(1e-3 * rng.standard_normal(4)).astype(np.float32) for _ in range(20)]
    weight, optimizer = tf.Variable(np.zeros(4, np.float32)), FusedAdam(learning_rate=1e-2, epsilon=1e-5,
                                                                        torch_epsilon=True)
    m = v = np.zeros(4)
    param = np.zeros(4)
    for t, g in enumerate(grads, 1):  # PyTorch's Adam in NumPy
        optimizer.apply_gradients([(tf.constant(g), weight)])
        m, v = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g * g
        param -= 1e-2 * (m / (1 - 0.9**t)) / (np.sqrt(v / (1 - 0.999**t)) + 1e-5)
    np.testing.assert_allclose(weight.numpy(), param, rtol=1e-4, atol=1e-7)
