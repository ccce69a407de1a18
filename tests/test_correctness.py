"""Replay of raw transitions, seeding from the Python API, vector-env autoreset, resume's first episodes,
PPO's clip-range schedule."""
import gymnasium as gym
import numpy as np
import pytest

from rlexp.agents import DDPG, DQN, PPO
from rlexp.buffers import ReplayBuffer
from rlexp.envs.make import make_envs
from rlexp.envs.normalize import RunningMeanStd
from rlexp.errors import UserError


def normalised(raw, mean, var, clip=10.0):
    """VecNormalize's observation formula, written out."""
    return np.clip((raw - mean) / np.sqrt(var + 1e-8), -clip, clip)


def reference_cartpole(actions):
    """A plain gymnasium CartPole, seeded like the agent's: the raw observations for `actions`."""
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=0)
    observations = [obs]
    for a in actions:
        obs, *_ = env.step(int(a))
        observations.append(obs)
    return np.array(observations)


def test_dqn_replay_holds_raw_transitions_and_samples_are_normalised_with_current_statistics():
    agent = DQN(make_envs("CartPole-v1", n_envs=1, seed=0), buffer=ReplayBuffer(1000, 6, 4), seed=0,
                normalize_obs=True, normalize_reward=True, train_freq=1, gradient_steps=1)
    actions = np.array([0, 1, 0, 1, 0, 1])
    for a in actions:
        agent._obs = agent._numpy_step(agent._obs, np.array([a]))
    raw = reference_cartpole(actions)
    data = agent.buffer.data
    np.testing.assert_allclose(data["obs"][:6], raw[:-1], rtol=1e-6)
    np.testing.assert_allclose(data["next_obs"][:6], raw[1:], rtol=1e-6)
    np.testing.assert_array_equal(data["rewards"][:6], np.ones(6))  # CartPole's raw reward, not scaled

    # the statistics drift; a sample is normalised with the statistics at sampling time, obs and next_obs alike
    rows = {k: v[:4] for k, v in data.items()}
    agent.buffer.sample = lambda n: dict(rows)
    captured = {}
    agent._update_fn = lambda batch: captured.update(batch) or {"loss": 0.0}
    agent.train_iteration()  # one more env step (the statistics move again), then the sample
    mean, var = agent.normalizer.obs_rms.mean, agent.normalizer.obs_rms.var
    np.testing.assert_allclose(captured["obs"], normalised(raw[:4], mean, var), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(captured["next_obs"], normalised(raw[1:5], mean, var), rtol=1e-5, atol=1e-6)
    reward_std = np.sqrt(agent.normalizer.return_rms.var + 1e-8)
    np.testing.assert_allclose(captured["rewards"], np.ones(4) / reward_std, rtol=1e-6)


def test_ddpg_samples_are_normalised_with_current_statistics():
    agent = DDPG(make_envs("Pendulum-v1", n_envs=1, seed=0, vectorization="sync"), buffer=ReplayBuffer(100, 3, 3),
                 seed=0, normalize_obs=True)
    for _ in range(3):
        agent._obs = agent._numpy_step(agent._obs, np.zeros((1, 1), np.float32))
    raw_obs = agent.buffer.data["obs"][:3].astype(np.float64)
    agent.normalizer.obs_rms.mean = np.array([0.5, -0.5, 2.0])  # statistics drift after the data was stored
    agent.normalizer.obs_rms.var = np.array([4.0, 0.25, 1.0])
    agent.buffer.sample = lambda n: {k: v[:3] for k, v in agent.buffer.data.items()}
    obs = agent._numpy_sample()[0]
    np.testing.assert_allclose(obs, (raw_obs - [0.5, -0.5, 2.0]) / np.sqrt([4.0, 0.25, 1.0]), rtol=1e-5)


def test_seed_gives_identical_weights_and_history_from_the_python_api():
    def run():
        agent = PPO(make_envs("CartPole-v1", n_envs=2, seed=0), seed=0, n_steps=16, mini_batches=2)
        initial = [w.copy() for w in agent.model.get_weights()]
        agent.fit(max_steps=512, progress="none")
        return initial, agent

    (initial_a, a), (initial_b, b) = run(), run()
    for x, y in zip(initial_a, initial_b):
        np.testing.assert_array_equal(x, y)
    for x, y in zip(a.model.get_weights(), b.model.get_weights()):
        np.testing.assert_array_equal(x, y)
    for key in ("episode", "step", "episode_reward"):
        assert a.history.rows[key] == b.history.rows[key]


def test_next_step_autoreset_vector_envs_are_refused_at_construction():
    envs = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync")
    with pytest.raises(UserError, match="autoreset_mode"):
        PPO(envs)
    same_step = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync",
                             vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP})
    agent = PPO(same_step, seed=0, n_steps=64, mini_batches=2)
    agent.fit(max_steps=256, progress="none")  # episodes end (CartPole with random actions) without KeyError
    assert agent.episodes > 0


def test_resume_starts_fresh_episodes_normalised_with_the_saved_statistics(tmp_path):
    def ppo():
        return PPO(make_envs("Pendulum-v1", n_envs=2, seed=0), seed=0, n_steps=16, mini_batches=2, normalize_obs=True)

    agent = ppo()
    run_start = agent._raw_obs.copy()
    agent.fit(max_steps=64, progress="none")
    agent.save(tmp_path / "last.ckpt")
    saved = RunningMeanStd((3,))
    saved.load_state_dict({k[4:]: v for k, v in agent.normalizer.state_dict().items() if k.startswith("obs/")})

    resumed = ppo()
    resumed.load(tmp_path / "last.ckpt")
    reset_obs = resumed._raw_obs
    assert not np.allclose(reset_obs, run_start)  # a seed derived from the step: not the run's first episodes
    np.testing.assert_allclose(resumed._obs, normalised(reset_obs, saved.mean, saved.var), rtol=1e-5, atol=1e-6)

    again = ppo()
    again.load(tmp_path / "last.ckpt")
    np.testing.assert_array_equal(again._raw_obs, reset_obs)  # and the same episodes on every resume of it


def test_ppo_linear_clip_schedule_decays_per_rollout():
    agent = PPO(make_envs("CartPole-v1", n_envs=2, seed=0), seed=0, n_steps=16, mini_batches=2, clip_norm=0.2,
                clip_schedule="linear")
    agent.fit(max_steps=320, progress="none")  # 10 rollouts of 32 steps in one call; the last starts at 288
    assert float(agent.clip_range.numpy()) == pytest.approx(0.2 * (1 - 288 / 320), rel=1e-6)
    constant = PPO(make_envs("CartPole-v1", n_envs=2, seed=0), seed=0, n_steps=16, mini_batches=2)
    assert constant.schedules() == {}
    with pytest.raises(UserError, match="clip_schedule"):
        PPO(make_envs("CartPole-v1", n_envs=2, seed=0), clip_schedule="cosine")


@pytest.mark.parametrize("key", ["normalize_obs", "normalize_reward"])
def test_acer_refuses_normalisation_of_replayed_rollouts(key):
    from rlexp.agents import ACER

    with pytest.raises(UserError, match=f"agent.{key}=true is not supported by ACER"):
        ACER(make_envs("CartPole-v1", n_envs=2, seed=0), **{key: True})
