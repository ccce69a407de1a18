"""The batched envs (NumPy CartPole, graph Pendulum) behave like gymnasium's copies, with same-step restarts."""
import gymnasium as gym
import numpy as np
import pytest

from rlexp.envs import make_envs
from rlexp.errors import UserError
from rlexp.graph_envs import GraphCartPole, GraphPendulum


def test_vector_cartpole_matches_env_copies():
    n, limit = 4, 30
    batched = make_envs("CartPole-v1", n_envs=n, seed=0, vectorization="vector", max_episode_steps=limit)
    copies = [gym.make("CartPole-v1", max_episode_steps=limit) for _ in range(n)]
    for env, state in zip(copies, batched.state.T):
        env.reset(seed=0)
        env.unwrapped.state = state.copy()
    rng = np.random.default_rng(0)
    ends = truncations = 0
    for _ in range(200):
        actions = rng.integers(0, 2, n)
        obs, rewards, terminated, truncated, info = batched.step(actions)
        for i, env in enumerate(copies):
            o, r, term, trunc, _ = env.step(int(actions[i]))
            assert (r, term, trunc) == (rewards[i], terminated[i], truncated[i])
            if term or trunc:  # the batched env restarted: its last obs is in info; follow its new state
                np.testing.assert_allclose(info["final_obs"][i], o, rtol=1e-6, atol=1e-6)
                assert np.all(np.abs(obs[i]) <= 0.05)
                env.reset()
                env.unwrapped.state = batched.state[:, i].copy()
                ends, truncations = ends + 1, truncations + bool(trunc)
            else:
                np.testing.assert_allclose(obs[i], o, rtol=1e-6, atol=1e-6)
    assert ends > 10 and truncations > 0


def test_vector_needs_a_batched_env():
    with pytest.raises(UserError, match="vectorization=sync"):
        make_envs("Pendulum-v1", vectorization="vector")
    envs = make_envs("CartPole-v1", n_envs=2, vectorization="vector", render_mode="rgb_array")
    assert isinstance(envs, gym.vector.SyncVectorEnv)  # rendering uses env copies


def test_auto_vectorization_batches_only_where_it_pays():
    from rlexp.envs import SameStepCartPoleVectorEnv

    assert isinstance(make_envs("CartPole-v1", n_envs=8), GraphCartPole)
    assert isinstance(make_envs("CartPole-v1", n_envs=8, vectorization="vector"), SameStepCartPoleVectorEnv)
    assert isinstance(make_envs("CartPole-v1", n_envs=1), gym.vector.SyncVectorEnv)
    assert isinstance(make_envs("Pendulum-v1", n_envs=8, vectorization="sync"), gym.vector.SyncVectorEnv)
    assert isinstance(make_envs("Pendulum-v1", n_envs=1), GraphPendulum)  # graph envs first, any count
    assert isinstance(make_envs("Pendulum-v1", kwargs={"g": 9.81}), gym.vector.SyncVectorEnv)


def test_graph_needs_a_graph_env():
    with pytest.raises(UserError, match="vectorization=sync"):
        make_envs("Acrobot-v1", vectorization="graph")
    assert isinstance(make_envs("Pendulum-v1", vectorization="graph", render_mode="rgb_array"), gym.vector.SyncVectorEnv)


def test_graph_pendulum_matches_gymnasium_pendulum():
    n, limit = 3, 40
    batched = make_envs("Pendulum-v1", n_envs=n, seed=0, max_episode_steps=limit)
    copies = [gym.make("Pendulum-v1").unwrapped for _ in range(n)]
    rng = np.random.default_rng(0)
    truncations = 0
    for t in range(100):
        for env, state in zip(copies, batched.state.T):
            env.state = state.copy()
        actions = rng.uniform(-3, 3, (n, 1)).astype(np.float32)  # outside the bounds too: both clip
        obs, rewards, terminated, truncated, info = batched.step(actions)
        assert not terminated.any() and np.array_equal(truncated, np.full(n, (t + 1) % limit == 0))
        for i, env in enumerate(copies):
            o, r, *_ = env.step(actions[i])
            # gymnasium's scalar float32 maths rounds 0.001 * u**2 differently in the last bit
            np.testing.assert_allclose(rewards[i], r, rtol=1e-8)
            np.testing.assert_array_equal(info["final_obs"][i] if truncated[i] else obs[i], o)
        if truncated.any():
            truncations += 1
            assert np.all(np.abs(batched.state[0]) <= np.pi) and np.all(np.abs(batched.state[1]) <= 1)
            np.testing.assert_array_equal(obs[:, 2], batched.state[1].astype(np.float32))
    assert truncations == 2


def test_graph_cartpole_is_the_numpy_batched_cartpole_bit_for_bit():
    batched, graph = (make_envs("CartPole-v1", n_envs=8, seed=3, vectorization=v) for v in ("vector", "graph"))
    np.testing.assert_array_equal(batched.state, graph.state)
    rng = np.random.default_rng(0)
    ends = 0
    for _ in range(1500):
        actions = rng.integers(0, 2, 8)
        (o1, r1, te1, tr1, i1), (o2, r2, te2, tr2, i2) = batched.step(actions), graph.step(actions)
        for a, b in [(o1, o2), (r1, r2), (te1, te2), (tr1, tr2), (i1.get("final_obs"), i2.get("final_obs"))]:
            np.testing.assert_array_equal(a, b)
        ends += te1.sum()
    assert ends > 50


@pytest.mark.parametrize("env_id", ["Pendulum-v1", "CartPole-v1"])
def test_graph_step_matches_the_numpy_step(env_id):
    import tensorflow as tf

    n = 2
    in_graph, in_numpy = (make_envs(env_id, n_envs=n, seed=0, max_episode_steps=30, vectorization="graph")
                          for _ in range(2))
    in_graph.to_graph()
    rng = np.random.default_rng(1)
    if env_id == "Pendulum-v1":
        actions = rng.uniform(-2, 2, (70, n, 1)).astype(np.float32)
    else:
        actions = rng.integers(0, 2, (70, n))

    @tf.function(autograph=False)
    def steps(actions):  # several steps in one graph, the state carried by the env's variables
        return [in_graph.graph_step(a) for a in tf.unstack(actions)]

    restarts = 0
    for chunk in (actions[:30], actions[30:60], actions[60:]):  # each of the first two ends with a truncation
        for a, outputs in zip(chunk, steps(tf.constant(chunk))):
            obs, rewards, terminated, truncated, final_obs = (x.numpy() for x in outputs)
            o, r, term, trunc, info = in_numpy.step(a)
            np.testing.assert_array_equal(truncated, trunc)
            np.testing.assert_array_equal(terminated, term)
            # TF's and NumPy's sin/cos may differ in the last bit of a float64
            np.testing.assert_allclose(final_obs, info["final_obs"] if info else o, rtol=1e-6, atol=1e-7)
            np.testing.assert_allclose(rewards, r, rtol=1e-12)
            if info:  # the restarts draw from different generators: follow the graph's
                restarts += 1
                in_numpy.state[:, term | trunc] = np.nan  # (synced below, after the chunk)
            else:
                np.testing.assert_allclose(obs, o, rtol=1e-6, atol=1e-7)
            if np.isnan(in_numpy.state).any():
                break
        in_graph.from_graph()
        in_numpy.state, in_numpy.elapsed = in_graph.state.copy(), in_graph.elapsed.copy()
    assert restarts >= 2
    if env_id == "Pendulum-v1":  # never terminates: truncated at steps 30 and 60
        assert in_graph.elapsed.tolist() == [10, 10]
