"""bfloat16 compute for the off-policy agents: what stays float32 (variables, optimizer state, target networks,
outputs, log-probs, losses), the soft target updates of float32 targets, and the `auto` rule."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from rlexp import build
from rlexp.agents import DDPG, DQN, NAF, PPO, SAC, TD3
from rlexp.agents.base import precision_policy
from rlexp.buffers import ReplayBuffer
from rlexp.envs.make import make_envs
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


def weights(models) -> list[np.ndarray]:
    """Every variable of `models`, as float64 copies."""
    return [v.numpy().astype(np.float64) for m in models for v in m.variables]


def test_a_training_update_moves_sacs_float32_targets_by_polyak_averaging_under_bfloat16():
    """The update phase's soft update, in the fused graph loop: target <- tau * critic + (1 - tau) * target, with
    the critics as the phase's critic step left them, computed in float64 NumPy."""
    agent = small_agent(SAC, "Pendulum-v1")
    while not agent.buffer.ready:
        agent.train_iteration()  # the random warm-up
    rng = np.random.default_rng(0)
    for target in agent.target_critics:  # targets well apart from the critics, so that the average moves them
        for v in target.variables:
            v.assign(v + rng.normal(0, 0.1, v.shape).astype(np.float32))
    before = weights(agent.target_critics)
    updates = int(agent.updates)
    agent.max_steps = agent.steps + 1  # one env step, one update
    agent.train_iteration()
    assert int(agent.updates) == updates + 1
    assert {v.dtype for t in agent.target_critics for v in t.variables} == {"float32"}
    tau = agent.tau
    for after, critic, old in zip(weights(agent.target_critics), weights(agent.critics), before):
        np.testing.assert_allclose(after, tau * critic + (1 - tau) * old, rtol=1e-6, atol=1e-7)  # float32 rounding
        assert np.abs(after - old).max() > 1e-4  # moved tau x ~0.1, far beyond the tolerance


def test_soft_updates_move_td3s_float32_targets_as_exact_arithmetic_does_under_bfloat16():
    """Bjorck et al. (2021) keep 16-bit targets with Kahan summation; rlexp's targets are float32 under a bfloat16
    policy: 300 of TD3's own target updates (actor and both critics) land within 300 float32 roundings
    (2e-5 relative) of the exact average source - (source - target_0) (1 - tau)^300, where a bfloat16 target
    (one ulp 2^-7 at 1.0) would stall."""
    agent = small_agent(TD3, "Pendulum-v1", tau=0.005)
    targets, sources = [agent.target_actor, *agent.target_critics], [agent.actor, *agent.critics]
    rng = np.random.default_rng(1)
    for target in targets:
        for v in target.variables:
            v.assign(v + rng.normal(0, 0.01, v.shape).astype(np.float32))
    before, online = weights(targets), weights(sources)
    update = tf.function(agent.target_updates, autograph=False)
    for _ in range(300):
        update()
    assert {v.dtype for t in targets for v in t.variables} == {"float32"}
    for after, source, old in zip(weights(targets), online, before):
        exact = source - (source - old) * (1 - agent.tau) ** 300
        np.testing.assert_allclose(after, exact, rtol=2e-5, atol=1e-7)
        assert np.abs(after - old).max() > 1e-3  # it moved most of the way (1 - 0.995^300 = 78% of ~0.01)
    np.testing.assert_array_equal(weights(sources)[0], online[0])  # the sources stay as they were


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
def test_auto_picks_bfloat16_for_wide_sac_models_on_a_bfloat16_cpu(monkeypatch, gpu):
    """SAC with layers of 256+ units; TD3 computes in float32 (in bfloat16 it learned LunarLanderContinuous worse)."""
    monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind=None: ["GPU:0"] if gpu else [])
    for bf16_cpu in (True, False):
        monkeypatch.setattr(build, "cpu_has_bfloat16", lambda: bf16_cpu)
        on = "bfloat16" if bf16_cpu and not gpu else False
        assert build.resolve_precision("auto", SAC, False, model=MLP_400_300) == on
        assert build.resolve_precision("auto", SAC, False, model={"layers": [{"units": 256}, {"output": True}]}) == on
        assert build.resolve_precision("auto", SAC, False, model=MLP_64) is False  # no faster
        for cls in (DQN, DDPG, NAF, PPO, TD3):  # not shown to learn (or to pay) in bfloat16
            assert build.resolve_precision("auto", cls, False, model=MLP_400_300) is False
        assert build.resolve_precision("auto", TD3, True, model=MLP_400_300) is False  # images: on-policy only
        assert build.resolve_precision("auto", DQN, True) is False
        assert build.resolve_precision("auto", PPO, True) == on
        assert build.resolve_precision(False, TD3, False, model=MLP_400_300) is False
        assert build.resolve_precision("bfloat16", DQN, False, model=MLP_64) == "bfloat16"
