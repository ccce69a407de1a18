"""The runtime's edges: a forkserver that starts nothing before it forks, thread pools that can't change once
TensorFlow runs, and mixed precision that collects with the precision it learns in."""
import logging
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from rlexp.agents import A2C, PPO
from rlexp.build import configure_threads
from rlexp.envs.make import make_envs

PRELOAD_PROBE = """
import rlexp.runtime.preload
from tensorflow.python.eager import context
ctx = context.context()
print("devices listed:", ctx._physical_devices is not None)
print("context started:", ctx._context_handle is not None)
import tensorflow as tf
tf.config.threading.set_inter_op_parallelism_threads(3)
tf.config.threading.set_intra_op_parallelism_threads(1)
from rlexp.runtime.quiet import import_tensorflow
import_tensorflow()
print("devices listed after start:", ctx._physical_devices is not None)
threads = tf.config.threading
print("pools:", threads.get_inter_op_parallelism_threads(), threads.get_intra_op_parallelism_threads())
"""


def test_the_forkserver_preload_starts_nothing_that_a_forked_trial_sets_up():
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run([sys.executable, "-c", PRELOAD_PROBE], capture_output=True, text=True, timeout=300,
                            env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines() == ["devices listed: False", "context started: False",
                                          "devices listed after start: True", "pools: 3 1"]


def test_thread_counts_that_cannot_apply_once_tensorflow_runs_are_named_in_a_warning(caplog):
    tf.constant(1.0) + 1.0  # TensorFlow runs in this process (its thread pools are fixed from here on)
    inter = tf.config.threading.get_inter_op_parallelism_threads()
    intra = tf.config.threading.get_intra_op_parallelism_threads()
    with caplog.at_level(logging.WARNING, logger="rlexp"):
        configure_threads({"tf_inter_threads": inter, "tf_threads": intra}, image_obs=False)
        assert not caplog.records  # what is in effect already: nothing to say
        configure_threads({"tf_inter_threads": inter, "tf_threads": intra + 3}, image_obs=False)
    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    assert f"run.tf_threads={intra + 3} can't apply, {intra or 'all cores (0)'} intra-op threads in effect" \
        in record.getMessage()
    assert "tf_inter_threads" not in record.getMessage()
    assert tf.config.threading.get_intra_op_parallelism_threads() == intra


@pytest.mark.parametrize("agent_cls,precision", [(PPO, "bfloat16"), (A2C, "float16")])
def test_mixed_precision_collects_the_log_probs_its_learner_computes(agent_cls, precision):
    """Before any update, the learner's log-probabilities of the collected actions are the stored ones (PPO's
    ratio 1): the rollout acts with the 16-bit model the learner uses, not a float32 copy of it."""
    envs = make_envs("CartPole-v1", n_envs=4, seed=0, vectorization="sync")
    extra = {"mini_batches": 4} if agent_cls is PPO else {}
    agent = agent_cls(envs, seed=0, n_steps=32, mixed_precision=precision, **extra)
    for weight in agent.model.trainable_variables:  # a policy far from uniform: logits of a few units
        if weight.path.startswith("policy/"):
            weight.assign(weight * 100.0)
    batch = {k: v.numpy() for k, v in agent.collect().items()}
    rows = batch["log_probs"].size
    obs, actions = batch["obs"].reshape(rows, -1), batch["actions"].reshape(rows)
    learner = tf.function(lambda o, a: agent.log_prob_entropy(agent.forward(o)[0], a)[0],
                          jit_compile=agent.jit_compile and agent.jit_update)
    for start in range(0, rows, 32):  # minibatches of the learner's size
        rows_ = slice(start, start + 32)
        log_probs = learner(tf.constant(obs[rows_]), tf.constant(actions[rows_])).numpy()
        ratio = np.exp(log_probs - batch["log_probs"].reshape(rows)[rows_])
        np.testing.assert_allclose(ratio, 1.0, rtol=0, atol=1e-6)  # float32 round-off, far below 16-bit's
    assert np.ptp(batch["log_probs"]) > 0.3  # the log probs vary: the check has something to compare
