"""The on-policy fused loop compiled with XLA where a graph env steps inside it (agent.jit_compile=auto), PPO's
and TRPO's minibatches, the XLA program cache (run.compile_cache) and the first call / steady state in a fit's
summary."""
import os
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from rlexp.agents import PPO, TD3, TRPO
from rlexp.envs.graph import GraphVectorEnv
from rlexp.envs.make import make_envs
from rlexp.errors import UserError
from rlexp.runtime.compile_cache import FLAG, cache_dir, configure_compile_cache, prune

TINY = {"_target_": "rlexp.models.networks.MLP", "units": [16]}


def ppo(env_id="CartPole-v1", n_envs=4, **kwargs):
    kwargs = dict(seed=0, n_steps=16, mini_batches=2, ppo_epochs=2, model=TINY) | kwargs
    return PPO(make_envs(env_id, n_envs=n_envs, seed=0), **kwargs)


def weights(agent):
    return [w.numpy() for w in agent.model.weights]


def long_fit(agent, steps=100_000):
    """The agent as `fit(steps)` would start it (its graphs not built)."""
    agent.max_steps = steps
    return agent


def test_auto_compiles_the_on_policy_loop_of_a_long_fit_where_a_graph_env_steps_in_it_and_nothing_else():
    agent = long_fit(ppo())
    assert isinstance(agent.envs, GraphVectorEnv) and agent.xla_loop and agent.steps_in_graph
    assert not agent.jit_compile  # no separate XLA update step
    assert agent.decide_xla() and agent.updates_per_call == 8192 // (16 * 4)
    agent.max_steps = 10  # decided once, when the first graph is built
    assert agent.xla_loop and agent.steps_in_graph
    short = long_fit(ppo(), 99_999)  # compilation costs more than a short fit saves
    assert not short.decide_xla() and not short.steps_in_graph and short.updates_per_call == 2048 // (16 * 4)
    assert ppo(jit_compile=True).xla_loop  # true: any length
    plain = long_fit(ppo(jit_compile=False))
    assert not plain.xla_loop and not plain.steps_in_graph  # NumPy acting
    assert not long_fit(ppo(normalize_obs=True)).xla_loop  # the normaliser steps in Python
    assert not long_fit(ppo(n_envs=2)).xla_loop  # CartPole below 4 envs: gymnasium's env copies
    assert not long_fit(ppo(model="lstm", mini_batches=1)).xla_loop
    sde = long_fit(ppo("Pendulum-v1", use_sde=True, sde_sample_freq=4))  # gSDE: the plain graph unless asked
    assert not sde.xla_loop and not sde.steps_in_graph
    assert long_fit(ppo("Pendulum-v1", use_sde=True, sde_sample_freq=4, jit_compile=True)).xla_loop
    trpo = TRPO(make_envs("Pendulum-v1", n_envs=4, seed=0), seed=0, n_steps=16, use_sde=True, model=TINY)
    assert long_fit(trpo).xla_loop  # TRPO's gSDE: the XLA loop learned as the plain graph did (learning.md)
    td3 = TD3(make_envs("Pendulum-v1", n_envs=1, seed=0), seed=0)
    assert td3.jit_compile is False  # auto leaves off-policy updates as plain graphs (faster on a CPU)
    with pytest.raises(UserError, match=r"agent.jit_compile='yes' must be auto, true or false"):
        ppo(jit_compile="yes")


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_the_compiled_update_learns_as_the_plain_graph_does(env_id):
    """One update (2 epochs of the whole rollout) on the same rollout, compiled with XLA and as a plain graph
    (with minibatches the two draw different orders: XLA's generator draws other numbers)."""
    compiled, plain = ppo(env_id, mini_batches=1), ppo(env_id, mini_batches=1)
    batch = plain.collect()
    tf.function(compiled.update, jit_compile=True)(batch)
    tf.function(plain.update)(batch)
    for a, b in zip(weights(compiled), weights(plain)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    assert any(not np.array_equal(a, b) for a, b in zip(weights(plain), weights(ppo(env_id, mini_batches=1))))


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_a_seeded_compiled_run_repeats_exactly(env_id):
    runs = []
    for _ in range(2):
        agent = ppo(env_id, jit_compile=True)
        assert agent.xla_loop
        agent.fit(max_steps=4_000, progress="none", verbose=0)
        runs.append(weights(agent))
    for a, b in zip(*runs):
        np.testing.assert_array_equal(a, b)


def test_ppo_minibatches_partition_the_rollout_with_each_row_s_own_values():
    """Each epoch's minibatches hold every row of the rollout once, each observation with its own action and old
    log-probability, in a new order each epoch."""
    agent = ppo(jit_compile=False, mini_batches=4, ppo_epochs=2)
    batch = agent.collect()
    rows = np.concatenate([batch["obs"].numpy().reshape(64, -1), batch["actions"].numpy().reshape(64, 1),
                           batch["log_probs"].numpy().reshape(64, 1)], axis=1)
    seen = []
    loss = agent.loss

    def recording_loss(obs, actions, old_log_probs, *rest):
        columns = [obs, tf.cast(actions, tf.float32)[:, None], old_log_probs[:, None]]
        marker = tf.numpy_function(lambda x: seen.append(x.copy()) or np.float32(0), [tf.concat(columns, 1)],
                                   tf.float32)
        value, metrics = loss(obs, actions, old_log_probs, *rest)
        return value + 0.0 * marker, metrics

    agent.loss = recording_loss
    tf.function(agent.update, autograph=False)(batch)
    assert [len(m) for m in seen] == [16] * 8
    expected = sorted(map(tuple, rows))
    for epoch in (seen[:4], seen[4:]):
        assert sorted(map(tuple, np.concatenate(epoch))) == expected
    assert not np.array_equal(np.concatenate(seen[:4]), np.concatenate(seen[4:]))


def test_trpo_critic_minibatches_partition_the_rollout_with_each_row_s_own_return():
    agent = TRPO(make_envs("CartPole-v1", n_envs=4, seed=0), seed=0, n_steps=16, mini_batches=4,
                 critic_iterations=2, model=TINY, jit_compile=False)
    obs = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    obs[:, 0] = np.arange(64)  # the row's number: its return is 10x it
    seen = []
    critic_loss = []
    value = agent.value

    def recording_value(x):
        marker = tf.numpy_function(lambda v: seen.append(v.copy()) or np.float32(0), [x], tf.float32)
        return value(x) + 0.0 * marker

    agent.value = recording_value
    total = tf.function(agent.update_critic)(tf.constant(obs), tf.constant(10.0 * np.arange(64, dtype=np.float32)))
    assert [len(m) for m in seen] == [16] * 8
    for epoch in (seen[:4], seen[4:]):
        assert sorted(map(tuple, np.concatenate(epoch))) == sorted(map(tuple, obs))
    assert np.isfinite(float(total))


def test_a_fit_reports_its_first_call_and_the_steady_state_after_it():
    agent = ppo(jit_compile=True)
    agent.decide_xla()
    per_call = agent.updates_per_call * 16 * 4
    summary = agent.fit(max_steps=3 * per_call, progress="none", verbose=0)
    assert summary["first_call_steps"] == per_call and 0 < summary["first_call_seconds"] < summary["seconds"]
    assert summary["steady_steps_per_s"] == pytest.approx(
        2 * per_call / (summary["session_seconds"] - summary["first_call_seconds"]))
    one = ppo(jit_compile=True).fit(max_steps=per_call, progress="none", verbose=0)
    assert one["first_call_steps"] == per_call and one["steady_steps_per_s"] is None


def test_the_cache_folder_is_per_tensorflow_version_and_cpu(tmp_path, monkeypatch):
    from importlib.metadata import version

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    auto = cache_dir("auto")
    assert auto.parent == tmp_path / "rlexp" / "xla"
    assert auto.name.startswith(f"tf-{version('tensorflow')}-") and len(auto.name.rsplit("-", 1)[1]) == 12
    assert cache_dir(str(tmp_path / "mine")).parent == tmp_path / "mine" and cache_dir(str(tmp_path)).name == auto.name
    assert cache_dir(None) is None and cache_dir(False) is None
    with pytest.raises(UserError, match=r"run.compile_cache=5 must be auto, a folder, or null"):
        cache_dir(5)


def test_the_cache_is_set_through_tf_xla_flags_unless_the_user_named_one(tmp_path, monkeypatch):
    monkeypatch.setenv("TF_XLA_FLAGS", "--tf_xla_auto_jit=0")
    folder = configure_compile_cache(str(tmp_path))
    assert folder.is_dir() and os.environ["TF_XLA_FLAGS"] == f"--tf_xla_auto_jit=0 {FLAG}={folder}"
    monkeypatch.setenv("TF_XLA_FLAGS", f"{FLAG}=/elsewhere")
    assert configure_compile_cache(str(tmp_path)) == Path("/elsewhere")
    assert os.environ["TF_XLA_FLAGS"] == f"{FLAG}=/elsewhere"
    monkeypatch.delenv("TF_XLA_FLAGS")
    assert configure_compile_cache(None) is None and "TF_XLA_FLAGS" not in os.environ


def test_prune_keeps_the_newest_programs_within_the_limit(tmp_path):
    for i, name in enumerate(("old", "middle", "new")):
        path = tmp_path / name
        path.write_bytes(b"x" * 300)
        os.utime(path, (1000 + i, 1000 + i))
    prune(tmp_path, limit=700)  # 300 + 300 fit, the third does not
    assert sorted(p.name for p in tmp_path.iterdir()) == ["middle", "new"]
