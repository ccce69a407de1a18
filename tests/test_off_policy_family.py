"""The off-policy family's shared base changes no numbers: short seeded runs of every loop path give the
weights recorded with the code before `agents/off_policy.py` existed (where they were bit-identical,
sha256 of all weights; the tolerance only absorbs another CPU's last bits)."""
import gymnasium as gym
import numpy as np
import pytest
import tensorflow as tf

from rlexp.agents import DDPG, DQN, TD3, OffPolicyAgent
from rlexp.buffers import ReplayBuffer
from rlexp.envs.make import make_envs

RUNS = {  # name: (agent, env steps, sum of |weights| per model in models() order, before the move)
    "dqn-numpy-acting": (lambda: DQN(make_envs("CartPole-v1", n_envs=1, seed=0), model="mlp", buffer=ReplayBuffer(2000, 100, 32),
                                     seed=0, train_freq=8, gradient_steps=4, target_sync_steps=50),
                         600, [752.739868, 737.39447]),
    "dqn-graph-acting": (lambda: DQN(make_envs("CartPole-v1", n_envs=2, seed=0), model="mlp", buffer=ReplayBuffer(2000, 100, 32),
                                     seed=0, train_freq=8, gradient_steps=4, numpy_acting=False),
                         600, [650.321472, 631.312988]),
    "ddpg-env-copies": (lambda: DDPG(make_envs("Pendulum-v1", n_envs=1, seed=0, vectorization="sync"), model="mlp",
                                     buffer=ReplayBuffer(2000, 100, 64), seed=0),
                        400, [667.018921, 633.302124, 740.530273, 671.790833]),
    "td3-graph-env-grouped": (lambda: TD3(make_envs("Pendulum-v1", n_envs=1, seed=0), model="mlp",
                                          buffer=ReplayBuffer(2000, 100, 64), seed=0),
                              400, [638.148071, 622.030884, 726.590027, 646.180664, 724.676697, 645.21991]),
    "td3-cycles": (lambda: TD3(make_envs("Pendulum-v1", n_envs=2, seed=0, vectorization="sync"), model="mlp",
                               buffer=ReplayBuffer(2000, 100, 64), seed=0, train_freq=2, gradient_steps=3),
                   400, [639.043457, 621.447876, 707.673401, 637.280884, 707.087097, 635.99292]),
}


@pytest.mark.parametrize("name", list(RUNS))
def test_seeded_runs_give_the_weights_of_the_code_before_the_shared_base(name):
    make, steps, expected = RUNS[name]
    agent = make()
    assert isinstance(agent, OffPolicyAgent)
    agent.fit(steps, progress="none")
    sums = [float(np.sum(np.abs(np.concatenate([w.ravel() for w in m.get_weights()])))) for m in agent.models().values()]
    np.testing.assert_allclose(sums, expected, rtol=1e-4)


class Countdown(gym.Env):
    """Observation: the steps taken in the episode; episodes end after 2 to 6 steps drawn at reset (the time
    limit of 5 truncates the longer ones), so the envs of a vector env end their episodes at different steps."""

    observation_space = gym.spaces.Box(0.0, 10.0, (1,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.length = 0, int(self.np_random.integers(2, 7))
        return np.array([0.0], np.float32), {}

    def step(self, action):
        self.t += 1
        return np.array([self.t], np.float32), 0.0, self.t == self.length, False, {}


gym.register("Countdown-v0", entry_point=Countdown, max_episode_steps=5)


class OnesNormal:
    """A generator whose normal draws are all 1 (the rest is the agent's own): the OU noise is then a known
    sequence, sigma sqrt(dt) (1 + (1 - theta dt) + ... ) from its last restart."""

    def __init__(self, rng):
        self.rng = rng

    def normal(self, shape, *args, **kwargs):
        return tf.ones(shape)

    def __getattr__(self, name):
        return getattr(self.rng, name)


@pytest.mark.parametrize("env_id, vectorization", [("Pendulum-v1", "graph"), ("Countdown-v0", "sync"),
                                                   ("Countdown-v0", "async")])
def test_ornstein_uhlenbeck_noise_restarts_where_each_env_episode_ends(env_id, vectorization):
    """SB3 resets each env's action noise when that env's episode ends (terminated or truncated). With a zero
    actor and no updates, the stored actions are the noise; an episode starts where a row's observation is not
    the previous row's next observation."""
    sigma, theta, dt = 0.5, 0.15, 0.01
    agent = DDPG(make_envs(env_id, n_envs=2, seed=0, vectorization=vectorization, max_episode_steps=5),
                 model="mlp", buffer=ReplayBuffer(100, 6, 4), seed=0, noise_type="ornstein_uhlenbeck",
                 step_noise_coef=sigma, ou_theta=theta, gradient_steps=0)
    for weight in agent.actor.layers[-1].weights:  # tanh(0): the actions are the noise
        weight.assign(tf.zeros_like(weight))
    agent.fit(6, progress="none")  # the random warm-up: 3 steps of 2 envs
    if vectorization == "graph":
        agent.envs.elapsed[1] = 0  # Pendulum's episodes end only at the time limit: env 1's ends 3 steps later
    agent.tf_rng = OnesNormal(agent.tf_rng)
    agent.fit(30, progress="none")
    data = {k: v.reshape(15, 2, *v.shape[1:])[3:] for k, v in agent.buffer.state_dict().items() if "/" in k}
    obs, next_obs, actions = data["data/obs"], data["data/next_obs"], data["data/actions"][..., 0]
    starts = np.zeros((12, 2), bool)
    starts[1:] = np.any(obs[1:] != next_obs[:-1], axis=-1)
    assert starts.sum() >= 4 and np.any(starts[:, 0] != starts[:, 1])  # episodes end, not all together
    k = np.zeros((12, 2))  # the noise's steps since its last restart (or the first exploratory step)
    for t in range(12):
        k[t] = np.where(starts[t] | (t == 0), 1, k[t - 1] + 1)
    decay = 1 - theta * dt
    np.testing.assert_allclose(actions, sigma * np.sqrt(dt) * (1 - decay**k) / (1 - decay), rtol=1e-5)


class RecordingEvaluator:
    """An evaluation every `every` env steps that records the step count it ran at (and evaluates nothing)."""

    deterministic = True

    def __init__(self, every: int) -> None:
        self.every, self.next_step, self.at = every, every, []

    def due(self, steps: int) -> bool:
        return steps >= self.next_step

    def __call__(self, agent, train_time):
        self.at.append(agent.steps)
        self.next_step = (agent.steps // self.every + 1) * self.every
        return dict(mean_return=0.0, std_return=0.0, episodes=1, improved=False)


@pytest.mark.parametrize("n_envs, max_steps, steps", [(1, 300, 300), (3, 301, 303)])
def test_the_random_warm_up_stops_at_max_steps_and_at_evaluations(n_envs, max_steps, steps):
    """A warm-up of 1,000 random steps in a run of 300 takes 300 (whole vector steps: 303 of 3 envs), and pauses
    at each evaluation's step as the fused calls do."""
    agent = DDPG(make_envs("Pendulum-v1", n_envs=n_envs, seed=0, vectorization="sync"), model="mlp",
                 buffer=ReplayBuffer(2000, 1000, 64), seed=0)
    evaluator = RecordingEvaluator(100)
    summary = agent.fit(max_steps, progress="none", evaluator=evaluator)
    assert summary["steps"] == steps == agent.buffer.size and summary["reason"] == "max_steps"
    assert int(agent.updates) == 0
    assert evaluator.at == [-(-s // n_envs) * n_envs for s in (100, 200, 300)]
