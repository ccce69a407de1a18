"""Time-limit truncation: on-policy rollouts bootstrap a truncated step's reward with the value of the
observation the step led to (never the next episode's first one), terminations are not bootstrapped,
and off-policy agents store that final observation as `next_obs` with `terminated` 0 at a truncation.

Most tests run a tiny deterministic env whose observation encodes the step count `k` into the episode, so
every step's expected observation, reward, flags and final observation are known by hand:

    env 0: never terminates; the TimeLimit truncates it after 4 steps
    env 1: terminates after 3 steps
    env 2: terminates after 4 steps, the step the TimeLimit truncates it too (a termination: no bootstrap)

The reward of the k-th step of an episode is k.
"""
import gymnasium as gym
import numpy as np
import pytest
import tensorflow as tf
from gymnasium.wrappers import TimeLimit

from rlexp.agents import A2C, ACER, DDPG, DQN, PPO, TD3, TRPO
from rlexp.buffers import ReplayBuffer
from rlexp.envs.graph import GraphVectorEnv
from rlexp.envs.make import make_envs

MAX_STEPS = 4  # the TimeLimit
TERMINATE_AT = (None, 3, 4)  # per env (None: never)
N_STEPS = 9  # env steps per test rollout: env 0 and 2 end at steps 3 and 7, env 1 at 2, 5 and 8
GAMMA = 0.5
TINY_MLP = {"layers": [{"units": 16, "activation": "tanh"}, {"output": True}]}
TINY_CNN = {"layers": [{"type": "conv", "filters": 4, "kernel": 3, "activation": "relu", "common": True},
                       {"type": "flatten", "common": True}, {"units": 16, "activation": "relu"}, {"output": True}]}


def observation(k, tag, image=False):
    """What env `tag` observes `k` steps into an episode."""
    if not image:
        return np.array([k, tag], np.float32)
    frame = np.zeros((8, 8, 1), np.uint8)
    frame[:, :4] = 40 * k
    frame[:, 4:] = 60 * (tag + 1)
    return frame


class CountEnv(gym.Env):
    """Observes (k, tag) (or an 8x8x1 uint8 frame of them), k the steps taken in this episode; reward k;
    terminates after `terminate_at` steps (None: never). Actions are ignored."""

    def __init__(self, tag, terminate_at=None, continuous=False, image=False):
        self.tag, self.terminate_at, self.image = tag, terminate_at, image
        self.observation_space = (gym.spaces.Box(0, 255, (8, 8, 1), np.uint8) if image else
                                  gym.spaces.Box(0.0, 100.0, (2,), np.float32))
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32) if continuous else gym.spaces.Discrete(2)
        self.k = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.k = 0
        return observation(0, self.tag, self.image), {}

    def step(self, action):
        self.k += 1
        terminated = self.k == self.terminate_at
        return observation(self.k, self.tag, self.image), float(self.k), terminated, False, {}


def count_envs(**kwargs):
    """The three envs above as a same-step autoreset vector env, as `rlexp.envs.make_envs` builds them."""
    makers = [lambda tag=tag, end=end: TimeLimit(CountEnv(tag, end, **kwargs), MAX_STEPS)
              for tag, end in enumerate(TERMINATE_AT)]
    return gym.vector.SyncVectorEnv(makers, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)


class GraphCountEnv(GraphVectorEnv):
    """The same envs as a `GraphVectorEnv` (steps in NumPy and inside TF graphs)."""

    state_size = 1  # k

    def __init__(self, continuous=False):
        self.end = np.array([np.inf if end is None else end for end in TERMINATE_AT])
        self.tags = np.arange(len(TERMINATE_AT), dtype=np.float64)
        self.single_observation_space = gym.spaces.Box(0.0, 100.0, (2,), np.float32)
        self.single_action_space = (gym.spaces.Box(-1.0, 1.0, (1,), np.float32) if continuous else
                                    gym.spaces.Discrete(2))
        super().__init__(len(TERMINATE_AT), MAX_STEPS)

    def initial_state(self, xp, uniform, n):
        return xp.stack([uniform(0.0, 1.0, (n,)) * 0.0])

    def dynamics(self, xp, state, actions):
        k = state[0] + 1.0
        return xp.stack([k]), k * 1.0, k >= self.end

    def observe(self, xp, state):
        return xp.cast(xp.stack([state[0], self.tags], 1), xp.float32)


def script(n_steps=N_STEPS):
    """What the envs do, step by step, from a reset: k before and after each step [T, N], and gymnasium's
    terminated and truncated flags [T, N] (both set for env 2's episode ends)."""
    k_before, k_after, terminated, truncated = (np.zeros((n_steps, len(TERMINATE_AT)), int) for _ in range(4))
    for i, end in enumerate(TERMINATE_AT):
        length = min(end or MAX_STEPS, MAX_STEPS)
        for t in range(n_steps):
            k_before[t, i] = t % length
            k_after[t, i] = k_before[t, i] + 1
            terminated[t, i] = k_after[t, i] == end
            truncated[t, i] = k_after[t, i] == MAX_STEPS
    return k_before, k_after, terminated.astype(bool), truncated.astype(bool)


def observations(k, image=False):
    """observation(k[t, i], tag i) for a [T, N] array of k."""
    return np.stack([np.stack([observation(k[t, i], i, image) for i in range(k.shape[1])]) for t in range(len(k))])


def value(agent, obs):
    """The agent's critic on a batch of observations, through its TensorFlow model."""
    return agent.value(tf.constant(obs)).numpy()


# ----- on-policy rollouts ---------------------------------------------------------------------------
def check_rollout(agent, bootstrap=True, image=False):
    """One `collect()`: every stored observation, done and reward against the script; truncated steps
    (env 0's episode ends) exactly r + gamma * V(final observation) when bootstrapping, r otherwise."""
    k_before, k_after, terminated, truncated = script()
    batch = {k: v.numpy() for k, v in agent.collect().items()}
    ends = terminated | truncated
    np.testing.assert_array_equal(batch["obs"], observations(k_before, image))  # acts on the reset obs after ends
    np.testing.assert_array_equal(batch["dones"], ends.astype(np.float32))
    rewards = k_after.astype(np.float32)  # what the envs paid
    boot = truncated & ~terminated if bootstrap else np.zeros_like(ends)
    assert boot.sum() == (2 if bootstrap else 0)  # env 0 at steps 3 and 7
    not_boot = ~boot
    np.testing.assert_array_equal(batch["rewards"][not_boot], rewards[not_boot])  # exactly r: no bootstrap
    if bootstrap:
        final_values = value(agent, observations(k_after, image)[boot])  # of (k=4, tag 0): where the steps led
        # a mix-up with the next episode's first observation (k=0, tag 0) would show: the values differ
        assert np.all(np.abs(final_values - value(agent, observation(0, 0, image)[None])) > 1e-3)
        np.testing.assert_allclose(batch["rewards"][boot], rewards[boot] + GAMMA * final_values, rtol=1e-5, atol=1e-6)
    # episode bookkeeping: (env step count at the end, undiscounted return), as the envs paid them
    n_envs = ends.shape[1]
    expected = sorted((t * n_envs + i + 1, float(sum(range(1, k_after[t, i] + 1)))) for t, i in zip(*np.nonzero(ends)))
    assert sorted((step, ret) for step, ret, _ in agent._finished) == expected and agent.steps == N_STEPS * n_envs
    after_rollout = observations(script(N_STEPS + 1)[0], image)[-1]  # k before a 10th step
    np.testing.assert_array_equal(batch["last_obs"], after_rollout)
    np.testing.assert_array_equal(agent._obs, after_rollout)
    return batch


def on_policy_agent(agent_cls, envs, numpy_acting=True, model=TINY_MLP, **kwargs):
    extra = {"mini_batches": 1} if agent_cls in (PPO, TRPO) else {}
    agent = agent_cls(envs, model, seed=0, n_steps=N_STEPS, gamma=GAMMA, **extra, **kwargs)
    agent.numpy_acting = numpy_acting  # False: TensorFlow acting (`rollout` / `rollout_step`)
    return agent


@pytest.mark.parametrize("agent_cls,continuous", [(PPO, False), (A2C, False), (TRPO, False), (PPO, True)])
def test_numpy_rollout_bootstraps_truncations_with_the_final_obs(agent_cls, continuous):
    agent = on_policy_agent(agent_cls, count_envs(continuous=continuous))
    assert agent._use_numpy_rollout() and not agent.steps_in_graph
    check_rollout(agent)


@pytest.mark.parametrize("agent_cls,continuous", [(PPO, False), (A2C, False), (TRPO, False), (ACER, False),
                                                  (A2C, True)])
def test_tensorflow_rollout_bootstraps_truncations_with_the_final_obs(agent_cls, continuous):
    agent = on_policy_agent(agent_cls, count_envs(continuous=continuous), numpy_acting=False)
    assert not agent._use_numpy_rollout() and not agent.steps_in_graph and not agent.image_obs
    check_rollout(agent)


@pytest.mark.parametrize("numpy_acting", [True, False])
def test_truncation_bootstrap_can_be_turned_off(numpy_acting):
    """bootstrap_truncation=False: a truncation ends the episode like a termination, reward exactly r."""
    agent = on_policy_agent(PPO, count_envs(), numpy_acting=numpy_acting, bootstrap_truncation=False)
    assert agent._use_numpy_rollout() == numpy_acting
    check_rollout(agent, bootstrap=False)


@pytest.mark.parametrize("bootstrap", [True, False])
def test_a2c_graph_env_rollout_bootstraps_truncations_with_the_final_obs(bootstrap):
    """A2C steps a GraphVectorEnv inside the graph: the final observations come from `graph_step`."""
    agent = on_policy_agent(A2C, GraphCountEnv(), bootstrap_truncation=bootstrap)
    assert agent.steps_in_graph and not agent._use_numpy_rollout()
    check_rollout(agent, bootstrap=bootstrap)


def test_graph_env_python_steps_bootstrap_truncations_with_the_final_obs():
    """PPO without XLA does not roll graph envs out in the graph: it steps the GraphVectorEnv's NumPy `step`."""
    agent = on_policy_agent(PPO, GraphCountEnv(), jit_compile=False)
    assert not agent.steps_in_graph and agent._use_numpy_rollout()
    check_rollout(agent)


def test_ppo_rolls_a_graph_env_out_in_its_compiled_loop_and_bootstraps_truncations_with_the_final_obs():
    agent = on_policy_agent(PPO, GraphCountEnv(), jit_compile=True)
    assert agent.xla_loop and agent.steps_in_graph and not agent._use_numpy_rollout()
    check_rollout(agent)


@pytest.mark.parametrize("bootstrap", [True, False])
def test_image_rollout_bootstraps_truncations_with_the_final_obs(bootstrap):
    """Image observations take `rollout_step`'s per-step `tf.cond` bootstrap."""
    agent = on_policy_agent(PPO, count_envs(image=True), model=TINY_CNN, bootstrap_truncation=bootstrap)
    assert agent.image_obs and not agent._use_numpy_rollout()
    check_rollout(agent, bootstrap=bootstrap, image=True)


class RecordFinalObs(gym.vector.VectorWrapper):
    """Records each step's truncated, terminated flags and the env's own `info["final_obs"]`."""

    def __init__(self, env):
        super().__init__(env)
        self.steps = []

    def step(self, actions):
        obs, rewards, terminated, truncated, info = self.env.step(actions)
        final = np.array([info["final_obs"][i] if d else np.full(4, np.nan, np.float32)
                          for i, d in enumerate(terminated | truncated)])
        self.steps.append((rewards.copy(), terminated.copy(), truncated.copy(), final))
        return obs, rewards, terminated, truncated, info


def test_cartpole_vector_env_rollout_bootstraps_truncations_with_its_final_obs():
    """gymnasium's NumPy-batched CartPole (rlexp's same-step version): r + gamma * V(info["final_obs"])."""
    envs = RecordFinalObs(make_envs("CartPole-v1", n_envs=4, seed=0, vectorization="vector", max_episode_steps=5))
    agent = PPO(envs, seed=0, n_steps=12, mini_batches=1, gamma=GAMMA)
    assert agent._use_numpy_rollout()
    batch = agent.collect()
    assert batch["obs"].shape == (12, 4, 4) and batch["rewards"].shape == (12, 4)
    rewards, terminated, truncated, final = (np.stack(x) for x in zip(*envs.steps))
    assert truncated[[4, 9]].all() and not terminated.any() and truncated.sum() == 8  # every 5 steps
    # the env's final observations are where the last step led: gymnasium's CartPole from the stored obs
    cartpole = gym.make("CartPole-v1").unwrapped
    cartpole.reset(seed=0)
    for t, i in zip(*np.nonzero(truncated)):
        cartpole.state = batch["obs"][t, i].numpy().astype(np.float64)
        np.testing.assert_allclose(final[t, i], cartpole.step(int(batch["actions"][t, i]))[0], rtol=1e-5, atol=1e-6)
    expected = rewards.astype(np.float32)
    expected[truncated] += GAMMA * value(agent, final[truncated])
    np.testing.assert_array_equal(batch["rewards"].numpy()[~truncated], 1.0)
    np.testing.assert_allclose(batch["rewards"].numpy(), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(batch["dones"].numpy(), truncated.astype(np.float32))
    assert agent.steps == 48 and agent.episodes == 0 and len(agent._finished) == 8


# ----- off-policy: env_step and the replay buffer -------------------------------------------------
@pytest.mark.parametrize("bootstrap", [True, False])
def test_env_step_returns_the_final_obs_at_episode_ends(bootstrap):
    agent = DQN(count_envs(), TINY_MLP, seed=0, bootstrap_truncation=bootstrap)
    _, k_after, terminated, truncated = script()
    for t in range(N_STEPS):
        obs, rewards, term, trunc, next_obs = agent.env_step(np.zeros(3, np.int64))
        ends = terminated[t] | truncated[t]
        np.testing.assert_array_equal(next_obs, observations(k_after)[t])  # the final obs at ends
        np.testing.assert_array_equal(obs, observations(np.where(ends, 0, k_after))[t])  # the reset obs there
        np.testing.assert_array_equal(agent._obs, obs)
        np.testing.assert_array_equal(rewards, k_after[t].astype(np.float32))
        if bootstrap:  # gymnasium's flags as they are (env 2 ends with both)
            np.testing.assert_array_equal(term, terminated[t])
            np.testing.assert_array_equal(trunc, truncated[t])
        else:  # every episode end is terminal
            np.testing.assert_array_equal(term, ends)
            np.testing.assert_array_equal(trunc, np.zeros(3, bool))


class RecordingReplayBuffer(ReplayBuffer):
    """A ReplayBuffer that also keeps the `dones` each `add` was given (ReplayBuffer does not store them)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.dones = []

    def add(self, obs, actions, rewards, next_obs, terminated, dones=None):
        self.dones.append(np.array(dones))
        super().add(obs, actions, rewards, next_obs, terminated, dones)


def check_replay(buffer, bootstrap, n_steps):
    """The buffer holds n_steps x 3 transitions in step order: obs, next_obs (the final obs at ends), reward
    k, terminated 1 at terminations (0 at env 0's truncations unless bootstrap_truncation=False)."""
    k_before, k_after, terminated, truncated = script(n_steps)
    ends = terminated | truncated
    state = buffer.state_dict()
    data = {k[5:]: np.asarray(v) for k, v in state.items() if k.startswith("data/")}
    assert int(state["size"]) == ends.size
    np.testing.assert_array_equal(data["obs"], observations(k_before).reshape(-1, 2))
    np.testing.assert_array_equal(data["next_obs"], observations(k_after).reshape(-1, 2))
    np.testing.assert_array_equal(data["rewards"], k_after.reshape(-1).astype(np.float32))
    expected_terminated = (terminated if bootstrap else ends).reshape(-1).astype(np.float32)
    np.testing.assert_array_equal(data["terminated"], expected_terminated)
    assert bootstrap == (expected_terminated.sum() < ends.sum())  # env 0's truncations are stored non-terminal
    if isinstance(buffer, RecordingReplayBuffer):
        np.testing.assert_array_equal(np.concatenate(buffer.dones), ends.reshape(-1))


@pytest.mark.parametrize("numpy_acting", [True, False])
@pytest.mark.parametrize("bootstrap", [True, False])
def test_dqn_stores_the_final_obs_and_terminated_flags(numpy_acting, bootstrap):
    buffer = RecordingReplayBuffer(max_size=100, initial_size=100)  # never ready: collection only
    agent = DQN(count_envs(), TINY_MLP, buffer, seed=0, train_freq=6, numpy_acting=numpy_acting,
                bootstrap_truncation=bootstrap)
    assert (agent._mirror is not None) == numpy_acting
    agent.max_steps = 10_000
    for _ in range(2):
        agent.train_iteration()
    check_replay(agent.buffer, bootstrap, n_steps=12)


def run_ddpg(agent, total_steps):
    """Random warm-up steps (Python) until the buffer is ready, then graph train cycles up to total_steps."""
    agent.max_steps = total_steps * agent.n_envs
    while agent.steps < agent.max_steps:
        agent.train_iteration()
    assert agent.steps == agent.max_steps and int(agent.updates) > 0


@pytest.mark.parametrize("bootstrap", [True, False])
def test_ddpg_stores_the_final_obs_and_terminated_flags(bootstrap):
    buffer = RecordingReplayBuffer(max_size=100, initial_size=6, batch_size=4)  # 2 warm-up steps of 3 envs
    agent = DDPG(count_envs(continuous=True), TINY_MLP, buffer, seed=0, bootstrap_truncation=bootstrap)
    assert not agent.steps_in_graph
    run_ddpg(agent, total_steps=11)
    check_replay(agent.buffer, bootstrap, n_steps=11)


@pytest.mark.parametrize("bootstrap", [True, False])
def test_td3_graph_env_stores_the_final_obs_and_terminated_flags(bootstrap):
    """TD3 on a GraphVectorEnv: warm-up through its NumPy `step`, then `graph_step` into a GraphReplayBuffer."""
    buffer = ReplayBuffer(max_size=100, initial_size=6, batch_size=4)
    agent = TD3(GraphCountEnv(continuous=True), TINY_MLP, buffer, seed=0, bootstrap_truncation=bootstrap)
    assert agent.steps_in_graph
    run_ddpg(agent, total_steps=11)
    assert type(agent.buffer).__name__ == "GraphReplayBuffer"  # the graph steps stored the later transitions
    check_replay(agent.buffer, bootstrap, n_steps=11)
