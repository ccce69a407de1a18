"""CrossQ: Batch Renormalization against the paper's formula (Ioffe 2017) worked in NumPy here, the critics' joint
batch (its statistics, its loss against a NumPy forward pass written here), the actor's delay, no target networks,
and RL Zoo's crossq.yml rows translated against values read off the file by hand."""
import numpy as np
import pytest
import tensorflow as tf
from forked_cli import run_cli

from rlexp.agents import SAC, CrossQ
from rlexp.buffers import ReplayBuffer
from rlexp.envs.make import make_envs
from rlexp.errors import UserError
from rlexp.models.batch_renorm import BatchRenorm
from rlexp.presets.zoo import find_row, translate


def test_batch_renorm_during_warm_up_is_batch_norm_with_the_unbiased_variance():
    layer = BatchRenorm(momentum=0.1, epsilon=1e-3, warmup_steps=10)
    x = np.array([[1.0, 10.0], [3.0, 10.0], [5.0, 13.0]], np.float32)
    out = layer(x, training=True).numpy()
    # feature 0: mean 3, unbiased variance (4 + 0 + 4) / 2 = 4; feature 1: mean 11, variance (1 + 1 + 4) / 2 = 3
    np.testing.assert_allclose(out[:, 0], np.array([-2.0, 0.0, 2.0]) / np.sqrt(4.001), rtol=1e-6)
    np.testing.assert_allclose(out[:, 1], np.array([-1.0, -1.0, 2.0]) / np.sqrt(3.001), rtol=1e-6)
    # running statistics: 0 + 0.1 x (3, 11) and 1 + 0.1 x ((4, 3) - 1)
    np.testing.assert_allclose(layer.running_mean.numpy(), [0.3, 1.1], rtol=1e-6)
    np.testing.assert_allclose(layer.running_var.numpy(), [1.3, 1.2], rtol=1e-6)
    assert int(layer.steps.numpy()) == 1
    # inference: the running statistics, unchanged
    np.testing.assert_allclose(layer(x).numpy()[:, 0], (x[:, 0] - 0.3) / np.sqrt(1.301), rtol=1e-6)
    assert int(layer.steps.numpy()) == 1 and layer.running_mean.numpy()[0] == pytest.approx(0.3)


def test_batch_renorm_after_warm_up_is_the_papers_r_and_d_correction():
    """Ioffe (2017): x_hat = (x - mu_B) / sigma_B * r + d, r = clip(sigma_B / sigma, 1/3, 3),
    d = clip((mu_B - mu) / sigma, -5, 5), with the running mu and sigma from before this batch."""
    eps = 1e-8  # (the paper's form and sb3-contrib's agree where epsilon is negligible)
    layer = BatchRenorm(momentum=0.01, epsilon=eps, warmup_steps=0)
    rng = np.random.default_rng(0)
    layer(rng.normal(size=(8, 3)).astype(np.float32), training=True)  # one step: running statistics move
    mu, var = layer.running_mean.numpy().astype(np.float64), layer.running_var.numpy().astype(np.float64)
    # feature 0 within the clips; feature 1 with a wide batch (r clipped at 3); feature 2 shifted (d clipped at 5)
    x = np.stack([rng.normal(0.2, 1.1, 16), rng.normal(0.0, 9.0, 16), rng.normal(40.0, 1.0, 16)], 1).astype(np.float32)
    weights = rng.normal(size=x.shape).astype(np.float32)
    xt = tf.constant(x)
    with tf.GradientTape() as layer_tape:
        layer_tape.watch(xt)
        out = layer(xt, training=True)
        weighted = tf.reduce_sum(weights * out)
    mu_b, sigma_b = x.mean(0).astype(np.float64), x.std(0, ddof=1).astype(np.float64)
    sigma = np.sqrt(var + eps)
    r, d = np.clip(sigma_b / sigma, 1 / 3, 3), np.clip((mu_b - mu) / sigma, -5, 5)
    assert r[1] == 3 and d[2] == 5 and 1 / 3 < r[0] < 3 and abs(d[0]) < 5
    np.testing.assert_allclose(out.numpy(), (x - mu_b) / sigma_b * r + d, rtol=2e-4, atol=2e-4)
    # r and d are constants in the gradient: the paper's formula with them fixed, differentiated by TensorFlow
    with tf.GradientTape() as tape:
        tape.watch(xt)
        mean = tf.reduce_mean(xt, 0)
        std = tf.sqrt(tf.reduce_sum(tf.square(xt - mean), 0) / 15.0)
        reference = tf.reduce_sum(weights * ((xt - mean) / std * r.astype(np.float32) + d.astype(np.float32)))
    np.testing.assert_allclose(layer_tape.gradient(weighted, xt).numpy(), tape.gradient(reference, xt).numpy(),
                               rtol=1e-3, atol=1e-4)


def batch(rng, rows, obs_dim, action_dim):
    return (rng.normal(size=(rows, obs_dim)).astype(np.float32),
            rng.uniform(-1, 1, (rows, action_dim)).astype(np.float32),
            rng.normal(size=rows).astype(np.float32), rng.normal(size=(rows, obs_dim)).astype(np.float32),
            (rng.uniform(size=rows) < 0.3).astype(np.float32))


def numpy_critic(critic, x):
    """The critic's forward pass in training mode, in NumPy: batch statistics at each batch_renorm layer."""
    for layer in critic.layers[1:]:
        if isinstance(layer, BatchRenorm):
            mean, var = x.mean(0), x.var(0, ddof=1)
            x = layer.scale.numpy() * (x - mean) / np.sqrt(var + layer.epsilon) + layer.bias.numpy()
        else:
            kernel, bias = (w.numpy() for w in layer.weights)
            x = x @ kernel + bias
            x = np.maximum(x, 0) if layer.get_config()["activation"] == "relu" else x
    return x[:, 0]


def crossq(**kwargs):
    return CrossQ(make_envs("Pendulum-v1", n_envs=1, seed=0), buffer=ReplayBuffer(100, 10, 8), seed=0, **kwargs)


def test_crossq_critics_learn_on_the_joint_batch_without_target_networks():
    agent = crossq(gamma=0.9, ent_coef=0.2, critic_layers=[16, 8], lr=1e-3)
    assert agent.target_critics == [] and not any("target" in name for name in agent.models())
    assert [layer.units for layer in agent.critics[0].layers if hasattr(layer, "units")] == [16, 8, 1]
    assert [layer.units for layer in agent.actor.layers if hasattr(layer, "units")] == [256, 256, 2]
    obs, actions, rewards, next_obs, terminated = batch(np.random.default_rng(1), 6, 3, 1)
    next_actions = np.random.default_rng(2).uniform(-1, 1, (6, 1)).astype(np.float32)
    next_log_prob = np.random.default_rng(3).normal(size=6).astype(np.float32)
    agent.sample = lambda o, rng=None, training=False: (tf.constant(next_actions), tf.constant(next_log_prob))
    joint = np.concatenate([np.concatenate([obs, actions], 1), np.concatenate([next_obs, next_actions], 1)])
    q = [numpy_critic(c, joint) for c in agent.critics]  # before the step changes the weights
    next_q = np.minimum(q[0][6:], q[1][6:])
    targets = rewards + 0.9 * (1 - terminated) * (next_q - 0.2 * next_log_prob)
    expected = 0.5 * sum(np.mean((qi[:6] - targets) ** 2) for qi in q)
    loss = agent.critic_step(*(tf.constant(v) for v in (obs, actions, rewards, next_obs, terminated)))
    assert float(loss) == pytest.approx(expected, rel=1e-4)
    first = agent.critics[0].layers[1]  # its statistics: of the 12 joint rows, once
    np.testing.assert_allclose(first.running_mean.numpy(), 0.01 * joint.mean(0), rtol=1e-5)
    assert int(first.steps.numpy()) == 1


def test_crossq_steps_its_actor_every_policy_delay_critic_steps():
    agent = crossq(policy_delay=3, critic_layers=[8, 8])
    rows = [tf.constant(v) for v in batch(np.random.default_rng(4), 8, 3, 1)]
    actor_norm = agent.actor.layers[1]
    before = [w.numpy().copy() for w in agent.actor.trainable_variables]
    for step in range(1, 7):
        agent.update_step(*rows)
        assert int(actor_norm.steps.numpy()) == step // 3  # the actor's statistics learn in its own steps only
        changed = any(not np.array_equal(a, w.numpy()) for a, w in zip(before, agent.actor.trainable_variables))
        assert changed == (step >= 3)
    assert int(agent.critics[1].layers[1].steps.numpy()) == 6


def test_crossq_optimizers_are_sb3_contribs():
    agent = crossq()
    assert (agent.actor_optimizer.beta_1, agent.critic_optimizer.beta_1) == (0.9, 0.9)  # (the base's; preset: 0.5)
    assert agent.ent_coef_optimizer.beta_1 == 0.9 and agent.ent_coef_optimizer.epsilon == 1e-8
    assert crossq(beta1=0.5).critic_optimizer.beta_1 == 0.5


def test_batch_renorm_models_are_crossqs_alone():
    with pytest.raises(UserError, match="model=mlp_batch_renorm has batch_renorm layers, which only CrossQ"):
        SAC(make_envs("Pendulum-v1", n_envs=1, seed=0), model="mlp_batch_renorm", buffer=ReplayBuffer(100, 10, 8))


@pytest.mark.parametrize("kwargs, says", [
    ({"critic_layers": [64]}, "agent.critic_layers=\\[64\\] gives 1 sizes, but model=mlp_batch_renorm has 2"),
    ({"critic_layers": "big"}, "agent.critic_layers=big: use a list of layer sizes"),
    ({"policy_delay": 0}, "agent.policy_delay=0: use a whole number of 1 or more"),
    ({"tau": 0.005}, "agent.tau=0.005: CrossQ has no target networks"),
])
def test_crossq_refuses_bad_options(kwargs, says):
    with pytest.raises(UserError, match=says):
        crossq(**kwargs)


def shipped(key):
    row = find_row("crossq", key, atari=False, row=key)
    assert row is not None and row.key == key
    return translate(row)


def test_crossq_rows():
    t = shipped("HalfCheetah-v4")
    a = t["agent"]
    assert (a["lr"], a["policy_delay"], a["critic_layers"], a["gamma"]) == (1e-3, 3, [2048, 2048], 0.99)
    assert (a["optimizer"], a["beta1"], a["beta2"], a["opt_epsilon"]) == ("adam", 0.5, 0.999, 1e-8)
    assert "tau" not in a and t["run"]["max_steps"] == 5_000_000
    assert t["buffer"] == {"max_size": 1_000_000, "initial_size": 5000, "batch_size": 256}
    kinds = [(layer["type"], layer.get("units")) for layer in t["model"]["layers"]]
    assert kinds == [("batch_renorm", None), ("dense", 256), ("batch_renorm", None), ("dense", 256),
                     ("batch_renorm", None), ("dense", None)]
    assert t["model"]["layers"][0] == {"type": "batch_renorm", "momentum": 0.01, "epsilon": 0.001,
                                       "warmup_steps": 100_000}
    p = shipped("Pendulum-v1")  # net_arch=[256, 256]: the critics' too; policy_delay 2
    assert (p["agent"]["critic_layers"], p["agent"]["policy_delay"], p["run"]["max_steps"]) == ([256, 256], 2, 20_000)
    m = shipped("MountainCarContinuous-v0")
    assert (m["agent"]["use_sde"], m["agent"]["use_expln"], m["agent"]["log_std_init"]) == (True, True, -1.0)
    assert (m["agent"]["train_freq"], m["agent"]["gradient_steps"], m["agent"]["critic_layers"]) == (32, 32, [64, 64])


def test_crossq_row_without_batch_norm_and_a_refused_option(tmp_path):
    path = tmp_path / "crossq.yml"
    path.write_text("Pendulum-v1:\n  policy: MlpPolicy\n  policy_kwargs: \"dict(batch_norm=False, net_arch=[32])\"\n"
                    "BipedalWalker-v3:\n  policy: MlpPolicy\n  tau: 0.01\n")
    t = translate(find_row("crossq", "Pendulum-v1", atari=False, path=path))
    assert [layer["type"] for layer in t["model"]["layers"]] == ["dense", "dense"]
    assert t["agent"]["critic_layers"] == [32]
    with pytest.raises(UserError, match="tau is not an option of SB3's CROSSQ"):
        translate(find_row("crossq", "BipedalWalker-v3", atari=False, path=path))


def test_crossq_bad_input_is_one_line_on_the_command_line(tmp_path):
    import os

    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    for args, says in ((["agent=crossq", "env=cartpole"], "agent=crossq does not support discrete actions"),
                       (["agent=crossq", "env=pendulum", "agent.critic_layers=[8]"], "agent.critic_layers=[8]")):
        result = run_cli(args, tmp_path, env, 300)
        assert result.returncode != 0 and len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert says in result.stderr, result.stderr
    assert not (tmp_path / "outputs").exists()
