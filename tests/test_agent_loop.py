"""The base loop's bookkeeping: plateau LR reduction, early stopping, target reward (truncation bootstrapping:
test_truncation.py)."""
import pytest

from rlexp.agents import DDPG, DQN, PPO
from rlexp.buffers import ReplayBuffer
from rlexp.envs.make import make_envs


def make_agent(**kwargs):
    return PPO(make_envs("CartPole-v1", n_envs=2, seed=0), seed=0, n_steps=8, mini_batches=1, **kwargs)


def test_plateau_reduces_lr_and_early_stop_counts():
    agent = make_agent(divergence_monitoring_steps=0, plateau_reduce_patience=2, plateau_reduce_factor=0.5,
                       early_stop_patience=2, reward_buffer_size=1, lr=1e-3)
    agent._finished = [(1, 10.0), (2, 5.0), (3, 5.0)]  # best 10, then two episodes without improvement
    agent._record_episodes(0.0)
    assert agent.lr_scale == 0.5 and agent.early_stop_count == 1 and agent.current_lr() == 5e-4
    agent._finished = [(4, 5.0), (5, 5.0)]
    agent._record_episodes(0.0)
    assert agent.early_stop_count == 2
    summary = agent.fit(max_steps=10_000, progress="none")
    assert summary["reason"] == "early_stop" and summary["steps"] == 0
    assert list(agent.history.rows["best_reward"]) == [10.0] * 5


def test_no_plateau_logic_before_monitoring_steps():
    agent = make_agent(divergence_monitoring_steps=1e9, plateau_reduce_patience=1, reward_buffer_size=1)
    agent._finished = [(1, 10.0), (2, 1.0), (3, 1.0)]
    agent._record_episodes(0.0)
    assert agent.lr_scale == 1.0 and agent.early_stop_count == 0


def test_target_reward_reads_a_full_window_of_episodes():
    """run.target_reward: the mean of the last agent.reward_buffer_size episodes, as conf/config.yaml says."""
    agent = make_agent(reward_buffer_size=100)
    agent.rewards.extend([500.0] * 99)
    assert not agent.target_reached(475)  # 99 episodes: the 100-episode window is not full
    agent.rewards.append(500.0)
    assert agent.target_reached(475) and not agent.target_reached(None)
    agent.rewards.extend([0.0] * 6)  # the window's mean: (94 x 500) / 100 = 470
    assert not agent.target_reached(475)


def test_async_vectorization_trains():
    envs = make_envs("CartPole-v1", n_envs=2, seed=0, vectorization="async")
    agent = PPO(envs, seed=0, n_steps=16, mini_batches=2)
    summary = agent.fit(max_steps=64, progress="none")
    envs.close()
    assert summary["steps"] == 64


def test_no_retracing_after_the_first_iteration():
    """Every graph function traces once; later iterations (new lr, epsilon, step counts) reuse it."""
    from rlexp.agents import A2C, DQN, TD3
    from rlexp.buffers import ReplayBuffer

    agents = [
        PPO(make_envs("CartPole-v1", n_envs=2, seed=0), seed=0, n_steps=8, mini_batches=1, lr_schedule="linear"),
        A2C(make_envs("CartPole-v1", n_envs=2, seed=0), seed=0, lr_schedule="linear"),
        A2C(make_envs("CartPole-v1", n_envs=4, seed=0), seed=0, lr_schedule="linear"),  # a graph env, graph rollouts
        DQN(make_envs("CartPole-v1", n_envs=1, seed=0), buffer=ReplayBuffer(1000, 50, 16), seed=0, train_freq=8,
            epsilon_decay_steps=200),
        TD3(make_envs("Pendulum-v1", n_envs=1, seed=0), buffer=ReplayBuffer(1000, 50, 16), seed=0),
    ]
    assert agents[2].steps_in_graph and agents[4].steps_in_graph
    for agent in agents:
        agent.max_steps = 10_000
        for _ in range(12):  # DQN/TD3 step randomly until their buffer is ready, then train
            agent._apply_lr()
            agent.train_iteration()
        functions = {k: v for k, v in vars(agent).items() if hasattr(v, "experimental_get_tracing_count")}
        counts = {k: f.experimental_get_tracing_count() for k, f in functions.items()}
        assert functions and all(n <= 1 for n in counts.values()), (type(agent).__name__, counts)
        graphs = 1 if isinstance(agent, TD3) else 2  # TD3's loop collects and updates in one graph
        assert sum(counts.values()) >= graphs, (type(agent).__name__, counts)  # collection and update ran in graphs


def test_schedule_steps_sets_the_linear_schedules_horizon():
    """Rollouts of 2 envs x 8 steps = 16; a fit of 64 steps runs cycles starting at 0, 16, 32, 48. The last
    cycle's learning rate and clip range are the schedules' values at 48 steps: 1 - 48/64 = 0.25 of the
    start over the run, 1 - 48/256 = 0.8125 with schedule_steps=256."""
    for schedule_steps, fraction in ((None, 0.25), (256, 0.8125)):
        agent = make_agent(lr=1e-3, lr_schedule="linear", clip_norm=0.2, clip_schedule="linear",
                           schedule_steps=schedule_steps)
        agent.fit(max_steps=64, progress="none")
        assert agent.steps == 64
        assert abs(float(agent.optimizer.learning_rate) - 1e-3 * fraction) < 1e-9
        assert abs(float(agent.clip_range) - 0.2 * fraction) < 1e-7
        assert agent.current_lr() == 1e-3 * (1 - 64 / (schedule_steps or 64))


@pytest.mark.parametrize("make, max_steps, steps", [
    # on-policy: whole rollouts of n_steps x n_envs = 16 steps, the last one past max_steps by up to 15
    (lambda: PPO(make_envs("CartPole-v1", n_envs=2, seed=0), seed=0, n_steps=8, mini_batches=1), 17, 32),
    # off-policy: the warm-up to initial_size=4 (2 vector steps), then cycles of train_freq x n_envs = 6 steps,
    # the last one past max_steps by up to 5
    (lambda: DDPG(make_envs("Pendulum-v1", n_envs=2, seed=0, vectorization="sync"), model="mlp",
                  buffer=ReplayBuffer(100, 4, 4), seed=0, train_freq=3), 13, 16),
    # DQN: iterations of train_freq x n_envs = 8 steps, the last one past max_steps by up to 7
    (lambda: DQN(make_envs("CartPole-v1", n_envs=2, seed=0), model="mlp", buffer=ReplayBuffer(100, 4, 4), seed=0,
                 train_freq=4), 9, 16),
])
def test_a_fit_passes_max_steps_by_less_than_its_last_rollout_or_cycle(make, max_steps, steps):
    assert make().fit(max_steps, progress="none")["steps"] == steps
