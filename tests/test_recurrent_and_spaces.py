"""VPG, recurrent policies, MultiDiscrete/MultiBinary actions, Dict/Tuple observations, mixed precision and
env wrappers, each checked against a hand computation or an independent NumPy formulation."""
import sys
from pathlib import Path

import gymnasium as gym
import keras
import numpy as np
import pytest
import scipy.special
import tensorflow as tf

from rlexp.agents import A2C, DQN, PPO, TRPO, VPG
from rlexp.agents import distributions as D
from rlexp.envs.make import make_envs
from rlexp.envs.spaces import observation_parts
from rlexp.errors import UserError
from rlexp.models.networks import build_model

sys.path.insert(0, str(Path(__file__).parent))
import space_envs  # noqa: E402,F401  (registers the Spaces-* envs)

LSTM = {"name": "lstm", "initializer": "glorot_uniform", "gain": 1.0,
        "layers": [{"type": "lstm", "units": 5}, {"type": "dense", "units": 6, "activation": "relu"},
                   {"type": "dense", "output": True}]}
SHARED_GRU = {"name": "gru", "layers": [{"type": "gru", "units": 4, "common": True}, {"type": "dense", "output": True}]}


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def numpy_lstm(layer_weights, xs, starts, h, c):
    """Keras's LSTM cell (gates i, f, c, o; sigmoid/tanh) stepped in NumPy, zeroing the state at starts."""
    kernel, recurrent, bias = layer_weights
    outputs = []
    for x, start in zip(xs, starts):
        h, c = h * (1 - start[:, None]), c * (1 - start[:, None])
        i, f, g, o = np.split(x @ kernel + h @ recurrent + bias, 4, axis=-1)
        c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
        h = sigmoid(o) * np.tanh(c)
        outputs.append(h)
    return np.stack(outputs), h, c


# ----- VPG ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("baseline", ["none", "value"])
def test_vpg_update_uses_discounted_returns_and_the_baseline_loss(baseline):
    envs = make_envs("CartPole-v1", 2, seed=0, vectorization="sync")
    agent = VPG(envs, model={"layers": [{"type": "dense", "units": 8, "activation": "tanh"},
                                        {"type": "dense", "output": True}]}, seed=0, n_steps=30, gamma=0.9,
                baseline=baseline, normalize_advantage=False, entropy_regularization=0.0)
    heads = [layer.name for layer in agent.model.layers if layer.name in ("policy", "value")]
    assert heads == (["policy"] if baseline == "none" else ["policy", "value"])
    batch = agent.collect()
    rewards, dones = batch["rewards"].numpy(), batch["dones"].numpy()
    obs = batch["obs"].numpy().reshape(60, 4)
    out = agent.model(obs)
    logits = (out[0] if isinstance(out, list) else out).numpy()
    values = out[1].numpy()[:, 0] if baseline == "value" else np.zeros(60)
    last = batch["last_values"].numpy()
    if baseline == "none":
        np.testing.assert_array_equal(last, 0.0)
    returns = np.zeros((30, 2))
    for n in range(2):  # discounted sums, restarting after each episode end, bootstrapped at the rollout's end
        running = last[n]
        for t in reversed(range(30)):
            running = rewards[t, n] + 0.9 * running * (1.0 - dones[t, n])
            returns[t, n] = running
    returns = returns.reshape(60)
    actions = batch["actions"].numpy().reshape(60)
    log_p = scipy.special.log_softmax(logits, axis=1)[np.arange(60), actions]
    advantages = returns - values
    metrics = tf.function(agent.update)(batch)
    np.testing.assert_allclose(metrics["policy_loss"].numpy(), -np.mean(log_p * advantages), rtol=1e-4, atol=1e-5)
    expected_value_loss = 0.5 * np.mean((returns - values) ** 2)
    np.testing.assert_allclose(metrics["value_loss"].numpy(), expected_value_loss, rtol=1e-4)


def test_vpg_without_baseline_refuses_gae():
    with pytest.raises(UserError, match="gae_lambda needs agent.baseline=value"):
        VPG(make_envs("CartPole-v1", 1, seed=0), baseline="none", gae_lambda=0.95)


# ----- recurrent models ---------------------------------------------------------------------------
def test_lstm_model_resets_its_state_exactly_at_episode_starts():
    model = build_model(LSTM, (3,), {"policy": 2, "value": 1})
    assert [tuple(t.shape) for t in model.inputs] == [(None, None, 3), (None, None)] + [(None, 5)] * 4  # 2 heads x (h, c)
    rng = np.random.default_rng(0)
    xs = rng.normal(size=(2, 6, 3)).astype(np.float32)
    starts = np.array([[0, 0, 1, 0, 0, 1], [1, 0, 0, 0, 1, 0]], np.float32)
    h0, c0 = rng.normal(size=(2, 2, 5)).astype(np.float32)
    policy, value, h, c, _, _ = [t.numpy() for t in model([xs, starts, h0, c0, h0, c0])]
    lstm = next(layer for layer in model.layers if isinstance(layer, keras.layers.RNN))
    hidden, h_ref, c_ref = numpy_lstm([w.numpy() for w in lstm.weights], xs.transpose(1, 0, 2), starts.T, h0, c0)
    np.testing.assert_allclose(h, h_ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(c, c_ref, rtol=1e-5, atol=1e-6)
    tower = [layer for layer in model.layers if layer.name.startswith("dense")][0]
    kernel, bias = [w.numpy() for w in tower.weights]
    head_k, head_b = [w.numpy() for w in model.get_layer("policy").weights]
    expected = np.maximum(hidden.transpose(1, 0, 2) @ kernel + bias, 0) @ head_k + head_b
    np.testing.assert_allclose(policy, expected, rtol=1e-4, atol=1e-5)
    late = xs.copy()
    late[0, :2] += 5.0  # changing the steps before env 0's start at t=2 changes nothing from t=2 on
    changed = model([late, starts, h0, c0, h0, c0])[0].numpy()
    np.testing.assert_allclose(changed[0, 2:], policy[0, 2:], rtol=1e-5, atol=1e-6)
    assert not np.allclose(changed[0, :2], policy[0, :2])


class FixedLength(gym.Env):
    """Observations count the steps; every episode ends (terminates) after `length` steps."""

    observation_space = gym.spaces.Box(-10, 10, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, length):
        self.length = length

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0, 1.0], np.float32), {}

    def step(self, action):
        self.t += 1
        return np.array([self.t / 10, float(action)], np.float32), 1.0, self.t >= self.length, False, {}


def fixed_length_envs(lengths):
    return gym.vector.SyncVectorEnv([lambda n=n: FixedLength(n) for n in lengths],
                                    autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)


def test_recurrent_rollout_flags_episode_starts_and_its_values_follow_the_numpy_recurrence():
    agent = PPO(fixed_length_envs([3, 4]), model=LSTM, seed=0, n_steps=10, mini_batches=1)
    first = agent.collect()
    batch = agent.collect()  # the second rollout starts from the first one's carried state
    starts, dones = batch["starts"].numpy(), batch["dones"].numpy()
    np.testing.assert_array_equal(first["starts"].numpy()[0], [1, 1])
    np.testing.assert_array_equal(starts[1:], dones[:-1])
    np.testing.assert_array_equal(starts[0], first["dones"].numpy()[-1])
    np.testing.assert_array_equal(dones[:, 0], [(agent_t + 1) % 3 == 0 for agent_t in range(10, 20)])
    # values of the whole rollout, recomputed in NumPy from the stored first state with resets at the flags
    value_lstm = [layer for layer in agent.model.layers if isinstance(layer, keras.layers.RNN)][1]
    h0, c0 = batch["state_2"].numpy()[0], batch["state_3"].numpy()[0]
    hidden, _, _ = numpy_lstm([w.numpy() for w in value_lstm.weights], batch["obs"].numpy(), starts, h0, c0)
    value_dense = [layer for layer in agent.model.layers if layer.name.startswith("dense")][1]
    k, b = [w.numpy() for w in value_dense.weights]
    vk, vb = [w.numpy() for w in agent.model.get_layer("value").weights]
    np.testing.assert_allclose(batch["values"].numpy(), (np.maximum(hidden @ k + b, 0) @ vk + vb)[..., 0],
                               rtol=1e-4, atol=1e-5)
    # the stored state at each step is the state the previous step produced (unless an episode started)
    assert not np.allclose(batch["state_0"].numpy()[1:], 0.0)


def test_sequence_minibatches_keep_each_envs_order():
    agent = PPO(make_envs("CartPole-v1", 3, seed=0, vectorization="sync"), model=SHARED_GRU, seed=0, n_steps=8,
                sequence_length=4, mini_batches=2)
    assert agent.n_sequences == 6
    T, N = 8, 3
    code = np.arange(T)[:, None] * 10 + np.arange(N)[None, :]  # step * 10 + env
    batch = {"obs": tf.constant(np.repeat(code[..., None], 4, -1), tf.float32),
             "starts": tf.constant(code % 2, tf.float32),
             "state_0": tf.constant(np.repeat(code[..., None], 4, -1) + 0.5, tf.float32)}
    count, select = agent.training_units(batch, [tf.constant(code, tf.float32)])
    assert count == 6
    inputs, flat = select(tf.constant([4, 0]))  # sequence 4 = second half of env 1, sequence 0 = first half of env 0
    np.testing.assert_array_equal(inputs["obs"].numpy()[..., 0], [[41, 0], [51, 10], [61, 20], [71, 30]])
    np.testing.assert_array_equal(inputs["states"][0].numpy()[:, 0], [41.5, 0.5])  # the state at each sequence start
    np.testing.assert_array_equal(flat.numpy(), [41, 0, 51, 10, 61, 20, 71, 30])  # time-major, like the outputs
    np.testing.assert_array_equal(inputs["starts"].numpy(), [[1, 0], [1, 0], [1, 0], [1, 0]])


def test_recurrent_act_carries_the_state_and_resets_it_at_episode_starts():
    agent = PPO(make_envs("CartPole-v1", 2, seed=0, vectorization="sync"), model=LSTM, seed=0, mini_batches=1)
    xs = np.random.default_rng(1).normal(size=(5, 2, 4)).astype(np.float32)
    starts = np.array([[1, 1], [0, 0], [0, 1], [0, 0], [1, 0]], bool)
    outputs = agent.model([xs.transpose(1, 0, 2), starts.T.astype(np.float32)] + [np.zeros((2, 5), np.float32)] * 4)
    expected = np.argmax(outputs[0].numpy(), axis=-1).T
    actions = np.stack([agent.act(x, s) for x, s in zip(xs, starts)])
    np.testing.assert_array_equal(actions, expected)


def test_trpo_and_off_policy_agents_refuse_recurrent_models():
    for cls in (TRPO, DQN):
        with pytest.raises(UserError, match="recurrent"):
            cls(make_envs("CartPole-v1", 1, seed=0), model=LSTM, **({"buffer": None} if cls is TRPO else {}))


# ----- MultiDiscrete and MultiBinary ---------------------------------------------------------------
def test_multi_categorical_and_bernoulli_match_numpy():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(4, 5)).astype(np.float64)
    actions = np.array([[0, 1], [2, 0], [1, 1], [2, 1]])
    p_a, p_b = scipy.special.softmax(logits[:, :3], axis=1), scipy.special.softmax(logits[:, 3:], axis=1)
    rows = np.arange(4)
    np.testing.assert_allclose(D.multi_categorical_log_prob(logits, [3, 2], actions).numpy(),
                               np.log(p_a[rows, actions[:, 0]]) + np.log(p_b[rows, actions[:, 1]]), rtol=1e-10)
    entropy = -(p_a * np.log(p_a)).sum(1) - (p_b * np.log(p_b)).sum(1)
    np.testing.assert_allclose(D.multi_categorical_entropy(logits, [3, 2]).numpy(), entropy, rtol=1e-10)
    np.testing.assert_array_equal(D.multi_categorical_mode(logits, [3, 2]).numpy(),
                                  np.stack([p_a.argmax(1), p_b.argmax(1)], 1))
    bits = (rng.random((4, 5)) < 0.5).astype(np.int64)
    p = 1 / (1 + np.exp(-logits))
    np.testing.assert_allclose(D.bernoulli_log_prob(logits, bits).numpy(),
                               np.sum(np.where(bits == 1, np.log(p), np.log(1 - p)), 1), rtol=1e-10)
    np.testing.assert_allclose(D.bernoulli_entropy(logits).numpy(),
                               np.sum(-p * np.log(p) - (1 - p) * np.log(1 - p), 1), rtol=1e-10)


def test_bernoulli_and_multi_categorical_samples_follow_their_probabilities():
    rng = tf.random.Generator.from_seed(0)
    logits = tf.constant([[2.0, -1.0, 0.0]] * 20000)
    np.testing.assert_allclose(D.bernoulli_sample(logits, rng).numpy().mean(0), 1 / (1 + np.exp(-np.array([2.0, -1, 0]))),
                               atol=0.01)
    sample = D.multi_categorical_sample(tf.constant([[0.0, np.log(3.0), 5.0, 0.0]] * 20000), [2, 2], rng).numpy()
    np.testing.assert_allclose([sample[:, 0].mean(), sample[:, 1].mean()], [0.75, 1 / (1 + np.exp(5))], atol=0.01)


@pytest.mark.parametrize("cls", [PPO, A2C, VPG])
@pytest.mark.parametrize("kind", ["multi_discrete", "multi_binary"])
def test_multi_action_agents_learn_the_matching_task(cls, kind):
    envs = make_envs(f"Spaces-{kind}-box-v0", 4, seed=0)
    kwargs = {"n_steps": 32, "mini_batches": 2} if cls is PPO else {"n_steps": 16}
    agent = cls(envs, seed=0, lr=3e-3, **kwargs)
    agent.fit(8000 if cls is not A2C else 12000)
    best = 2.0 if kind == "multi_discrete" else 3.0  # reward per step for an always-right action
    assert np.mean(agent.evaluate(make_envs(f"Spaces-{kind}-box-v0", 2, seed=1), 4)) > 0.7 * 20 * best  # random: 0.5


# ----- Dict and Tuple observations ---------------------------------------------------------------
def test_dict_and_tuple_observations_are_encoded_per_part():
    env = gym.make("Spaces-discrete-dict-v0")
    parts = observation_parts(env.observation_space)
    assert [(k, s.shape) for k, s in parts] == [("image", (36, 36, 1)), ("vector", (3,))]
    flat_dim = gym.spaces.flatdim(env.observation_space)
    model = build_model({"layers": [{"type": "dense", "units": 16, "activation": "tanh", "common": True},
                                    {"type": "dense", "output": True}],
                         "encoders": {"vector": [{"type": "dense", "units": 7, "activation": "tanh"}]}},
                        (flat_dim,), {"policy": 3, "value": 1}, parts=parts)
    concat = [layer for layer in model.layers if type(layer).__name__ == "Concatenate"][0]
    assert tuple(concat.output.shape) == (None, 64 + 7)  # Nature CNN: 36x36 -> 8 -> 3 -> 1x1x64; vector: 7
    convs = [layer for layer in model.layers if type(layer).__name__ == "Conv2D"]
    assert [tuple(c.output.shape) for c in convs] == [(None, 8, 8, 32), (None, 3, 3, 64), (None, 1, 1, 64)]
    tuple_parts = observation_parts(gym.make("Spaces-discrete-tuple-v0").observation_space)
    assert [(k, type(s).__name__) for k, s in tuple_parts] == [("0", "Box"), ("1", "Discrete")]


def test_dict_encoders_split_the_flat_observation_where_gymnasium_flattens_it():
    env = gym.make("Spaces-discrete-dict-v0")
    obs, _ = env.reset(seed=0)
    flat = gym.spaces.flatten(env.observation_space, obs)
    parts = observation_parts(env.observation_space)
    model = build_model({"layers": [{"type": "dense", "output": True}],
                         "encoders": {"image": [{"type": "flatten"}], "vector": []}},
                        (flat.size,), {"policy": 1}, parts=parts)
    concat = [layer for layer in model.layers if type(layer).__name__ == "Concatenate"][0]
    features = keras.Model(model.inputs, concat.output)(flat[None].astype(np.float32)).numpy()[0]
    np.testing.assert_allclose(features, np.concatenate([obs["image"].reshape(-1) / 255.0, obs["vector"]]), rtol=1e-6)


def test_agent_on_dict_observations_acts_on_raw_dict_batches():
    envs = make_envs("Spaces-discrete-dict-v0", 2, seed=0)
    agent = PPO(envs, seed=0, n_steps=16, mini_batches=1)
    agent.fit(64)
    assert agent.obs_shape == (36 * 36 + 3,)
    raw, _ = make_envs("Spaces-discrete-dict-v0", 3, seed=1).reset(seed=1)
    assert agent.act(raw).shape == (3,)


# ----- mixed precision ---------------------------------------------------------------------------
@pytest.mark.parametrize("precision", ["bfloat16", "float16"])
def test_mixed_precision_keeps_outputs_losses_and_optimizer_state_in_float32(precision):
    agent = PPO(make_envs("CartPole-v1", 2, seed=0, vectorization="sync"), seed=0, mixed_precision=precision,
                n_steps=16, mini_batches=1)
    hidden = [layer for layer in agent.model.layers if layer.name.startswith("dense")]
    assert {layer.compute_dtype for layer in hidden} == {precision}
    assert {o.dtype for o in agent.model.outputs} == {"float32"}
    batch = agent.collect()
    obs = tf.reshape(batch["obs"], (32, 4))
    loss, metrics = agent.loss(obs, tf.reshape(batch["actions"], (32,)), tf.reshape(batch["log_probs"], (32,)),
                               tf.ones(32), tf.ones(32), tf.zeros(32))
    assert loss.dtype == tf.float32 and all(m.dtype == tf.float32 for m in metrics.values())
    before = [w.numpy().copy() for w in agent.model.trainable_variables]
    metrics = tf.function(agent.update)(batch)
    assert all(np.isfinite(float(v)) for v in metrics.values())
    assert {v.dtype for v in agent.optimizer.variables if "float" in v.dtype} == {"float32"}
    assert any(not np.array_equal(a, b.numpy()) for a, b in zip(before, agent.model.trainable_variables))
    assert (type(agent.optimizer).__name__ == "LossScaleOptimizer") == (precision == "float16")


def test_mixed_precision_is_refused_where_unsupported():
    with pytest.raises(UserError, match="mixed_precision is supported by PPO, A2C, VPG and the off-policy agents"):
        TRPO(make_envs("CartPole-v1", 1, seed=0), mixed_precision=True)
    with pytest.raises(UserError, match="run.mixed_precision='half' must be one of"):
        PPO(make_envs("CartPole-v1", 1, seed=0), mixed_precision="half")


# ----- env wrappers ------------------------------------------------------------------------------
def test_mask_velocity_zeroes_exactly_the_velocity_entries():
    plain = make_envs("CartPole-v1", 1, seed=3, vectorization="sync")
    masked = make_envs("CartPole-v1", 1, seed=3, wrappers=[{"_target_": "rlexp.envs.wrappers.MaskVelocity"}])
    a, _ = plain.reset(seed=3)
    b, _ = masked.reset(seed=3)
    np.testing.assert_array_equal(b, a * np.array([1, 0, 1, 0], np.float32))
    pend = make_envs("Pendulum-v1", 1, seed=0, wrappers=[{"_target_": "rlexp.envs.wrappers.MaskVelocity"}])
    assert pend.reset(seed=0)[0][0, 2] == 0.0
    explicit = make_envs("CartPole-v1", 1, seed=3, wrappers=[{"_target_": "rlexp.envs.wrappers.MaskVelocity",
                                                               "indices": [0]}])
    np.testing.assert_array_equal(explicit.reset(seed=3)[0], a * np.array([0, 1, 1, 1], np.float32))


def test_wrappers_outside_the_allow_list_and_unknown_modules_are_one_line():
    with pytest.raises(UserError, match="must be a gymnasium.wrappers or rlexp.envs.wrappers class"):
        make_envs("CartPole-v1", 1, wrappers=[{"_target_": "os.system"}])
    with pytest.raises(UserError, match="env.imports: module 'no_such_pkg' can't be imported"):
        make_envs("CartPole-v1", 1, imports=["no_such_pkg"])
    envs = make_envs("Spaces-discrete-box-v0", 1, imports=["space_envs"],
                     wrappers=[{"_target_": "gymnasium.wrappers.TimeAwareObservation"}])
    assert envs.single_observation_space.shape == (4,)
    assert make_envs("space_envs:Spaces-multi_binary-box-v0", 1).single_action_space.n == 3
