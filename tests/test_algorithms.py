"""Each algorithm's maths against NumPy references or hand-computed values."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from rlexp.agents import A2C, ACER, DDPG, TD3, TRPO
from rlexp.agents.acer import retrace_targets, trust_region_projection
from rlexp.agents.off_policy import soft_update
from rlexp.agents.ppo import clipped_surrogate
from rlexp.agents.td3 import smoothed_target_actions
from rlexp.agents.trpo import assign_flat, conjugate_gradient, flat_concat
from rlexp.buffers import GraphReplayBuffer, ReplayBuffer, RolloutBuffer
from rlexp.envs.graph import NUMPY
from rlexp.envs.make import make_envs
from rlexp.envs.normalize import RunningMeanStd


def test_clipped_surrogate_takes_the_pessimistic_term():
    old = np.log(np.array([0.5, 0.5, 0.5], np.float32))
    new = np.log(np.array([0.8, 0.8, 0.2], np.float32))  # ratios 1.6, 1.6, 0.4
    adv = np.array([1.0, -1.0, -1.0], np.float32)
    # min(1.6*1, 1.2*1)=1.2; min(1.6*-1, 1.2*-1)=-1.6; min(0.4*-1, 0.8*-1)=-0.8
    loss = clipped_surrogate(new, old, adv, 0.2).numpy()
    np.testing.assert_allclose(loss, -np.mean([1.2, -1.6, -0.8]), rtol=1e-6)


def retrace_by_linear_solve(rewards, dones, q_a, values, rho_bar, last_values, gamma):
    """Each env's Q_ret as the solution of the T linear equations that define it (Wang et al. 2017):
    Q_ret(t) - gamma (1 - d_t) rho_bar(t+1) Q_ret(t+1) = r_t + gamma (1 - d_t) (V(t+1) - rho_bar(t+1) Q(t+1, a)),
    the last step bootstrapping from V(s_T) alone."""
    T, N = rewards.shape
    out = np.zeros((T, N))
    for n in range(N):
        next_v = np.append(values[1:, n], last_values[n])
        next_rho, next_q = np.append(rho_bar[1:, n], 0.0), np.append(q_a[1:, n], 0.0)
        discount = gamma * (1.0 - dones[:, n])
        a = np.eye(T) - np.diag(discount[:-1] * next_rho[:-1], k=1)
        out[:, n] = np.linalg.solve(a, rewards[:, n] + discount * (next_v - next_rho * next_q))
    return out


def test_retrace_targets_match_reference():
    rng = np.random.default_rng(0)
    T, N = 6, 3
    r, q_a, v = (rng.normal(size=(T, N)).astype(np.float32) for _ in range(3))
    dones = (rng.random((T, N)) < 0.3).astype(np.float32)
    rho = rng.uniform(0, 3, (T, N)).astype(np.float32)
    rho_bar = np.minimum(1.0, rho)
    last = rng.normal(size=N).astype(np.float32)
    got = tf.function(retrace_targets)(r, dones, q_a, v, rho_bar, last, 0.9).numpy()
    assert dones.any()  # episode ends cut the traces
    np.testing.assert_allclose(got, retrace_by_linear_solve(r, dones, q_a, v, rho_bar, last, 0.9), rtol=1e-5, atol=1e-5)


def test_retrace_one_step_by_hand():
    # T=2, one env: Q_ret(1) = r1 + g V(s2); Q_ret(0) = r0 + g (rho1 (Q_ret(1) - Q1) + V1)
    got = retrace_targets(np.array([[1.0], [2.0]], np.float32), np.zeros((2, 1), np.float32),
                          np.array([[0.0], [3.0]], np.float32), np.array([[0.0], [1.0]], np.float32),
                          np.array([[1.0], [0.5]], np.float32), np.array([10.0], np.float32), 0.5).numpy()
    q1 = 2.0 + 0.5 * 10.0
    np.testing.assert_allclose(got[:, 0], [1.0 + 0.5 * (0.5 * (q1 - 3.0) + 1.0), q1])


def test_trust_region_projection():
    g = np.array([[1.0, 2.0], [1.0, 0.0]], np.float32)
    k = np.array([[1.0, 1.0], [0.0, 1.0]], np.float32)
    got = trust_region_projection(g, k, delta=1.0, epsilon=0.0).numpy()
    # row 0: k.g = 3 > 1 -> g - (3 - 1) / 2 * k = [0, 1], and then k.g' == delta; row 1: k.g = 0 -> unchanged
    np.testing.assert_allclose(got, [[0.0, 1.0], [1.0, 0.0]])
    # random rows: rows inside the half-space k.x <= delta are unchanged; the others move to its boundary along
    # -k, which makes the result the closest point of the half-space to g
    rng = np.random.default_rng(0)
    g, k = rng.normal(size=(2, 50, 3)).astype(np.float32)
    got = trust_region_projection(g, k, delta=0.5, epsilon=0.0).numpy()
    inside = np.einsum("ij,ij->i", k, g) <= 0.5
    assert inside.any() and not inside.all()
    np.testing.assert_array_equal(got[inside], g[inside])
    step = (got - g)[~inside]
    np.testing.assert_allclose(np.einsum("ij,ij->i", k[~inside], got[~inside]), 0.5, rtol=1e-4)
    np.testing.assert_allclose(np.cross(step, k[~inside]), 0.0, atol=1e-5)  # parallel to k
    assert np.all(np.einsum("ij,ij->i", step, k[~inside]) < 0)


def test_conjugate_gradient_solves_explicit_system():
    rng = np.random.default_rng(0)
    m = rng.normal(size=(6, 6))
    a = (m @ m.T + 6 * np.eye(6)).astype(np.float32)
    b = rng.normal(size=6).astype(np.float32)
    x = tf.function(conjugate_gradient)(lambda v: tf.linalg.matvec(a, v), b, 20, 1e-12).numpy()
    np.testing.assert_allclose(x, np.linalg.solve(a, b), rtol=1e-3, atol=1e-4)


def small_trpo(**kwargs):
    envs = make_envs("CartPole-v1", n_envs=2, seed=0)
    model = {"layers": [{"type": "dense", "units": 4, "activation": "tanh"}, {"type": "dense", "output": True}]}
    return TRPO(envs, model=model, seed=0, n_steps=16, mini_batches=2, **kwargs)


def test_trpo_fisher_vector_product_matches_explicit_hessian():
    agent = small_trpo(cg_damping=0.1)
    obs = tf.constant(np.random.default_rng(0).normal(size=(8, 4)).astype(np.float32))
    old = tuple(tf.stop_gradient(p) for p in agent.dist_params(agent.actor(obs)))
    variables = agent.actor_variables()
    with tf.GradientTape(persistent=True) as outer:
        with tf.GradientTape() as inner:
            kl = tf.reduce_mean(agent.kl(old, agent.dist_params(agent.actor(obs))))
        grad = flat_concat(inner.gradient(kl, variables))
        rows = [grad[i] for i in range(grad.shape[0])]
    hessian = np.stack([flat_concat(outer.gradient(row, variables)).numpy() for row in rows])
    v = np.random.default_rng(1).normal(size=grad.shape[0]).astype(np.float32)
    got = agent.fisher_vector_product(obs, old, tf.constant(v)).numpy()
    np.testing.assert_allclose(got, hessian @ v + 0.1 * v, rtol=1e-3, atol=1e-5)


def test_trpo_line_search_keeps_kl_bound_or_reverts():
    agent = small_trpo(max_kl=0.01)
    batch = agent.collect()
    obs = tf.reshape(batch["obs"], (-1, 4))
    actions = tf.reshape(batch["actions"], (-1,))
    log_probs = tf.reshape(batch["log_probs"], (-1,))
    advantages = tf.constant(np.random.default_rng(0).normal(size=32).astype(np.float32))
    before = agent.actor(obs)
    metrics = tf.function(agent.update_actor)(obs, actions, log_probs, advantages)
    kl = tf.reduce_mean(agent.kl((before,), (agent.actor(obs),))).numpy()
    assert metrics["step_accepted"] == 1.0 and 0 < kl <= 0.01 + 1e-6
    # an impossible bound: every halving is rejected and the parameters are restored
    agent.max_kl = 1e-30
    params = flat_concat(agent.actor_variables()).numpy()
    metrics = tf.function(agent.update_actor)(obs, actions, log_probs, advantages)
    assert metrics["step_accepted"] == 0.0
    np.testing.assert_array_equal(flat_concat(agent.actor_variables()).numpy(), params)
    assign_flat(agent.actor_variables(), tf.constant(params))


def lander_trpo(**kwargs):
    """TRPO on LunarLanderContinuous (2 action dimensions), log std 0.5 in each."""
    envs = make_envs("LunarLanderContinuous-v3", n_envs=2, seed=0)
    model = {"layers": [{"type": "dense", "units": 8, "activation": "tanh"}, {"type": "dense", "output": True}]}
    return TRPO(envs, model=model, seed=0, n_steps=16, mini_batches=2, log_std_init=0.5, **kwargs)


@pytest.mark.parametrize("reduction, per_dimension", [("mean", 0.5), ("sum", 1.0)])
def test_trpo_gaussian_kl_is_sb3s_mean_over_action_dimensions(reduction, per_dimension):
    """SB3's TRPO averages the per-dimension KL over batch and action dimensions, so its target_kl and
    cg_damping (RL Zoo's values) are per dimension. The Fisher information of log sigma is 2 per dimension
    for any Gaussian: the product with a log-std unit vector is 2 x 1/2 (mean over 2 dimensions) or 2 (sum)."""
    agent = lander_trpo(cg_damping=0.0, kl_reduction=reduction)
    obs = tf.constant(np.random.default_rng(0).normal(size=(8, 8)).astype(np.float32))
    old = tuple(tf.stop_gradient(p) for p in agent.dist_params(agent.actor_out(obs)))
    variables = agent.actor_variables()
    unit = np.zeros(sum(int(np.prod(v.shape)) for v in variables), np.float32)
    unit[-2] = 1.0  # the first action dimension's log std (the last variable)
    product = agent.fisher_vector_product(obs, old, tf.constant(unit)).numpy()
    np.testing.assert_allclose(product[-2:], [2.0 * per_dimension, 0.0], atol=1e-5)


def test_trpo_accepted_step_keeps_the_per_dimension_kl_under_max_kl():
    """The accepted step's KL, written out for diagonal Gaussians in NumPy and averaged over rows and action
    dimensions, stays under max_kl; summed over the dimensions it may pass it."""
    agent = lander_trpo(max_kl=0.01)
    batch = agent.collect()
    obs, actions = tf.reshape(batch["obs"], (-1, 8)), tf.reshape(batch["actions"], (-1, 2))
    log_probs = tf.reshape(batch["log_probs"], (-1,))
    advantages = tf.constant(np.random.default_rng(0).normal(size=32).astype(np.float32))
    mean0, log_std0 = (np.broadcast_to(p.numpy(), (32, 2)) for p in agent.gaussian(agent.actor_out(obs)))
    metrics = tf.function(agent.update_actor)(obs, actions, log_probs, advantages)
    mean1, log_std1 = (np.broadcast_to(p.numpy(), (32, 2)) for p in agent.gaussian(agent.actor_out(obs)))
    var0, var1 = np.exp(2 * log_std0), np.exp(2 * log_std1)
    per_dimension = log_std1 - log_std0 + (var0 + (mean0 - mean1) ** 2) / (2 * var1) - 0.5
    assert metrics["step_accepted"] == 1.0
    assert per_dimension.mean() <= 0.01 + 1e-6
    assert per_dimension.sum(axis=1).mean() > 0.01
    np.testing.assert_allclose(float(metrics["kl"]), per_dimension.mean(), rtol=1e-3)


def test_soft_update():
    target, source = tf.Variable([0.0, 10.0]), tf.Variable([1.0, 0.0])
    soft_update([target], [source], 0.1)
    np.testing.assert_allclose(target.numpy(), [0.1, 9.0])


def test_td3_target_smoothing_clips_noise_and_actions():
    target = np.array([[0.9, 0.0, -0.2]], np.float32)
    noise = np.array([[0.3, 2.0, -0.1]], np.float32)
    got = smoothed_target_actions(target, noise, 0.5).numpy()
    np.testing.assert_allclose(got, [[1.0, 0.5, -0.3]], rtol=1e-6)


def test_td3_targets_use_the_smaller_critic_and_delay_actor_updates():
    envs = make_envs("Pendulum-v1", n_envs=1, seed=0)
    agent = TD3(envs, buffer=ReplayBuffer(100, 8, 8), seed=0, policy_delay=2, policy_noise_coef=0.0)
    obs = tf.constant(np.random.default_rng(0).normal(size=(8, 3)).astype(np.float32))
    rewards, terminated = tf.ones(8), tf.constant([0.0] * 7 + [1.0])
    next_a = agent.unit_action(obs, agent.target_actor)
    q = np.stack([agent.q(c, obs, next_a).numpy() for c in agent.target_critics])
    expected = 1.0 + agent.gamma * (1 - terminated.numpy()) * q.min(axis=0)
    np.testing.assert_allclose(agent.critic_targets(rewards, obs, terminated).numpy(), expected, rtol=1e-5)
    actor_before = agent.actor.get_weights()[0].copy()
    actions = tf.zeros((8, 1))
    step = tf.function(agent.update_step)
    step(obs, actions, rewards, obs, terminated)  # update 1: critics only
    np.testing.assert_array_equal(agent.actor.get_weights()[0], actor_before)
    step(obs, actions, rewards, obs, terminated)  # update 2: actor too
    assert not np.array_equal(agent.actor.get_weights()[0], actor_before)
    assert int(agent.updates.numpy()) == 2


def test_ddpg_forward_passes_in_row_blocks_match_one_pass():
    agent = TD3(make_envs("Pendulum-v1", n_envs=1, seed=0), buffer=ReplayBuffer(100, 8, 8), seed=0)
    agent.batch_parts = 2
    obs = tf.constant(np.random.default_rng(0).normal(size=(256, 3)).astype(np.float32))
    actions = agent.unit_action(obs)
    np.testing.assert_allclose(actions.numpy(), tf.tanh(agent.actor(obs)).numpy(), rtol=1e-5, atol=1e-6)
    q = agent.q(agent.critics[0], obs, actions).numpy()
    np.testing.assert_allclose(q, agent.critics[0](tf.concat([obs, actions], -1))[:, 0].numpy(), rtol=1e-5, atol=1e-6)
    with tf.GradientTape() as tape:  # the halves' gradients add up to the whole batch's
        loss = -tf.reduce_mean(agent.q(agent.critics[0], obs, agent.unit_action(obs)))
    split = tape.gradient(loss, agent.actor.trainable_variables)
    agent.batch_parts = 1
    with tf.GradientTape() as tape:
        loss = -tf.reduce_mean(agent.q(agent.critics[0], obs, agent.unit_action(obs)))
    for a, b in zip(split, tape.gradient(loss, agent.actor.trainable_variables)):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("vectorization", ["graph", "sync"])  # env steps and replay in the graph, or in Python
def test_td3_loop_with_several_steps_and_updates_per_cycle(vectorization):
    envs = make_envs("Pendulum-v1", n_envs=2, seed=0, vectorization=vectorization)
    agent = TD3(envs, buffer=ReplayBuffer(1000, 32, 16), seed=0, train_freq=3, gradient_steps=2)
    agent.max_steps = 10_000
    while not agent.buffer.ready:
        agent.train_iteration()
    size, steps = agent.buffer.size, agent.steps
    metrics = agent.train_iteration()
    cycles = agent.STEPS_PER_CALL // 6  # 3 steps x 2 envs per cycle
    assert agent.steps - steps == agent.buffer.size - size == 6 * cycles
    assert int(agent.updates.numpy()) == 2 * cycles and np.isfinite(metrics["critic_loss"])


@pytest.mark.parametrize("vectorization", ["graph", "sync"])
def test_td3_grouped_loop_matches_the_per_update_loop_bit_for_bit(vectorization):
    def agent():
        envs = make_envs("Pendulum-v1", n_envs=1, seed=0, vectorization=vectorization)
        return TD3(envs, buffer=ReplayBuffer(1000, 32, 16), seed=0)

    grouped, per_update = agent(), agent()
    for name, model in grouped.models().items():  # two agents in one process draw different initial weights
        per_update.models()[name].set_weights(model.get_weights())
    for a in (grouped, per_update):
        a.max_steps = 10_000
        while not a.buffer.ready:
            a.train_iteration()
        a.train_iteration()  # builds the graph functions
    per_update._groups_fn = lambda obs, groups: per_update._train_fn(obs, groups * per_update.policy_delay)
    for _ in range(2):
        grouped.train_iteration(), per_update.train_iteration()
    assert int(grouped.updates.numpy()) == int(per_update.updates.numpy()) == 3 * grouped.STEPS_PER_CALL
    for a, b in zip(grouped.actor.get_weights() + grouped.critics[1].get_weights(),
                    per_update.actor.get_weights() + per_update.critics[1].get_weights()):
        np.testing.assert_array_equal(a, b)
    for name, model in grouped.models().items():  # targets too: the grouped loop defers their updates
        for a, b in zip(model.get_weights(), per_update.models()[name].get_weights()):
            np.testing.assert_array_equal(a, b, err_msg=name)
    grouped.updates.assign_add(1)  # as after a run that ended between two actor steps
    grouped.train_iteration()  # one update to the next actor step, then groups again
    assert int(grouped.updates.numpy()) % grouped.policy_delay == 0


def test_td3_steps_a_graph_env_in_the_graph_and_keeps_the_episode_books():
    envs = make_envs("Pendulum-v1", n_envs=2, seed=0, max_episode_steps=7)
    agent = TD3(envs, buffer=ReplayBuffer(1000, 20, 16), seed=0)
    agent.max_steps = 500
    agent.train_iteration()  # the random warm-up steps in Python, into a NumPy replay buffer
    assert agent.steps_in_graph and type(agent.buffer) is ReplayBuffer and agent.steps == 20
    warm_up = agent.buffer.data["obs"][:20].copy()
    while agent.steps < 500:
        agent.train_iteration()
    assert isinstance(agent.buffer, GraphReplayBuffer)  # moved into TF variables for the graph loop
    np.testing.assert_array_equal(agent.buffer.data["obs"][:20].numpy(), warm_up)
    assert agent.steps == agent.buffer.size == 500 and int(agent.updates.numpy()) > 200
    ends, returns, _ = zip(*agent._finished)  # every env's episode ends after 7 of its steps
    assert list(ends) == [7 * 2 * k - 1 + i for k in range(1, 36) for i in (0, 1)]
    rewards = agent.buffer.data["rewards"].numpy()  # transition t of env i sits in slot 2 t + i
    expected = [rewards[2 * 7 * (k - 1) + i: 2 * 7 * k: 2].sum() for k in range(1, 36) for i in (0, 1)]
    np.testing.assert_allclose(returns, expected, rtol=1e-5)
    partial = [rewards[2 * 7 * 35 + i::2].sum() for i in (0, 1)]  # steps 491-500 of the running episodes
    np.testing.assert_allclose(agent._episode_returns, partial, rtol=1e-5)
    np.testing.assert_array_equal(agent._obs, envs.observe(NUMPY, envs.state))  # the graph's state came back


def test_ddpg_actions_are_scaled_to_the_action_space():
    envs = make_envs("Pendulum-v1", n_envs=1, seed=0)  # actions in [-2, 2]
    agent = DDPG(envs, buffer=ReplayBuffer(100, 8, 8), seed=0)
    np.testing.assert_allclose(agent.to_env(np.array([[-1.0], [0.0], [1.0]], np.float32)), [[-2.0], [0.0], [2.0]])
    obs = np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32)
    unit = np.tanh(agent.actor(obs).numpy())  # the actor's actions in [-1, 1]: -2 + (unit + 1) * 2 = 2 unit
    assert np.all(np.abs(unit) < 1) and np.ptp(unit) > 0
    np.testing.assert_allclose(agent.act(obs), 2.0 * unit, rtol=1e-5, atol=1e-6)


def test_ddpg_explores_with_noise_when_stepping():
    envs = make_envs("Pendulum-v1", n_envs=1, seed=0)
    agent = DDPG(envs, buffer=ReplayBuffer(1000, 10, 10), seed=0, step_noise_coef=0.3, gradient_steps=0)
    agent.max_steps = 200
    while agent.steps < 200:
        agent.train_iteration()
    data = agent.buffer.data
    greedy = agent.unit_action(tf.constant(data["obs"][10:200])).numpy()
    # stored actions after the random warm-up differ from the greedy ones by ~N(0, 0.3)
    assert np.all(np.abs(greedy) < 0.9)  # the untrained actor (no gradient steps) is far from the clip
    assert 0.2 < np.std(data["actions"][10:200] - greedy) < 0.4


def test_a2c_one_update_changes_weights_and_uses_rmsprop():
    agent = A2C(make_envs("CartPole-v1", n_envs=2, seed=0), seed=0, optimizer="rmsprop")
    before = agent.model.get_weights()[0].copy()
    agent.max_steps = 10
    metrics = agent.train_iteration()
    assert isinstance(agent.optimizer, keras.optimizers.RMSprop) and set(metrics) == {"policy_loss", "value_loss", "entropy"}
    assert not np.array_equal(before, agent.model.get_weights()[0]) and agent.steps == 10


def test_acer_replays_stored_rollouts_and_updates_the_average():
    envs = make_envs("CartPole-v1", n_envs=2, seed=0)
    agent = ACER(envs, buffer=RolloutBuffer(max_size=200), seed=0, n_steps=5, replay_ratio=2)
    average_before = agent.average.get_weights()[0].copy()
    agent.max_steps = 10_000
    for _ in range(30):
        agent.train_iteration()
    assert agent.buffer.count == agent.buffer.capacity == 20  # 200 transitions / (5 steps x 2 envs), ring full
    assert not np.array_equal(average_before, agent.average.get_weights()[0])


def test_rollout_buffer_overwrites_the_oldest():
    buffer = RolloutBuffer(max_size=4)
    for i in range(3):
        buffer.add(obs=np.full((3, 2, 1), i), actions=np.full((2, 2), i), rewards=np.zeros((2, 2)),
                   dones=np.zeros((2, 2)), mu=np.zeros((2, 2, 2)))
    assert buffer.capacity == 1 and buffer.count == 1 and buffer.data["actions"][0, 0, 0] == 2
    other = RolloutBuffer(max_size=4)
    other.load_state_dict(buffer.state_dict())
    assert other.count == 1 and other.sample()["actions"][0, 0] == 2


def test_running_mean_std_matches_numpy():
    rng = np.random.default_rng(0)
    data = rng.normal(3.0, 2.0, size=(1000, 2))
    rms = RunningMeanStd((2,))
    for chunk in np.split(data, 10):
        rms.update(chunk)
    np.testing.assert_allclose(rms.mean, data.mean(0), rtol=1e-3)
    np.testing.assert_allclose(rms.var, data.var(0), rtol=1e-3)


@pytest.mark.parametrize("cls", [DDPG, TD3])
def test_continuous_only_agents_refuse_discrete(cls):
    from rlexp.errors import UserError

    with pytest.raises(UserError, match="does not support discrete"):
        cls(make_envs("CartPole-v1", n_envs=1, seed=0))


def test_normalizer_state_is_checkpointed_and_used_when_acting(tmp_path):
    from rlexp.agents import PPO

    def agent():
        return PPO(make_envs("Pendulum-v1", n_envs=2, seed=0), seed=0, n_steps=16, mini_batches=2,
                   normalize_obs=True, normalize_reward=True)

    trained = agent()
    trained.fit(max_steps=64, progress="none")
    assert np.all(trained.normalizer.obs_rms.var != 1.0) and trained.normalizer.return_rms.count > 1
    trained.save(tmp_path / "w.ckpt", full=False)
    fresh = agent()
    fresh.load(tmp_path / "w.ckpt", weights_only=True)
    np.testing.assert_allclose(fresh.normalizer.obs_rms.mean, trained.normalizer.obs_rms.mean)
    obs = np.random.default_rng(0).normal(size=(3, 3)).astype(np.float32) * 5
    np.testing.assert_allclose(fresh.act(obs), trained.act(obs), rtol=1e-5)
    # act standardises with the running statistics, (obs - mean) / std clipped to [-10, 10], before the policy
    rms = trained.normalizer.obs_rms
    standardised = np.clip((obs - rms.mean) / np.sqrt(rms.var), -10.0, 10.0).astype(np.float32)
    assert not np.allclose(standardised, obs)
    np.testing.assert_allclose(trained.act(obs), np.clip(trained.policy(tf.constant(standardised)).numpy(), -2, 2),
                               rtol=1e-4, atol=1e-5)
    assert not np.allclose(trained.act(obs), np.clip(trained.policy(tf.constant(obs)).numpy(), -2, 2), atol=1e-3)


def test_ppo_kl_threshold_stops_epochs_and_kl_adaptive_moves_the_lr():
    from rlexp.agents import PPO

    envs = make_envs("CartPole-v1", n_envs=2, seed=0)
    agent = PPO(envs, seed=0, n_steps=16, mini_batches=2, ppo_epochs=10, lr=1e-2, kl_threshold=1e-9,
                lr_schedule="kl_adaptive", kl_target=1e-9)
    batch = agent.collect()
    assert float(tf.function(agent.update)(batch)["epochs"]) == 1.0  # the second minibatch's KL exceeds it
    agent.kl_threshold = None
    assert float(tf.function(agent.update)(batch)["epochs"]) == 10.0
    agent.max_steps = 10_000
    agent.train_iteration()
    assert agent.adaptive_scale < 1.0 and agent.current_lr() < 1e-2


@pytest.mark.parametrize("mini_batches, epochs, script, steps, kl", [
    (4, 4, [0.0, 0.0, 0.3, 0.0], 2, 0.1),  # an epoch's mean, 0.075, stays under 0.1; its third minibatch does not
    (2, 3, [0.0, 0.05, 0.08, 0.3, 0.0, 0.0], 3, 0.1075),  # the second epoch's mean passes 0.1 after its last step
    (1, 4, [0.0, 0.05, 0.2, 0.0], 2, 0.25 / 3),  # one minibatch an epoch
])
def test_ppo_kl_threshold_stops_before_the_first_minibatch_past_it(mini_batches, epochs, script, steps, kl):
    """SB3's PPO: the first minibatch whose approximate KL exceeds 1.5 x target_kl (here kl_threshold=0.1) takes
    no gradient step and ends the update, epochs included; the minibatches' KLs are scripted, in the order they
    are evaluated, so the gradient steps counted are those SB3 takes on them."""
    from rlexp.agents import PPO
    from rlexp.agents.distributions import no_autograph

    class ScriptedKL(PPO):
        @no_autograph
        def loss(self, *minibatch):
            loss, metrics = super().loss(*minibatch)
            kl = tf.constant(script, tf.float32)[self.evaluated.read_value()]
            self.evaluated.assign_add(1)
            return loss, metrics | {"approx_kl": kl}

    tiny = {"layers": [{"units": 8, "activation": "tanh"}, {"output": True}]}
    agent = ScriptedKL(make_envs("CartPole-v1", n_envs=2, seed=0), seed=0, n_steps=8, mini_batches=mini_batches,
                       ppo_epochs=epochs, kl_threshold=0.1, model=tiny)
    agent.evaluated = tf.Variable(0)
    batch = agent.collect()
    before = [v.numpy() for v in agent.trainable_variables()]
    metrics = tf.function(agent.update)(batch)
    assert int(agent.optimizer.iterations) == steps
    assert int(agent.evaluated) == steps + 1  # the minibatch past the threshold is evaluated, not stepped on
    assert float(metrics["epochs"]) == -(-(steps + 1) // mini_batches)  # epochs begun, as SB3's n_updates
    np.testing.assert_allclose(float(metrics["approx_kl"]), kl, rtol=1e-6)  # the mean over those evaluated
    assert any(not np.array_equal(b, v.numpy()) for b, v in zip(before, agent.trainable_variables()))


def test_state_dependent_std_policy_head():
    from rlexp.agents import PPO

    agent = PPO(make_envs("Pendulum-v1", n_envs=2, seed=0), seed=0, n_steps=8, mini_batches=1,
                state_dependent_std=True)
    assert agent.model.outputs[0].shape[-1] == 2 and agent.extra_variables() == {} == agent.resume_variables()
    batch = agent.collect()
    assert batch["actions"].shape == (8, 2, 1)


def test_gsde_noise_is_features_times_a_matrix_held_for_the_rollout():
    from rlexp.agents import PPO

    agent = PPO(make_envs("Pendulum-v1", n_envs=2, seed=0), seed=0, n_steps=8, mini_batches=1, use_sde=True,
                sde_sample_freq=4, log_std_init=-1.0)
    features = agent.model.outputs[-1].shape[-1]
    assert agent.log_std.shape == (features, 1) and agent.sde_noise.shape == (2, features, 1)  # per env
    obs = tf.constant(np.random.default_rng(0).normal(size=(2, 3)).astype(np.float32))
    out, _ = agent.forward(obs)
    mean, log_std = agent.gaussian(out)
    latent = out[:, 1:].numpy()
    # per-row variance = sum_j features_j^2 exp(log_std_j)^2
    np.testing.assert_allclose(np.exp(2 * log_std.numpy()[:, 0]), (latent**2).sum(axis=1) * np.exp(-2.0) + 1e-6,
                               rtol=1e-4)
    agent.resample_sde_noise()
    actions = agent.sample_action(obs)["actions"].numpy()
    noise = agent.sde_noise.numpy()
    expected = mean.numpy() + np.stack([latent[i] @ noise[i] for i in range(2)])
    np.testing.assert_allclose(actions, expected, rtol=1e-5, atol=1e-6)
    before = agent.sde_noise.numpy().copy()
    agent.collect()  # redraws at steps 0 and 4
    assert not np.array_equal(before, agent.sde_noise.numpy())
