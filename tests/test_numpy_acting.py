"""NumPy mirrors of MLP models and the NumPy rollout agree with the TensorFlow models they mirror."""
import numpy as np
import pytest
import tensorflow as tf

from rlexp.agents import A2C, PPO, TRPO
from rlexp.envs.graph import NUMPY
from rlexp.envs.make import make_envs
from rlexp.models.networks import build_model
from rlexp.models.numpy_mirror import ACTIVATIONS, NumpyModel


@pytest.mark.parametrize("activation", sorted(ACTIVATIONS))
def test_mirror_matches_keras(activation):
    preset = {"layers": [{"units": 16, "activation": activation, "common": True},
                         {"units": 8, "activation": activation}, {"output": True}]}
    model = build_model(preset, (2, 3), {"policy": 4, "value": 1})  # 2-D input: flattened first
    x = np.random.default_rng(0).normal(size=(5, 2, 3)).astype(np.float32)
    mirror = NumpyModel.mirror(model)
    for ours, keras_out in zip(mirror([w.numpy() for w in model.weights], x), model(x)):
        np.testing.assert_allclose(ours, keras_out.numpy(), rtol=1e-5, atol=1e-5)


def test_no_mirror_for_conv_models():
    preset = {"layers": [{"type": "conv", "filters": 4, "kernel": 3, "common": True},
                         {"type": "flatten", "common": True}, {"output": True}]}
    model = build_model(preset, (4, 8, 8), {"q": 2}, input_dtype=np.uint8, channels_first=True)
    assert NumpyModel.mirror(model) is None


def collect_and_check_against_the_policy(agent, rtol, atol, log_prob_atol):
    """One rollout as NumPy arrays; its values and log probs must be the TF policy's for its obs and actions."""
    batch = {k: v.numpy() for k, v in agent.collect().items()}
    rows = batch["values"].size
    out, values = agent.forward(tf.constant(batch["obs"].reshape(rows, -1)))
    log_probs, _ = agent.log_prob_entropy(out, tf.constant(batch["actions"].reshape(rows, *batch["actions"].shape[2:])))
    np.testing.assert_allclose(batch["values"].reshape(rows), values.numpy(), rtol=rtol, atol=atol)
    np.testing.assert_allclose(batch["log_probs"].reshape(rows), log_probs.numpy(), rtol=rtol, atol=log_prob_atol)
    return batch


@pytest.mark.parametrize("agent_cls,env_id,kwargs", [
    (PPO, "CartPole-v1", {}), (A2C, "Pendulum-v1", {}), (TRPO, "CartPole-v1", {}),
    (PPO, "Pendulum-v1", {"state_dependent_std": True})])
def test_numpy_rollout_matches_the_tf_policy(agent_cls, env_id, kwargs):
    envs = make_envs(env_id, n_envs=3, seed=0, max_episode_steps=7, vectorization="sync")
    agent = agent_cls(envs, seed=0, n_steps=10, mini_batches=1, **kwargs) if agent_cls is not A2C else \
        agent_cls(envs, seed=0, n_steps=10, **kwargs)
    assert agent._use_numpy_rollout()
    batch = collect_and_check_against_the_policy(agent, rtol=1e-4, atol=1e-5, log_prob_atol=1e-4)
    np.testing.assert_allclose(batch["last_values"], agent.value(tf.constant(batch["last_obs"])).numpy(), rtol=1e-4,
                               atol=1e-5)
    assert batch["dones"].sum() > 0 and agent.steps == 30


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_a2c_rolls_out_a_graph_env_in_the_graph(env_id):
    envs = make_envs(env_id, n_envs=4, seed=0, max_episode_steps=7)
    agent = A2C(envs, seed=0, n_steps=10)
    assert agent.steps_in_graph and not agent._use_numpy_rollout()
    batch = collect_and_check_against_the_policy(agent, rtol=1e-5, atol=1e-6, log_prob_atol=1e-5)
    # the graph's final obs came back, and they are what the env's state (copied back from the graph) shows
    np.testing.assert_array_equal(agent._obs, envs.observe(NUMPY, envs.state))
    np.testing.assert_array_equal(batch["last_obs"], agent._obs)
    assert agent.steps == 40 and (batch["dones"][6] == 1).all()  # every episode is truncated after 7 steps
    ends = [step for step, *_ in agent._finished]
    assert ends == [4 * 6 + i + 1 for i in range(4)]
    if env_id == "CartPole-v1":  # +1 per step, and truncated steps bootstrap with the final obs's value
        assert [ret for _, ret, *_ in agent._finished] == [7.0] * 4
        assert (batch["rewards"][6] != 1).all() and (batch["rewards"][:6] == 1).all()


def test_fused_cycles_match_one_cycle_per_call():
    """Many rollout + update cycles in one graph call learn exactly what one cycle per call learns: each
    rollout acts with the weights the previous update wrote."""
    import keras

    def train(cycles_per_call):
        keras.utils.set_random_seed(0)
        agent = A2C(make_envs("CartPole-v1", n_envs=2, seed=0), seed=0, n_steps=4)
        agent.updates_per_call = cycles_per_call
        agent.fit(max_steps=8 * 64, progress="none")
        return agent.steps, [w.numpy() for w in agent.model.weights]

    (fused_steps, fused), (single_steps, single) = train(32), train(1)
    assert fused_steps == single_steps == 512
    for a, b in zip(fused, single):
        np.testing.assert_array_equal(a, b)


def test_dqn_numpy_collection_acts_greedily_with_the_q_network():
    from rlexp.agents import DQN
    from rlexp.buffers import ReplayBuffer

    agent = DQN(make_envs("CartPole-v1", n_envs=2, seed=0), buffer=ReplayBuffer(max_size=100), seed=0,
                train_freq=20, model={"layers": [{"units": 32, "activation": "relu"}, {"output": True}]})
    assert agent._mirror is not None
    agent._collect_numpy(epsilon=0.0, steps=agent.train_freq)
    data = agent.buffer.data
    greedy = tf.argmax(agent.model(data["obs"][:40]), axis=-1).numpy()
    np.testing.assert_array_equal(data["actions"][:40], greedy)
    agent._collect_numpy(epsilon=1.0, steps=agent.train_freq)  # all random: both actions show up
    assert set(np.unique(data["actions"][40:80])) == {0, 1}


def test_dqn_numpy_collection_is_the_graph_collection_bit_for_bit():
    from rlexp.agents import DQN
    from rlexp.buffers import ReplayBuffer

    def run(numpy_acting, weights=None):
        agent = DQN(make_envs("CartPole-v1", n_envs=2, seed=0), buffer=ReplayBuffer(max_size=1000, initial_size=64,
                    batch_size=16), seed=0, train_freq=16, gradient_steps=4, epsilon_decay_steps=300,
                    model={"layers": [{"units": 16, "activation": "relu"}, {"output": True}]}, numpy_acting=numpy_acting)
        if weights is not None:  # the same initial weights (Keras's initialisers draw from a global seed)
            agent.model.set_weights(weights)
            agent.target.set_weights(weights)
        initial = agent.model.get_weights()
        agent.max_steps = 10_000
        for _ in range(15):
            agent.train_iteration()
        return agent.buffer.data["actions"][:agent.buffer.size], agent.model.get_weights(), initial

    actions_np, weights_np, initial = run(True)
    actions_tf, weights_tf, _ = run(False, initial)
    np.testing.assert_array_equal(actions_np, actions_tf)
    for a, b in zip(weights_np, weights_tf):
        np.testing.assert_array_equal(a, b)
