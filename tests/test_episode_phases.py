"""train_freq in episodes (SB3's train_freq=[n, "episode"], rlexp's agent.train_freq_unit=episode): env steps until n
episodes end, counted over all envs, then gradient_steps updates (-1: one per transition), on episodes of a fixed
length worked out by hand; RL Zoo's rows translated; refusals."""
import pytest

from rlexp.agents import DQN, NAF, QRDQN, SAC, TD3
from rlexp.buffers import ReplayBuffer
from rlexp.envs.make import make_envs
from rlexp.errors import UserError
from rlexp.presets.zoo import translate
from rlexp.presets.zoo.rows import ZooRow


def pendulum(n_envs, episode_steps):
    return make_envs("Pendulum-v1", n_envs=n_envs, seed=0, max_episode_steps=episode_steps,
                     vectorization="sync")


def test_one_episode_over_two_envs_then_one_update_per_transition():
    # warm-up: 10 random transitions = 5 steps of 2 envs, which end their first 5-step episodes together; the phase
    # then steps both envs 5 times, until their next episodes end: 10 transitions, 10 updates
    agent = SAC(pendulum(2, 5), model="mlp", buffer=ReplayBuffer(1000, 10, 8), seed=0, train_freq=1,
                train_freq_unit="episode", gradient_steps=-1)
    agent.fit(20, progress="none", verbose=0)
    assert (agent.steps, int(agent.updates)) == (20, 10)


def test_two_episodes_of_one_env_then_a_fixed_number_of_updates():
    # warm-up: 4 steps (one 4-step episode); the phase: 8 steps (two episodes), then 3 updates; the next phase: 3 more
    agent = TD3(pendulum(1, 4), model="mlp", buffer=ReplayBuffer(1000, 4, 8), seed=0, train_freq=2,
                train_freq_unit="episode", gradient_steps=3)
    agent.fit(12, progress="none", verbose=0)
    assert (agent.steps, int(agent.updates)) == (12, 3)
    agent.fit(20, progress="none", verbose=0)
    assert (agent.steps, int(agent.updates)) == (20, 6)


def cartpole(n_envs, episode_steps):
    return make_envs("CartPole-v1", n_envs=n_envs, seed=0, max_episode_steps=episode_steps, vectorization="sync")


@pytest.mark.parametrize("numpy_acting", [True, False])
def test_dqn_two_episodes_then_a_fixed_number_of_updates(numpy_acting):
    # CartPole cut at 4 steps (no pole falls that soon): each phase is 8 steps, two episodes; the first fills the
    # buffer's 4 initial transitions, so every phase ends with 3 updates (DQN explores from the first step)
    agent = DQN(cartpole(1, 4), model="mlp", buffer=ReplayBuffer(1000, 4, 8), seed=0, train_freq=2,
                train_freq_unit="episode", gradient_steps=3, numpy_acting=numpy_acting, epsilon_decay_steps=16)
    agent.fit(8, progress="none", verbose=0)
    assert (agent.steps, int(agent.optimizer.iterations)) == (8, 3)
    agent.fit(16, progress="none", verbose=0)
    assert (agent.steps, int(agent.optimizer.iterations)) == (16, 6)


def test_qrdqn_one_episode_over_two_envs_then_one_update_per_transition():
    # both envs end their 4-step episodes together: 8 transitions, 8 updates; the buffer waits for 10 (so the
    # first phase does not learn), the second phase learns from its 8
    agent = QRDQN(cartpole(2, 4), model="mlp", buffer=ReplayBuffer(1000, 10, 8), seed=0, n_quantiles=5, train_freq=1,
                  train_freq_unit="episode", gradient_steps=-1)
    agent.fit(8, progress="none", verbose=0)
    assert (agent.steps, int(agent.optimizer.iterations)) == (8, 0)
    agent.fit(16, progress="none", verbose=0)
    assert (agent.steps, int(agent.optimizer.iterations)) == (16, 8)


def test_rows_with_episodes_translate():
    row = ZooRow("sac", "Mine-v0", {"policy": "MlpPolicy", "train_freq": [2, "episode"], "gradient_steps": -1},
                 "sac.yml", "test")
    agent = translate(row)["agent"]
    assert (agent["train_freq"], agent["train_freq_unit"], agent["gradient_steps"]) == (2, "episode", -1)
    assert "train_freq_unit" not in translate(ZooRow("sac", "Mine-v0", {"policy": "MlpPolicy", "train_freq": [4, "step"]},
                                                     "sac.yml", "test"))["agent"]
    agent = translate(ZooRow("dqn", "Mine-v0", {"policy": "MlpPolicy", "train_freq": [3, "episode"]}, "dqn.yml",
                             "test"))["agent"]
    assert (agent["train_freq"], agent["train_freq_unit"]) == (3, "episode")


@pytest.mark.parametrize("make, says", [
    (lambda: SAC(pendulum(1, 5), model="mlp", buffer=ReplayBuffer(100, 10, 8), train_freq_unit="episodes"),
     "agent.train_freq_unit='episodes': use step or episode"),
    (lambda: NAF(pendulum(1, 5), model="mlp", buffer=ReplayBuffer(100, 10, 8), train_freq_unit="episode"),
     "NAF counts train_freq in env steps"),
])
def test_refused(make, says):
    with pytest.raises(UserError, match=says):
        make()
