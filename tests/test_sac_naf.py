"""SAC's squashed Gaussian, entropy coefficient and twin-critic target; NAF's L and advantage term — against
finite differences, NumPy and hand-computed values."""
import numpy as np
import pytest
import tensorflow as tf
from scipy.stats import norm

from rlexp.agents import NAF, SAC
from rlexp.agents.naf import advantage, lower_triangular
from rlexp.agents.sac import squashed_gaussian
from rlexp.buffers import ReplayBuffer
from rlexp.envs.make import make_envs


def test_squashed_log_prob_is_the_density_of_tanh_of_a_gaussian():
    """The density of a = tanh(u), u ~ N(m, s), from finite differences of its CDF, Phi((atanh(a) - m) / s)."""
    mean = np.array([[0.3, -0.8], [1.2, 0.0]], np.float32)
    log_std = np.log(np.array([[0.5, 1.3], [0.2, 0.9]], np.float32))
    noise = np.array([[0.4, -1.1], [-0.7, 2.0]], np.float32)
    actions, log_prob = (x.numpy() for x in squashed_gaussian(mean, log_std, noise))
    np.testing.assert_allclose(actions, np.tanh(mean + np.exp(log_std) * noise), rtol=1e-6)
    h = 1e-4
    a, m, s = actions.astype(np.float64), mean.astype(np.float64), np.exp(log_std.astype(np.float64))
    density = (norm.cdf((np.arctanh(a + h) - m) / s) - norm.cdf((np.arctanh(a - h) - m) / s)) / (2 * h)
    np.testing.assert_allclose(log_prob, np.log(density).sum(axis=-1), rtol=2e-4, atol=2e-4)


def small_sac(**kwargs):
    return SAC(make_envs("Pendulum-v1", n_envs=1, seed=0, vectorization="sync"), model="mlp",
               buffer=ReplayBuffer(1000, 10, 4), seed=0, **kwargs)


def fixed_samples(agent, log_prob):
    """Make `agent.sample` return fixed actions and log-probabilities (still connected to the actor, with
    zero gradients, so that the actor's optimizer step runs)."""
    actions = tf.constant(np.linspace(-0.5, 0.5, len(log_prob))[:, None], tf.float32)

    def sample(obs, rng=None, training=False):
        zero = 0.0 * tf.reduce_sum(agent.mean_log_std(obs)[0])
        return actions + zero, tf.constant(log_prob, tf.float32) + zero

    agent.sample = sample
    return actions


def test_entropy_coefficient_moves_towards_the_target_entropy():
    """One Adam step on -log(alpha) * (log pi + target): log alpha moves by -lr * g / (|g| + eps), with
    g = -(mean(log pi) + target). Too little entropy (log pi high) raises alpha, too much lowers it."""
    for log_prob, direction in (([3.0, 1.0], 1.0), ([-3.0, -2.0], -1.0)):
        agent = small_sac(lr=1e-2, init_ent_coef=0.5)
        fixed_samples(agent, np.array(log_prob))
        before = float(agent.log_ent_coef.numpy())
        agent.actor_step(tf.zeros((2, 3)))
        g = -(np.mean(log_prob) + agent.target_entropy)  # target_entropy = -1 for Pendulum
        assert agent.target_entropy == -1.0
        step = float(agent.log_ent_coef.numpy()) - before
        assert step == pytest.approx(-1e-2 * g / (abs(g) + 1e-7), rel=1e-4)
        assert np.sign(step) == direction


def test_fixed_entropy_coefficient_is_not_learned():
    agent = small_sac(ent_coef=0.2)
    fixed_samples(agent, np.array([5.0, 5.0]))
    agent.actor_step(tf.zeros((2, 3)))
    assert float(np.exp(agent.log_ent_coef.numpy())) == pytest.approx(0.2)
    assert "ent_coef" not in agent.optimizers()


def test_critic_target_is_the_smaller_target_critic_minus_the_entropy_term():
    agent = small_sac(init_ent_coef=0.3)
    next_obs = np.array([[1.0, 0.0, 0.5], [0.0, 1.0, -2.0]], np.float32)
    actions = fixed_samples(agent, np.array([-1.5, 0.7]))
    q = [c(np.concatenate([next_obs, actions.numpy()], axis=1)).numpy()[:, 0] for c in agent.target_critics]
    assert not np.allclose(q[0], q[1])
    rewards, terminated = np.array([1.0, -2.0], np.float32), np.array([0.0, 1.0], np.float32)
    targets = agent.critic_targets(rewards, next_obs, terminated, tf.constant(0.3)).numpy()
    soft_value = np.minimum(q[0], q[1]) - 0.3 * np.array([-1.5, 0.7])
    np.testing.assert_allclose(targets, [1.0 + 0.99 * soft_value[0], -2.0], rtol=1e-5)


def test_sac_learns_pendulum_actions_through_its_loop():
    """A short run through the fused loop: warm-up, updates, entropy coefficient and greedy actions in bounds."""
    agent = small_sac()
    agent.fit(300, progress="none")
    assert int(agent.updates.numpy()) == 290  # one update per env step after the 10 warm-up steps
    assert float(agent.log_ent_coef.numpy()) < 0  # alpha falls from 1 while the policy is still wide
    actions = agent.act(np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32))
    assert actions.shape == (5, 1) and np.all(np.abs(actions) <= 2.0)


def test_naf_lower_triangular_by_hand():
    entries = np.array([[0.0, 2.0, np.log(3.0)], [np.log(0.5), -1.0, 0.0]], np.float32)  # L00, L10, L11
    lower = lower_triangular(tf.constant(entries), 2).numpy()
    np.testing.assert_allclose(lower, [[[1.0, 0.0], [2.0, 3.0]], [[0.5, 0.0], [-1.0, 1.0]]], rtol=1e-6)
    three = lower_triangular(tf.constant(np.arange(6, dtype=np.float32)[None]), 3).numpy()[0]
    np.testing.assert_allclose(three, [[1.0, 0, 0], [1.0, np.exp(2.0), 0], [3.0, 4.0, np.exp(5.0)]], rtol=1e-6)


def test_naf_advantage_is_the_quadratic_form_of_p_and_zero_at_mu():
    rng = np.random.default_rng(0)
    lower = np.tril(rng.normal(size=(4, 3, 3))).astype(np.float32)
    mu, actions = (rng.uniform(-1, 1, (4, 3)).astype(np.float32) for _ in range(2))
    p = lower @ np.transpose(lower, (0, 2, 1))
    d = actions - mu
    expected = -0.5 * np.einsum("bi,bij,bj->b", d, p, d)
    np.testing.assert_allclose(advantage(actions, mu, lower).numpy(), expected, rtol=1e-5)
    np.testing.assert_allclose(advantage(mu, mu, lower).numpy(), 0.0, atol=1e-7)


def test_naf_q_is_largest_at_mu_and_its_target_is_v():
    agent = NAF(make_envs("Pendulum-v1", n_envs=1, seed=0, vectorization="sync"), model="mlp",
                buffer=ReplayBuffer(1000, 10, 4), seed=0)
    obs = np.random.default_rng(1).normal(size=(6, 3)).astype(np.float32)
    value, mu, _ = (x.numpy() for x in agent.heads(agent.model, obs))
    np.testing.assert_allclose(agent.q(obs, mu).numpy(), value, rtol=1e-6)  # max_a Q(s, a) = V(s) at a = mu
    for a in np.linspace(-1, 1, 5):
        assert np.all(agent.q(obs, np.full((6, 1), a, np.float32)).numpy() <= value + 1e-6)
    agent.fit(200, progress="none")
    assert int(agent.updates.numpy()) == 190


def test_ornstein_uhlenbeck_exploration_follows_its_recursion():
    """x_t = x_{t-1} - theta x_{t-1} dt + sigma sqrt(dt) n_t with the agent's own normal draws, per env."""
    from rlexp.agents import TD3

    agent = TD3(make_envs("Pendulum-v1", n_envs=2, seed=0, vectorization="sync"), model="mlp",
                buffer=ReplayBuffer(1000, 10, 4), seed=0, noise_type="ornstein_uhlenbeck", step_noise_coef=0.5,
                ou_theta=0.3)
    obs = tf.constant(np.random.default_rng(0).normal(size=(2, 3)), tf.float32)
    twin = tf.random.Generator.from_state(agent.tf_rng.state.numpy(), agent.tf_rng.algorithm)
    mean = np.tanh(agent.actor(obs).numpy())
    x = np.zeros((2, 1))
    for _ in range(3):
        actions = agent.explore(obs).numpy()
        n = twin.normal([2, 1]).numpy()
        x = x - 0.3 * x * 0.01 + 0.5 * np.sqrt(0.01) * n
        np.testing.assert_allclose(actions, np.clip(mean + x, -1, 1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(agent.ou_noise.numpy(), x, rtol=1e-5)
    assert "ou_noise" in agent.resume_variables()


def test_sac_gsde_log_prob_and_noise_held_between_draws():
    agent = small_sac(use_sde=True, sde_sample_freq=2, log_std_init=-1.0, train_freq=4)
    obs = np.random.default_rng(2).normal(size=(4, 3)).astype(np.float32)
    mean, features = (x.numpy() for x in agent.actor(obs))
    std = np.exp(agent.log_std.numpy())
    variance = np.square(features) @ np.square(std) + 1e-6
    actions, log_prob = (x.numpy() for x in agent.sample(obs))
    u = np.arctanh(np.clip(actions, -1 + 1e-7, 1 - 1e-7)).astype(np.float64)
    expected = norm.logpdf(u, np.clip(mean, -2, 2), np.sqrt(variance)).sum(-1) - np.log(1 - actions**2 + 1e-6).sum(-1)
    np.testing.assert_allclose(log_prob, expected, rtol=1e-3, atol=1e-3)
    one = obs[:1]
    first, second, third = (agent.explore(one).numpy() for _ in range(3))
    np.testing.assert_array_equal(first, second)  # the same noise matrix for sde_sample_freq=2 steps
    assert not np.array_equal(second, third)
    matrix = agent.sde_noise.numpy()[0]
    np.testing.assert_allclose(third, np.tanh(np.clip(mean[:1], -2, 2) + features[:1] @ matrix), rtol=1e-5)
    assert set(agent.resume_variables()) == {"sde_noise", "sde_steps"} and "log_std" in agent.extra_variables()


def test_sac_gsde_draws_fresh_noise_at_each_update_phase_as_sb3s_collect_rollouts():
    """SB3's SAC draws gSDE noise at the start of each collect_rollouts (train_freq env steps) and every
    sde_sample_freq steps counted from it: train_freq=3, sde_sample_freq=2 draws at steps 0, 2 | 3, 5 | 6, 8; with
    sde_sample_freq=-1 once a phase: 0 | 3 | 6."""
    one = np.zeros((1, 3), np.float32)
    for freq, draws in ((2, [0, 2, 3, 5, 6, 8]), (-1, [0, 3, 6])):
        agent = small_sac(use_sde=True, sde_sample_freq=freq, log_std_init=-1.0, train_freq=3)
        matrices = []
        for _ in range(9):
            agent.explore(one)
            matrices.append(agent.sde_noise.numpy().copy())
        drawn = [0] + [t for t in range(1, 9) if not np.array_equal(matrices[t], matrices[t - 1])]
        assert drawn == draws, freq


def test_sac_preset_warms_up_with_learning_starts_random_steps_as_sb3():
    """conf/buffer/sac.yaml (SB3: learning_starts=100, batch_size=256): 100 random-action steps, then the policy
    acts and an update follows every env step from the 101st, on batches drawn from the transitions held."""
    from hydra import compose, initialize_config_module
    from hydra.utils import instantiate

    import rlexp.main  # noqa: F401 - registers rlexp's Hydra plugins

    with initialize_config_module(config_module="rlexp.conf", version_base="1.3"):
        buffer = instantiate(compose(config_name="config", overrides=["agent=sac", "env=pendulum"]).buffer)
    assert (buffer.initial_size, buffer.batch_size) == (100, 256)
    agent = SAC(make_envs("Pendulum-v1", n_envs=1, seed=0, vectorization="sync"), model="mlp", buffer=buffer, seed=0)
    random_steps = []
    draw = agent.random_actions
    agent.random_actions = lambda: random_steps.append(1) or draw()
    agent.max_steps = 250
    agent.train_iteration()
    assert len(random_steps) == agent.steps == buffer.size == 100 and int(agent.updates.numpy()) == 0
    while agent.steps < 250:
        agent.train_iteration()
    assert len(random_steps) == 100 and int(agent.updates.numpy()) == 150
