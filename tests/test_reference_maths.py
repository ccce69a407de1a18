"""The maths of distributions, losses and updates against independent references.

Each expected value comes from SciPy closed forms, a hand computation, or NumPy / TensorFlow written
differently from the implementation (never a copy of it), so these tests can fail.
"""
import numpy as np
import pytest
import scipy.special
import scipy.stats
import tensorflow as tf

from rlexp.agents import distributions as D
from rlexp.agents.a2c import A2C, a2c_loss
from rlexp.agents.ddpg import DDPG
from rlexp.agents.dqn import DQN
from rlexp.agents.ppo import PPO
from rlexp.agents.td3 import TD3
from rlexp.buffers import ReplayBuffer
from rlexp.envs.make import make_envs
from rlexp.envs.normalize import Normalizer

TINY = {"layers": [{"type": "dense", "units": 8, "activation": "tanh"}, {"type": "dense", "output": True}]}
RNG = np.random.default_rng


def weights(variables):
    return [np.array(v.numpy(), np.float64) for v in variables]


# ----- 1. distributions ---------------------------------------------------------------------------
def test_categorical_log_prob_entropy_kl_match_scipy():
    rng = RNG(0)
    logits, other = rng.normal(scale=2.0, size=(2, 5, 4))
    actions = np.array([0, 3, 1, 2, 3])
    p, q = scipy.special.softmax(logits, axis=1), scipy.special.softmax(other, axis=1)
    for x in (D.categorical_log_prob(logits, actions), D.categorical_entropy(logits), D.categorical_kl(logits, other)):
        assert x.shape == (5,)
    np.testing.assert_allclose(D.categorical_log_prob(logits, actions).numpy(),
                               np.log(p[np.arange(5), actions]), rtol=1e-10)
    np.testing.assert_allclose(D.categorical_entropy(logits).numpy(), scipy.stats.entropy(p, axis=1), rtol=1e-10)
    np.testing.assert_allclose(D.categorical_kl(logits, other).numpy(), scipy.stats.entropy(p, q, axis=1),
                               rtol=1e-10)  # scipy.stats.entropy(p, q) is KL(p || q)
    assert D.categorical_kl(logits, logits).numpy() == pytest.approx(np.zeros(5), abs=1e-12)


def mvn(mean, log_std):
    """SciPy's multivariate normal with the diagonal covariance diag(exp(2 log_std))."""
    return scipy.stats.multivariate_normal(mean, np.diag(np.exp(2.0 * log_std)))


def kl_full_cov(m0, s0, m1, s1):
    """KL(N(m0, S0) || N(m1, S1)) from covariance matrices: traces, determinants, a solve."""
    k = len(m0)
    diff = m1 - m0
    return 0.5 * (np.trace(np.linalg.solve(s1, s0)) + diff @ np.linalg.solve(s1, diff) - k
                  + np.log(np.linalg.det(s1) / np.linalg.det(s0)))


@pytest.mark.parametrize("per_row_std", [False, True], ids=["vector_log_std", "batch_log_std"])
def test_gaussian_log_prob_and_entropy_match_scipy(per_row_std):
    rng = RNG(1)
    batch, n = 4, 3
    mean = rng.normal(size=(batch, n))
    log_std = rng.normal(scale=0.5, size=(batch, n) if per_row_std else (n,))
    actions = mean + rng.normal(scale=1.5, size=(batch, n))
    row_std = np.broadcast_to(log_std, (batch, n))
    expected_lp = [mvn(mean[i], row_std[i]).logpdf(actions[i]) for i in range(batch)]
    expected_h = [mvn(mean[i], row_std[i]).entropy() for i in range(batch)]
    log_prob = D.gaussian_log_prob(mean, log_std, actions).numpy()
    assert log_prob.shape == (batch,)
    np.testing.assert_allclose(log_prob, expected_lp, rtol=1e-10)
    np.testing.assert_allclose(  # the same, as a sum of 1-D normal log densities
        D.gaussian_log_prob(mean, log_std, actions).numpy(),
        scipy.stats.norm.logpdf(actions, mean, np.exp(row_std)).sum(axis=1), rtol=1e-10)
    entropy = D.gaussian_entropy(mean, log_std).numpy()
    assert entropy.shape == (batch,)  # one entropy per row, also for a vector log_std
    np.testing.assert_allclose(entropy, expected_h, rtol=1e-10)


@pytest.mark.parametrize("per_row_std", [False, True], ids=["vector_log_std", "batch_log_std"])
def test_gaussian_kl_matches_covariance_formula(per_row_std):
    rng = RNG(2)
    batch, n = 5, 3
    shape = (batch, n) if per_row_std else (n,)
    old_mean, mean = rng.normal(size=(2, batch, n))
    old_log_std, log_std = rng.normal(scale=0.4, size=(2, *shape))
    old_rows, rows = np.broadcast_to(old_log_std, (batch, n)), np.broadcast_to(log_std, (batch, n))
    expected = [kl_full_cov(old_mean[i], np.diag(np.exp(2 * old_rows[i])), mean[i], np.diag(np.exp(2 * rows[i])))
                for i in range(batch)]
    kl = D.gaussian_kl(old_mean, old_log_std, mean, log_std).numpy()
    assert kl.shape == (batch,)
    np.testing.assert_allclose(kl, expected, rtol=1e-9)
    # same std, shifted mean only: KL = |dm / std|^2 / 2
    np.testing.assert_allclose(D.gaussian_kl(old_mean, log_std, mean, log_std).numpy(),
                               0.5 * np.sum(np.square((mean - old_mean) / np.exp(rows)), axis=1), rtol=1e-9)


# ----- 2. PPO's loss ------------------------------------------------------------------------------
def ppo_reference(log_probs, old_log_probs, entropy_rows, values, advantages, returns, old_values, *,
                  clip, value_clip, eps, entropy_coef, value_coef):
    """PPO's loss, written piecewise in NumPy (float64)."""
    adv = (advantages - advantages.mean()) / (np.std(advantages) + eps)  # population std
    ratio = np.exp(log_probs - old_log_probs)
    # pessimistic surrogate: for A >= 0 the ratio is capped at 1+clip, for A < 0 floored at 1-clip
    objective = np.where(adv >= 0, np.minimum(ratio, 1 + clip) * adv, np.maximum(ratio, 1 - clip) * adv)
    policy_loss = -objective.mean()
    error = (returns - values) ** 2
    if value_clip is not None:
        error = np.maximum(error, (returns - np.clip(values, old_values - value_clip, old_values + value_clip)) ** 2)
    value_loss = 0.5 * error.mean()
    entropy = entropy_rows.mean()
    approx_kl = np.mean((ratio - 1.0) - np.log(ratio))
    loss = policy_loss + value_coef * value_loss - entropy_coef * entropy
    return loss, dict(policy_loss=policy_loss, value_loss=value_loss, entropy=entropy, approx_kl=approx_kl)


RATIOS = np.array([0.5, 0.6, 0.95, 1.0, 1.05, 1.4, 1.6, 0.9])
ADVANTAGES = np.array([1.0, -2.0, 0.5, 3.0, -1.0, 2.0, -0.5, -3.0])  # mean 0: normalising keeps the signs
RETURN_GAPS = np.array([0.5, -1.0, 2.0, 0.1, -0.3, 1.5, 0.0, -2.0])  # returns - values
OLD_VALUE_GAPS = np.array([0.4, 0.05, -0.6, 0.2, 0.0, 0.5, -0.1, 0.3])  # old_values - values


def ppo_case(agent, obs, actions, value_clip):
    """Model outputs, NumPy log probs / entropies, and loss inputs with clipping active on some rows only."""
    out, values = (np.asarray(x, np.float64) for x in agent.forward(obs))
    if agent.action_kind == "discrete":
        p = scipy.special.softmax(out, axis=1)
        log_probs, entropy_rows = np.log(p[np.arange(len(p)), actions]), scipy.stats.entropy(p, axis=1)
    else:
        std = np.exp(agent.log_std.numpy().astype(np.float64))
        log_probs = scipy.stats.norm.logpdf(actions, out, std).sum(axis=1)
        entropy_rows = np.broadcast_to(scipy.stats.norm.entropy(scale=std), out.shape).sum(axis=1)
    old_log_probs = log_probs - np.log(RATIOS)
    returns, old_values = values + RETURN_GAPS, values + OLD_VALUE_GAPS
    # the cases are real: the clipped surrogate term wins on some rows, the unclipped one on others
    # (including rows whose ratio lies outside [1-clip, 1+clip])
    adv = ADVANTAGES / np.std(ADVANTAGES)
    unclipped, clipped = RATIOS * adv, np.clip(RATIOS, 1 - agent.clip_norm, 1 + agent.clip_norm) * adv
    outside = np.abs(RATIOS - 1) > agent.clip_norm
    assert (clipped < unclipped).any() and (outside & (unclipped < clipped)).any()
    if value_clip is not None:
        clipped_v = np.clip(values, old_values - value_clip, old_values + value_clip)
        worse = (returns - clipped_v) ** 2 > (returns - values) ** 2
        assert worse.any() and (~worse).any()
    tensors = [tf.constant(x, tf.float32) for x in (old_log_probs, ADVANTAGES, returns, old_values)]
    inputs = [tf.constant(obs), tf.constant(actions), *tensors]
    reference = dict(log_probs=log_probs, old_log_probs=old_log_probs, entropy_rows=entropy_rows, values=values,
                     advantages=ADVANTAGES, returns=returns, old_values=old_values)
    return inputs, reference


def small_ppo(env_id, **kwargs):
    return PPO(make_envs(env_id, n_envs=2, seed=0), model=TINY, seed=0, n_steps=4, mini_batches=1, **kwargs)


@pytest.mark.parametrize("value_clip", [None, 0.25], ids=["no_value_clip", "value_clip"])
@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"], ids=["discrete", "continuous"])
def test_ppo_loss_and_metrics_match_numpy(env_id, value_clip):
    agent = small_ppo(env_id, clip_norm=0.2, value_clip=value_clip, entropy_coef=0.05, value_loss_coef=0.7,
                      advantage_epsilon=1e-3, log_std_init=-0.3)
    rng = RNG(3)
    obs = rng.normal(size=(8, *agent.obs_shape)).astype(np.float32)
    if agent.action_kind == "discrete":
        actions = rng.integers(0, agent.n_actions, 8)
    else:
        actions = rng.normal(size=(8, agent.n_actions)).astype(np.float32)
    inputs, ref = ppo_case(agent, obs, actions, value_clip)
    loss, metrics = agent.loss(*inputs)
    expected_loss, expected = ppo_reference(**ref, clip=0.2, value_clip=value_clip, eps=1e-3, entropy_coef=0.05,
                                            value_coef=0.7)
    for key, value in expected.items():
        assert float(metrics[key]) == pytest.approx(value, rel=1e-5, abs=1e-6), key
    assert float(loss) == pytest.approx(expected_loss, rel=1e-5, abs=1e-6)


def test_ppo_entropy_bonus_lowers_the_loss():
    agent = small_ppo("CartPole-v1", clip_norm=0.2, entropy_coef=0.05)
    rng = RNG(4)
    obs = rng.normal(size=(8, 4)).astype(np.float32)
    inputs, ref = ppo_case(agent, obs, rng.integers(0, 2, 8), None)
    losses = {}
    for coef in (0.05, 0.0, -0.05):
        agent.entropy_coef = coef
        losses[coef] = float(agent.loss(*inputs)[0])
    entropy = ref["entropy_rows"].mean()
    assert entropy > 0
    assert losses[0.05] < losses[0.0] < losses[-0.05]  # a positive coefficient rewards entropy
    assert losses[-0.05] - losses[0.05] == pytest.approx(2 * 0.05 * entropy, rel=1e-4)


# ----- 3. A2C -------------------------------------------------------------------------------------
def test_a2c_loss_hand_computed():
    log_probs, entropy = tf.constant([-0.5, -2.0]), tf.constant([0.6, 0.7])
    values, advantages, returns = tf.constant([1.0, 2.0]), tf.constant([2.0, 1.0]), tf.constant([3.0, 1.0])
    with tf.GradientTape() as tape:
        tape.watch(advantages)
        loss, metrics = a2c_loss(log_probs, entropy, values, advantages, returns, 0.01, 0.5)
    # policy: -mean(-1, -2) = 1.5; value: 0.5 * mean(4, 1) = 1.25; entropy: 0.65
    assert float(metrics["policy_loss"]) == pytest.approx(1.5)
    assert float(metrics["value_loss"]) == pytest.approx(1.25)
    assert float(metrics["entropy"]) == pytest.approx(0.65)
    assert float(loss) == pytest.approx(1.5 + 0.5 * 1.25 - 0.01 * 0.65)
    assert tape.gradient(loss, advantages) is None  # the advantages are constants of the policy gradient


def n_step_returns(rewards, dones, last_values, gamma):
    """R_t = r_t + gamma (1 - done_t) R_{t+1}, R_T = V(s_T) (A2C's lam = 1)."""
    out, running = np.zeros_like(rewards), last_values.astype(np.float64)
    for t in range(len(rewards) - 1, -1, -1):
        running = rewards[t] + gamma * (1.0 - dones[t]) * running
        out[t] = running
    return out


def test_a2c_update_is_one_clipped_rmsprop_step():
    # epsilon 1e-5 (inside the square root) keeps the step's size sensitive to the gradient's
    agent = A2C(make_envs("CartPole-v1", n_envs=2, seed=0), model=TINY, seed=0, n_steps=3, opt_epsilon=1e-5)
    assert (agent.lr, agent.entropy_coef, agent.value_loss_coef, agent.grad_norm) == (7e-4, 0.01, 0.5, 0.5)
    opt = agent.optimizer
    assert (opt.rho, opt.epsilon, opt.momentum, opt.centered) == (0.99, 1e-5, 0.0, False)
    rng = RNG(5)
    T, N = 3, 2
    batch = dict(obs=rng.normal(size=(T, N, 4)).astype(np.float32), actions=rng.integers(0, 2, (T, N)),
                 rewards=rng.normal(1.0, 1.0, (T, N)).astype(np.float32),
                 dones=np.array([[0, 0], [1, 0], [0, 0]], np.float32),
                 values=rng.normal(size=(T, N)).astype(np.float32), log_probs=np.zeros((T, N), np.float32),
                 last_values=np.array([2.0, -1.0], np.float32))
    returns = n_step_returns(batch["rewards"], batch["dones"], batch["last_values"], agent.gamma).reshape(-1)
    advantages = returns - batch["values"].reshape(-1)
    obs, actions = batch["obs"].reshape(T * N, 4), batch["actions"].reshape(-1)

    # the loss, written independently: one-hot log probs, entropy as logsumexp - E[logits]
    variables = agent.trainable_variables()
    with tf.GradientTape() as tape:
        logits, value = agent.model(obs)
        value = value[:, 0]
        log_p = tf.reduce_sum(tf.one_hot(actions, 2) * (logits - tf.reduce_logsumexp(logits, 1, keepdims=True)), 1)
        entropy = tf.reduce_logsumexp(logits, 1) - tf.reduce_sum(tf.nn.softmax(logits) * logits, 1)
        loss = (-tf.reduce_mean(log_p * advantages.astype(np.float32))
                + 0.5 * tf.reduce_mean(tf.square(returns.astype(np.float32) - value)) / 2.0
                - 0.01 * tf.reduce_mean(entropy))
    grads = [g.numpy().astype(np.float64) for g in tape.gradient(loss, variables)]
    norm = np.sqrt(sum(np.sum(g * g) for g in grads))
    assert norm > 0.5  # the clipping is exercised
    grads = [g * 0.5 / norm for g in grads]
    # RMSprop's first step from a zero mean square: ms = (1 - rho) g^2; w -= lr g / sqrt(ms + eps)
    expected = [-7e-4 * g / np.sqrt(0.01 * g * g + 1e-5) for g in grads]

    p = scipy.special.softmax(logits.numpy().astype(np.float64), axis=1)
    v = value.numpy().astype(np.float64)
    before = weights(variables)
    metrics = agent.update({k: tf.constant(x) for k, x in batch.items()})
    after = weights(variables)
    for b, a, e in zip(before, after, expected):
        np.testing.assert_allclose(a - b, e, rtol=1e-4, atol=1e-8)
    assert float(metrics["policy_loss"]) == pytest.approx(-np.mean(np.log(p[np.arange(6), actions]) * advantages),
                                                          rel=1e-5)
    assert float(metrics["value_loss"]) == pytest.approx(0.5 * np.mean((returns - v) ** 2), rel=1e-5)
    assert float(metrics["entropy"]) == pytest.approx(scipy.stats.entropy(p, axis=1).mean(), rel=1e-5)


# ----- 4. DDPG / TD3 actor ------------------------------------------------------------------------
@pytest.mark.parametrize("cls", [DDPG, TD3])
def test_actor_step_ascends_the_first_critic(cls):
    lr = 1e-4
    agent = cls(make_envs("Pendulum-v1", n_envs=1, seed=0), model=TINY, buffer=ReplayBuffer(100, 8, 8), seed=0,
                lr=lr)
    obs = tf.constant(RNG(6).normal(size=(16, 3)).astype(np.float32))
    critic = agent.critics[0]
    actions = agent.unit_action(obs)
    with tf.GradientTape() as tape:  # dQ/da at a = mu(s), per row
        tape.watch(actions)
        q_before = agent.q(critic, obs, actions)
    dq_da = tape.gradient(q_before, actions)
    actor_vars = agent.actor.trainable_variables
    with tf.GradientTape() as tape:  # the chain rule: d(-mean Q)/dtheta = -mean(dQ/da da/dtheta)
        mu = agent.unit_action(obs)
    grads = [g.numpy().astype(np.float64) for g in tape.gradient(mu, actor_vars, output_gradients=-dq_da / 16.0)]
    critic_before, actor_before = weights(agent.trainable_variables("critic")), weights(actor_vars)

    agent.actor_step(obs)

    for b, a in zip(critic_before, weights(agent.trainable_variables("critic"))):
        np.testing.assert_array_equal(a, b)  # the critics did not move
    # Adam's first step: m = (1 - b1) g, v = (1 - b2) g^2, bias-corrected: about lr against the gradient
    for b, a, g in zip(actor_before, weights(actor_vars), grads):
        np.testing.assert_allclose(a - b, -lr * g / (np.abs(g) + 1e-7 / np.sqrt(1 - 0.999)), rtol=1e-3, atol=1e-3 * lr)
    new_actions = agent.unit_action(obs)
    moved = float(tf.reduce_sum(dq_da * (new_actions - actions)))
    assert moved > 0  # the actions moved along dQ/da
    assert float(tf.reduce_mean(agent.q(critic, obs, new_actions))) > float(tf.reduce_mean(q_before))


# ----- 5. reward normalisation --------------------------------------------------------------------
def test_reward_normalizer_hand_computed():
    norm = Normalizer((3,), n_envs=2, gamma=0.9, obs=False, reward=True, clip=2.1, epsilon=1e-8)
    rewards = np.array([[1.0, 2.0], [0.5, -1.0], [2.0, 3.0]])
    dones = np.array([[False, False], [True, False], [False, False]])
    # G_t = 0.9 G_{t-1} + r_t; env 0's episode ends at step 2, after its G (1.4) counts; it restarts at 0
    returns = np.array([[1.0, 2.0], [0.9 + 0.5, 1.8 - 1.0], [0.0 + 2.0, 0.72 + 3.0]])
    returns_after = np.array([[1.0, 2.0], [0.0, 0.8], [2.0, 3.72]])
    # the scaled rewards, clipped at +-2.1 (step 1's 4.0 and 3's 3.1 above, step 2's -2.18 below)
    expected = np.array([[1.99940028, 2.1], [1.0909284, -2.1], [2.07681995, 2.1]])
    for t in range(3):
        out = norm.reward(rewards[t], dones[t])
        np.testing.assert_allclose(norm.returns, returns_after[t], rtol=1e-12)
        seen = returns[: t + 1].reshape(-1)
        # the running statistics: the returns so far plus the prior (mean 0, var 1, weight 1e-4)
        n = seen.size + 1e-4
        mean, second = seen.sum() / n, (1e-4 + np.sum(seen**2)) / n
        assert norm.return_rms.mean == pytest.approx(mean, rel=1e-12)
        assert norm.return_rms.var == pytest.approx(second - mean**2, rel=1e-10)
        assert norm.return_rms.var == pytest.approx(np.var(seen), rel=1e-3)  # the prior is negligible
        scaled = np.clip(rewards[t] / np.sqrt(second - mean**2 + 1e-8), -2.1, 2.1)
        np.testing.assert_allclose(out, scaled, rtol=1e-6)
        np.testing.assert_allclose(out, expected[t], rtol=1e-6)
        assert out.dtype == np.float32


# ----- 6. DQN -------------------------------------------------------------------------------------
def test_dqn_epsilon_schedule_exact():
    agent = DQN(make_envs("CartPole-v1", n_envs=1, seed=0), model=TINY, buffer=ReplayBuffer(100, 8, 8), seed=0,
                epsilon_start=1.0, epsilon_end=0.1, epsilon_decay_steps=200)
    for steps, expected in [(0, 1.0), (50, 0.775), (100, 0.55), (150, 0.325), (200, 0.1), (201, 0.1), (10**6, 0.1)]:
        agent.steps = steps
        assert agent.epsilon == pytest.approx(expected, abs=1e-12), steps


def test_dqn_target_syncs_every_target_sync_steps():
    agent = DQN(make_envs("CartPole-v1", n_envs=2, seed=0), model=TINY, buffer=ReplayBuffer(100, 8, 8), seed=0,
                train_freq=1, target_sync_steps=6, lr=1e-2)
    initial = weights(agent.target.variables)
    syncs = []
    for _ in range(14):  # 2 env steps per iteration: steps 2 .. 28
        online_before, target_before = weights(agent.model.variables), weights(agent.target.variables)
        last = agent.last_sync
        agent.train_iteration()
        target, online = weights(agent.target.variables), weights(agent.model.variables)
        if agent.last_sync != last:  # a sync: the target is the online net as it was before this update
            syncs.append(agent.steps)
            assert agent.last_sync == agent.steps
            for t, o in zip(target, online_before):
                np.testing.assert_array_equal(t, o)
            assert any(not np.array_equal(t, o) for t, o in zip(target, online))  # then the online net learned
        else:
            for t, b in zip(target, target_before):
                np.testing.assert_array_equal(t, b)
            if agent.steps > 8:  # between syncs the online net moves away from the target
                assert any(not np.array_equal(t, o) for t, o in zip(target, online))
        if agent.steps < 8:  # buffer not ready: no training at all
            for o, b in zip(online, online_before):
                np.testing.assert_array_equal(o, b)
    # the first sync when the buffer holds 8 transitions (step 8), then every 6 env steps
    assert syncs == [8, 14, 20, 26]
    assert any(not np.array_equal(t, i) for t, i in zip(weights(agent.target.variables), initial))
