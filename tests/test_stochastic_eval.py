"""Stochastic evaluation (run.eval_deterministic, RL Zoo's --stochastic): actions drawn from each family's
policy with the evaluation generator, which training's draws never see."""
import numpy as np
import pytest
import tensorflow as tf

from rlexp.agents import DQN, PPO, SAC, TD3
from rlexp.build import resolve_eval_deterministic
from rlexp.envs.make import make_envs

ROWS = 4000  # binomial std of a fraction near 0.8: 0.0063


def fixed_logits(probs: list[float]):
    logits = tf.math.log(tf.constant([probs]))
    return lambda obs: (tf.tile(logits, [tf.shape(obs)[0], 1]), tf.zeros(tf.shape(obs)[:1]))


def test_categorical_policy_is_sampled_with_its_probabilities_and_training_draws_stay_put():
    agent = PPO(make_envs("CartPole-v1", 2, seed=0), seed=0, n_steps=16)
    agent.forward = fixed_logits([0.8, 0.2])
    before = agent.tf_rng.state.numpy().copy()
    obs = np.zeros((ROWS, 4), np.float32)
    assert (agent.act(obs) == 0).all()
    drawn = agent.act(obs, deterministic=False)
    assert set(np.unique(drawn)) == {0, 1}
    assert abs((drawn == 0).mean() - 0.8) < 0.03
    np.testing.assert_array_equal(agent.tf_rng.state.numpy(), before)


def test_gaussian_policy_is_sampled_around_its_mean_with_its_std():
    agent = PPO(make_envs("Pendulum-v1", 2, seed=0), seed=0, n_steps=16, log_std_init=-1.0)
    agent.forward = lambda obs: (tf.fill([tf.shape(obs)[0], 1], 0.5), tf.zeros(tf.shape(obs)[:1]))
    obs = np.zeros((ROWS, 3), np.float32)
    np.testing.assert_allclose(agent.act(obs), 0.5)
    drawn = agent.act(obs, deterministic=False)[:, 0]
    assert abs(drawn.mean() - 0.5) < 0.02 and abs(drawn.std() - np.exp(-1.0)) < 0.02


def test_dqn_draws_epsilon_greedy_with_its_final_exploration_rate():
    agent = DQN(make_envs("CartPole-v1", 2, seed=0), seed=0, epsilon_end=0.5)
    agent.model = lambda obs: tf.tile(tf.constant([[1.0, 0.0]]), [tf.shape(obs)[0], 1])
    obs = np.zeros((ROWS, 4), np.float32)
    assert (agent.act(obs) == 0).all()
    # greedy action 0 with probability 0.5, a uniform one otherwise: 0.5 + 0.5 / 2
    assert abs((agent.act(obs, deterministic=False) == 0).mean() - 0.75) < 0.03


def test_sac_draws_around_its_mean_and_td3_stays_deterministic():
    sac = SAC(make_envs("Pendulum-v1", 1, seed=0), seed=0)
    before = sac.tf_rng.state.numpy().copy()
    obs = np.zeros((ROWS, 3), np.float32)
    drawn = sac.act(obs, deterministic=False)[:, 0]
    # the squashed Gaussian of a fresh actor: mean ~0 and log std ~0, so 2 tanh(N(mu, 1)) spreads wide
    assert drawn.std() > 0.5 and len(np.unique(drawn)) > ROWS // 2
    assert len(np.unique(sac.act(obs)[:, 0])) == 1
    np.testing.assert_array_equal(sac.tf_rng.state.numpy(), before)
    td3 = TD3(make_envs("Pendulum-v1", 1, seed=0), seed=0)
    np.testing.assert_array_equal(td3.act(obs, deterministic=False), td3.act(obs))


def test_recurrent_policy_samples_and_carries_its_state():
    model = {"name": "lstm", "layers": [{"type": "lstm", "units": 8}, {"type": "dense", "output": True}]}
    agent = PPO(make_envs("CartPole-v1", 2, seed=0), model=model, seed=0, n_steps=16, mini_batches=1)
    before = agent.tf_rng.state.numpy().copy()
    obs = np.random.default_rng(0).normal(size=(ROWS, 4)).astype(np.float32)
    states = []
    for starts in (True, False, True):  # from zero, carried on, from zero again
        drawn = agent.act(obs, np.full(ROWS, starts), deterministic=False)
        states.append(agent._act_states[0].copy())
    assert set(np.unique(drawn)) == {0, 1}
    assert np.abs(states[1] - states[0]).max() > 1e-3
    np.testing.assert_array_equal(states[2], states[0])
    np.testing.assert_array_equal(agent.tf_rng.state.numpy(), before)


def test_stochastic_evaluations_repeat_exactly_and_differ_from_deterministic_ones():
    agent = PPO(make_envs("CartPole-v1", 2, seed=0), seed=3, n_steps=16)
    before = agent.tf_rng.state.numpy().copy()
    envs = make_envs("CartPole-v1", 3, seed=0)
    first = agent.evaluate(envs, 6, deterministic=False)
    assert agent.evaluate(envs, 6, deterministic=False) == first
    assert agent.evaluate(envs, 6) != first  # same env seeds: only the actions differ
    np.testing.assert_array_equal(agent.tf_rng.state.numpy(), before)


@pytest.mark.parametrize("setting, env_id, deterministic", [
    ("auto", "PongNoFrameskip-v4", False), ("auto", "ALE/Breakout-v5", False), ("auto", "CartPole-v1", True),
    (True, "PongNoFrameskip-v4", True), (False, "CartPole-v1", False)])
def test_auto_samples_on_atari_only(setting, env_id, deterministic):
    assert resolve_eval_deterministic(setting, env_id) is deterministic
