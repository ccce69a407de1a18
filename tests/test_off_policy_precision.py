"""bfloat16 compute for the off-policy agents: what stays float32 (variables, optimizer state, target networks,
outputs, log-probs, losses), why the soft target updates need float32 targets, and the `auto` rule."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from rlexp import build
from rlexp.agents import DDPG, DQN, NAF, PPO, SAC, TD3
from rlexp.agents.base import precision_policy
from rlexp.agents.off_policy import soft_update
from rlexp.buffers import ReplayBuffer
from rlexp.envs import make_envs
from rlexp.errors import UserError

CASES = [(DQN, "CartPole-v1", {}), (DDPG, "Pendulum-v1", {}), (TD3, "Pendulum-v1", {}), (SAC, "Pendulum-v1", {}),
         (SAC, "Pendulum-v1", {"use_sde": True}), (NAF, "Pendulum-v1", {})]


def small_agent(cls, env_id, precision="bfloat16", **kwargs):
    buffer = ReplayBuffer(max_size=1000, initial_size=64, batch_size=32)
    model = {"name": "tiny", "layers": [{"units": 32, "activation": "relu"}, {"output": True}]}
    return cls(make_envs(env_id, 1, seed=0, vectorization="sync"), model, buffer, seed=0, quiet=True,
               mixed_precision=precision, **kwargs)


@pytest.mark.parametrize("cls,env_id,kwargs", CASES, ids=lambda c: getattr(c, "__name__", None))
def test_bfloat16_computes_hidden_layers_in_16_bits_and_keeps_the_rest_float32(cls, env_id, kwargs):
    agent = small_agent(cls, env_id, **kwargs)
    assert agent.precision == "mixed_bfloat16"
    models = list(agent.models().values())
    hidden = {layer.compute_dtype for m in models for layer in m.layers if layer.name.startswith("dense")}
    assert hidden == {"bfloat16"}
    assert {o.dtype for m in models for o in m.outputs} == {"float32"}
    assert {v.dtype for m in models for v in m.variables} == {"float32"}  # targets included
    before = [w.numpy().copy() for w in models[0].trainable_variables]
    agent.fit(200)
    for optimizer in agent.optimizers().values():
        assert {v.dtype for v in optimizer.variables if "float" in v.dtype} == {"float32"}
    agent.max_steps = 10_000
    metrics = agent.train_iteration()  # an update phase past the warm-up
    assert set(agent.metric_names) <= set(metrics) and all(np.isfinite(metrics[k]) for k in agent.metric_names)
    assert any(not np.array_equal(a, b.numpy()) for a, b in zip(before, models[0].trainable_variables))


def test_sac_log_probs_in_bfloat16_are_float32_from_the_float32_head():
    agent = small_agent(SAC, "Pendulum-v1")
    obs = tf.constant(np.random.default_rng(0).normal(size=(64, 3)), tf.float32)
    rng = tf.random.Generator.from_seed(5)
    actions, log_prob = agent.sample(obs, rng)
    assert actions.dtype == tf.float32 and log_prob.dtype == tf.float32
    # the same draw, recomputed in float64 NumPy from the actor's float32 outputs
    mean, log_std = (x.numpy().astype(np.float64) for x in agent.mean_log_std(obs))
    noise = tf.random.Generator.from_seed(5).normal(mean.shape).numpy().astype(np.float64)
    u = mean + np.exp(log_std) * noise
    gaussian = -0.5 * noise ** 2 - log_std - 0.5 * np.log(2 * np.pi)
    expected = gaussian.sum(-1) - np.log(1 - np.tanh(u) ** 2 + 1e-6).sum(-1)
    np.testing.assert_allclose(actions.numpy(), np.tanh(u), atol=1e-6)
    np.testing.assert_allclose(log_prob.numpy(), expected, rtol=1e-5, atol=1e-4)


def test_soft_updates_move_float32_targets_as_exact_arithmetic_does_where_bfloat16_targets_stall():
    """Bjorck et al. (2021) keep 16-bit targets with Kahan summation; rlexp's targets are float32 under a bfloat16
    policy, within 4e-6 of the exact average after 300 steps (0.5% of the distance moved; a bfloat16 target, one
    ulp 2^-7 at 1.0, never moves)."""
    tau, steps = 0.005, 300
    target, source = tf.Variable(tf.ones(4)), tf.Variable(tf.fill([4], 1.001))
    for _ in range(steps):
        soft_update([target], [source], tau)
    exact = 1.001 - 0.001 * (1 - tau) ** steps  # target_k = source - (source - target_0) (1 - tau)^k
    np.testing.assert_allclose(target.numpy(), exact, atol=4e-6)
    assert exact - 1.0 > 7e-4  # it moved most of the way
    half = tf.ones(4, tf.bfloat16)
    for _ in range(steps):
        half = tau * tf.fill([4], tf.constant(1.001, tf.bfloat16)) + (1 - tau) * half
    assert float(half[0]) == 1.0


def test_off_policy_agents_compute_in_bfloat16_only(monkeypatch):
    with pytest.raises(UserError, match="run.mixed_precision=float16 needs loss scaling, which TD3 does not do; "
                                        "use run.mixed_precision=bfloat16"):
        small_agent(TD3, "Pendulum-v1", precision="float16")
    monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind=None: ["GPU:0"])  # as on a GPU machine
    assert precision_policy(True, float16=False) == "mixed_bfloat16"
    assert precision_policy(True, float16=True) == "mixed_float16"
    assert precision_policy(False) == "float32" and precision_policy("bfloat16") == "mixed_bfloat16"


MLP_400_300 = {"layers": [{"units": 400}, {"units": 300}, {"output": True}]}
MLP_64 = {"layers": [{"units": 64}, {"units": 64}, {"output": True}]}


@pytest.mark.parametrize("gpu", [False, True])
def test_auto_picks_bfloat16_for_wide_td3_and_sac_models_on_a_bfloat16_cpu(monkeypatch, gpu):
    monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind=None: ["GPU:0"] if gpu else [])
    for bf16_cpu in (True, False):
        monkeypatch.setattr(build, "cpu_has_bfloat16", lambda: bf16_cpu)
        on = "bfloat16" if bf16_cpu and not gpu else False
        assert build.resolve_precision("auto", TD3, False, model=MLP_400_300) == on
        assert build.resolve_precision("auto", SAC, False, model={"layers": [{"units": 256}, {"output": True}]}) == on
        assert build.resolve_precision("auto", SAC, False, model=MLP_64) is False  # no faster
        for cls in (DQN, DDPG, NAF, PPO):  # not shown to learn (or to pay) in bfloat16
            assert build.resolve_precision("auto", cls, False, model=MLP_400_300) is False
        assert build.resolve_precision("auto", TD3, True, model=MLP_400_300) is False  # images: on-policy only
        assert build.resolve_precision("auto", DQN, True) is False
        assert build.resolve_precision("auto", PPO, True) == on
        assert build.resolve_precision(False, TD3, False, model=MLP_400_300) is False
        assert build.resolve_precision("bfloat16", DQN, False, model=MLP_64) == "bfloat16"
