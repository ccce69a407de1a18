"""The batched envs (NumPy CartPole, graph Pendulum) behave like gymnasium's copies, with same-step restarts."""
import gymnasium as gym
import numpy as np
import pytest

from rlexp.envs.graph import GraphCartPole, GraphPendulum
from rlexp.envs.make import make_envs
from rlexp.errors import UserError


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
    from rlexp.envs.make import SameStepCartPoleVectorEnv

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


# ----- EnvPool Atari -----------------------------------------------------------------------------------
def raw_envpool(n: int, seed: int, **options):
    import envpool

    return envpool.make_gymnasium("Pong-v5", num_envs=n, seed=seed, use_fire_reset=False, episodic_life=False,
                                  reward_clip=False, repeat_action_probability=0.0, **options)


def test_envpool_restarts_in_the_same_step_as_envpool_restarts_on_the_next():
    """EnvPool resets a finished env on the next step (that step's action is ignored); the adapter resets it
    in the finishing step. Same seed, same actions: the adapter's stream is EnvPool's without those steps."""
    from rlexp.envs.envpool import EnvPoolAtari

    n, agent_steps = 2, 10
    adapter = make_envs("PongNoFrameskip-v4", n_envs=n, seed=3, preprocess=True, max_episode_steps=4 * agent_steps)
    assert isinstance(adapter, EnvPoolAtari)
    raw = raw_envpool(n, 3, max_episode_steps=agent_steps, num_threads=1)
    raw_obs, _ = raw.reset()
    obs, _ = adapter.reset(seed=3)
    np.testing.assert_array_equal(obs, raw_obs)
    rng = np.random.default_rng(0)
    ends = 0
    for t in range(25):
        actions = rng.integers(0, 6, n)
        obs, rewards, terminated, truncated, info = adapter.step(actions)
        raw_obs, raw_rewards, raw_terminated, raw_truncated, _ = raw.step(actions)
        np.testing.assert_array_equal(rewards, raw_rewards)
        np.testing.assert_array_equal(truncated, raw_truncated)
        if truncated.any():  # every 10 steps, both envs at once (no Pong game ends that fast)
            ends += 1
            assert truncated.all() and info["_final_obs"].all()
            np.testing.assert_array_equal(info["final_obs"], raw_obs)
            raw_obs, raw_rewards, *_ = raw.step(rng.integers(0, 6, n))  # EnvPool's restart step
            np.testing.assert_array_equal(raw_rewards, 0)
        else:
            assert info == {}
        np.testing.assert_array_equal(obs, raw_obs)
    assert ends == 2 and obs.shape == (n, 4, 84, 84) and obs.dtype == np.uint8


def test_envpool_restarts_only_the_finished_envs_each_like_its_own_envpool_env():
    """Episodes end at different steps; env i of a pool seeded s is EnvPool's single env seeded s + i, so each
    row must follow its own reference env, with that env's restart step removed."""
    from rlexp.envs.envpool import EnvPoolAtari

    n, seed, limit = 3, 5, 5
    envs = EnvPoolAtari("PongNoFrameskip-v4", n, seed, max_episode_steps=4 * limit)
    obs, _ = envs.reset(seed=seed)
    refs = [raw_envpool(1, seed + i, max_episode_steps=limit, num_threads=1) for i in range(n)]
    for i, ref in enumerate(refs):
        np.testing.assert_array_equal(obs[i], ref.reset()[0][0])
    for i in (0, 2):  # two steps ahead of env 1: they reach the limit two steps earlier
        for a in (1, 2):
            envs.pool.step(np.array([a]), np.array([i]))
            refs[i].step(np.array([a]))
    rng = np.random.default_rng(1)
    ended = []
    for _ in range(12):
        actions = rng.integers(0, 6, n)
        obs, rewards, terminated, truncated, info = envs.step(actions)
        ended.append(truncated.copy())
        for i, ref in enumerate(refs):
            ref_obs, ref_reward, _, ref_truncated, _ = ref.step(actions[i:i + 1])
            assert (rewards[i], truncated[i]) == (ref_reward[0], ref_truncated[0])
            if ref_truncated[0]:
                np.testing.assert_array_equal(info["final_obs"][i], ref_obs[0])
                ref_obs = ref.step(np.array([0]))[0]  # EnvPool's restart step
            else:
                assert not info.get("_final_obs", np.zeros(n, bool))[i]
            np.testing.assert_array_equal(obs[i], ref_obs[0])
    np.testing.assert_array_equal(np.array(ended)[:6], [[0, 0, 0], [0, 0, 0], [1, 0, 1], [0, 0, 0], [0, 1, 0],
                                                         [0, 0, 0]])


def test_envpool_frames_equal_gymnasiums_preprocessing():
    """The same game through gymnasium's AtariPreprocessing + FrameStackObservation and through EnvPool's C++
    preprocessing: identical frames and rewards (one no-op at reset on both, so no random no-op count)."""
    streams = []
    for vectorization in ("sync", "envpool"):
        envs = make_envs("PongNoFrameskip-v4", n_envs=1, seed=0, preprocess=True, noop_max=1,
                         vectorization=vectorization)
        actions = np.random.default_rng(0)
        obs, _ = envs.reset(seed=0)
        stream = [(obs, 0.0)] + [envs.step(actions.integers(0, 6, 1))[:2] for _ in range(120)]
        streams.append(stream)
        envs.close()
    for (a, ra), (b, rb) in zip(*streams):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(ra, rb)


def test_envpool_seeds_and_options():
    a = make_envs("PongNoFrameskip-v4", n_envs=2, seed=7, preprocess=True, noop_max=30)
    b = make_envs("PongNoFrameskip-v4", n_envs=2, seed=7, preprocess=True, noop_max=30)
    c = make_envs("PongNoFrameskip-v4", n_envs=2, seed=8, preprocess=True, noop_max=30)
    runs = []
    for envs in (a, b, c):
        actions = np.random.default_rng(1)
        runs.append(np.stack([envs.step(actions.integers(0, 6, 2))[0] for _ in range(40)]))
    np.testing.assert_array_equal(runs[0], runs[1])
    assert not np.array_equal(runs[0], runs[2])
    assert a.options["repeat_action_probability"] == 0.0 and a.options["max_episode_steps"] == 108_000 // 4
    fresh = make_envs("PongNoFrameskip-v4", n_envs=2, seed=7, preprocess=True, noop_max=30)
    np.testing.assert_array_equal(a.reset(seed=7)[0], fresh.reset(seed=7)[0])  # a stepped pool, built again
    assert a.reset(seed=2**32 - 5)[0].shape == (2, 4, 84, 84)  # a resume's uint32 seed: into EnvPool's int32 range
    single = make_envs("PongNoFrameskip-v4", n_envs=2, seed=0, preprocess=True, frame_stack=1)
    assert single.single_observation_space.shape == (84, 84) and single.step(np.zeros(2, np.int64))[0].shape == (2, 84, 84)
    longer = make_envs("PongNoFrameskip-v4", n_envs=1, seed=0, preprocess=True, max_episode_steps=10**6)
    assert longer.options["max_episode_steps"] == 108_000 // 4  # ALE's own limit still applies
    sticky = make_envs("ALE/Breakout-v5", n_envs=1, seed=0, preprocess=True, frame_stack=2, screen_size=64)
    assert sticky.options["repeat_action_probability"] == 0.25 and sticky.single_observation_space.shape == (2, 64, 64)


def test_envpool_is_chosen_only_where_it_applies():
    from rlexp.envs.envpool import EnvPoolAtari

    assert isinstance(make_envs("PongNoFrameskip-v4", n_envs=2, seed=0, preprocess=True), EnvPoolAtari)
    for kwargs in (dict(render_mode="rgb_array"), dict(vectorization="sync"), dict(noop_max=0),
                   dict(wrappers=[{"_target_": "gymnasium.wrappers.ClipReward", "min_reward": -1, "max_reward": 1}])):
        assert isinstance(make_envs("PongNoFrameskip-v4", n_envs=2, seed=0, preprocess=True, **kwargs),
                          gym.vector.SyncVectorEnv)
    with pytest.raises(UserError, match="env.vectorization=envpool runs Atari ids with env.preprocess=true"):
        make_envs("CartPole-v1", vectorization="envpool")
    with pytest.raises(UserError, match="env.noop_max=0 needs env.vectorization=sync"):
        make_envs("PongNoFrameskip-v4", preprocess=True, noop_max=0, vectorization="envpool")
    with pytest.raises(UserError, match="EnvPool has no 'ALE/NotAGame-v5'"):
        EnvPoolAtari("ALE/NotAGame-v5", 1)


@pytest.mark.parametrize("vectorization", ["sync", "envpool"])
def test_life_loss_is_flagged_while_the_game_goes_on(vectorization):
    """Breakout starts with 5 lives: a random game flags 4 lost lives, then ends (terminated) on the fifth;
    without life_loss_terminal nothing is flagged."""
    for life_loss in (True, False):
        envs = make_envs("BreakoutNoFrameskip-v4", 1, seed=0, preprocess=True, life_loss_terminal=life_loss,
                         vectorization=vectorization)
        actions = np.random.default_rng(0)
        flags = 0
        while True:
            _, _, terminated, truncated, info = envs.step(actions.integers(0, 4, 1))
            flags += int(np.sum(info.get("life_loss", 0)))
            if terminated[0] or truncated[0]:
                break
        envs.close()
        assert (flags, bool(terminated[0])) == ((4, True) if life_loss else (0, True))


def test_agents_stop_bootstrapping_at_a_lost_life_and_count_whole_games():
    from rlexp.agents import PPO

    envs = make_envs("BreakoutNoFrameskip-v4", 1, seed=0, preprocess=True, life_loss_terminal=True,
                     vectorization="sync")
    agent = PPO(envs, seed=0, n_steps=16, mini_batches=1)
    actions = np.random.default_rng(0)
    ends, total = 0, 0.0
    while not agent._finished:
        _, rewards, terminated, _, _ = agent.env_step(actions.integers(0, 4, 1))
        ends += int(terminated[0])
        total += float(rewards[0])
    (_, game_return, _), = agent._finished
    assert ends == 5 and game_return == total > 0  # 4 lost lives and the game's end; one episode, all of it
    envs.close()


def test_frame_replay_keeps_the_stacks_across_a_lost_life():
    """A lost life ends the bootstrap (stored `terminated`) but not the frame stream: the stacks rebuilt
    from the frame buffer are the observations the agent saw, before and after the lost life."""
    from rlexp.agents import DQN
    from rlexp.buffers import FrameBuffer

    envs = make_envs("BreakoutNoFrameskip-v4", 1, seed=0, preprocess=True, life_loss_terminal=True,
                     vectorization="sync")
    buffer = FrameBuffer(max_size=2000, initial_size=2000, batch_size=32)
    agent = DQN(envs, buffer=buffer, seed=0)
    actions = np.random.default_rng(0)
    seen, after = [], []
    while len(after) < 6:
        seen.append(agent._raw_obs.copy())
        action = actions.integers(0, 4, 1)
        agent.store_step(action, action)
        assert not agent.episode_ends[0]
        if buffer.terminated[0, len(seen)] or after:  # entry 0 is the reset frame, transition t is entry t + 1
            after.append(len(seen))
    obs, _ = buffer._stacks(np.zeros(len(seen), np.int64), np.arange(1, len(seen) + 1))
    np.testing.assert_array_equal(obs, np.concatenate(seen))
    envs.close()


def test_wrapper_targets_from_before_the_envs_package_still_build():
    """`rlexp.wrappers.X` (env presets copied by mode=init and run dirs from before rlexp.envs was a package) is
    rlexp.envs.wrappers.X; a stored run config is read with the current path."""
    from omegaconf import OmegaConf

    from rlexp.envs.make import env_wrappers
    from rlexp.envs.wrappers import MaskVelocity
    from rlexp.runs.dirs import with_legacy_defaults

    env = gym.make("CartPole-v1")
    for target in ("rlexp.wrappers.MaskVelocity", "rlexp.envs.wrappers.MaskVelocity"):
        (wrap,) = env_wrappers([{"_target_": target}])
        assert isinstance(wrap(env), MaskVelocity)
    stored = OmegaConf.create({"env": {"id": "CartPole-v1", "wrappers": [{"_target_": "rlexp.wrappers.MaskVelocity"},
                                                                          {"_target_": "gymnasium.wrappers.ClipReward",
                                                                           "min_reward": -1}]}})
    assert [w._target_ for w in with_legacy_defaults(stored).env.wrappers] == [
        "rlexp.envs.wrappers.MaskVelocity", "gymnasium.wrappers.ClipReward"]


def test_the_probes_env_copy_is_the_first_training_copy_and_steps_as_a_new_one(monkeypatch):
    """The checks' probe copy (`probe_spaces`) becomes the first of the run's sync copies, once: the run's
    envs then step exactly as copies made new (gymnasium's own `make_vec`), restarts included; envs that
    are not sync copies close it."""
    from omegaconf import OmegaConf

    from rlexp.envs import make

    monkeypatch.setattr(make, "_PROBED", {})
    monkeypatch.setattr(make, "_SPARE", {})
    env = OmegaConf.create({"id": "Acrobot-v1", "n_envs": 3, "vectorization": "sync", "max_episode_steps": 40})
    make.probe_spaces(env, 7)
    (probe_copy,) = make._SPARE.values()
    reused = make.env_from_config(env, 7)
    assert reused.envs[0] is probe_copy and not make._SPARE
    assert make.env_from_config(env, 7).envs[0] is not probe_copy  # a second request makes its own
    fresh = gym.make_vec("Acrobot-v1", num_envs=3, vectorization_mode="sync", max_episode_steps=40,
                         vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP})
    np.testing.assert_array_equal(reused.reset(seed=7)[0], fresh.reset(seed=7)[0])
    rng = np.random.default_rng(0)
    for _ in range(100):  # 40-step episodes: two restarts
        actions = rng.integers(0, 3, 3)
        for a, b in zip(reused.step(actions)[:4], fresh.step(actions)[:4]):
            np.testing.assert_array_equal(a, b)
    assert reused.spec.id == "Acrobot-v1" and reused.spec.max_episode_steps == fresh.spec.max_episode_steps
    cartpole = OmegaConf.create({"id": "CartPole-v1", "n_envs": 16, "vectorization": "auto"})
    make.probe_spaces(cartpole, 0)
    (probe_copy,) = make._SPARE.values()
    closed = []
    monkeypatch.setattr(probe_copy, "close", lambda: closed.append(True))
    batched = make.env_from_config(cartpole, 0)
    assert type(batched).__name__ == "GraphCartPole" and closed == [True] and not make._SPARE
    make.probe_spaces(env, 8)  # envs with other values (here: rendered, as play makes them) close it too
    (probe_copy,) = make._SPARE.values()
    monkeypatch.setattr(probe_copy, "close", lambda: closed.append("render"))
    make.env_from_config(env, 8, render_mode="rgb_array", n_envs=1).close()
    assert closed == [True, "render"] and not make._SPARE
