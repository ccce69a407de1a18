"""Hindsight Experience Replay: goals relabelled by each strategy on episodes written out by hand, the relabelled
rewards against the Fetch env's own compute_reward, finished-episode bookkeeping with interleaved envs and a full
ring, RL Zoo's HER rows translated, and bad input refused in one line."""
import os
import sys

import numpy as np
import pytest
from forked_cli import run_cli

from rlexp.buffers import HerReplayBuffer
from rlexp.errors import UserError
from rlexp.presets.zoo import find_row, translate

# flattened observations: [achieved (1), desired (1), observation (1)]
ACHIEVED, DESIRED = slice(0, 1), slice(1, 2)


def matches(achieved, desired, info):
    """0 where the goal is reached (equal), -1 elsewhere (Fetch's sparse reward, threshold 0)."""
    return -(np.abs(achieved - desired)[..., 0] > 0).astype(np.float32)


def episode(buffer, achieved_after, desired=100.0, env_count=1, env=0, observation=0.0):
    """Store one episode of env `env` (of `env_count` stored together; the others' rows are filler that never
    ends) whose step t reaches achieved_after[t]; the stored reward is -1 throughout."""
    before = [0.0, *achieved_after[:-1]]
    for t, (a0, a1) in enumerate(zip(before, achieved_after)):
        obs = np.full((env_count, 3), -7.0, np.float32)
        next_obs = obs.copy()
        obs[env], next_obs[env] = [a0, desired, observation], [a1, desired, observation]
        dones = np.zeros(env_count, bool)
        dones[env] = t == len(achieved_after) - 1
        buffer.add(obs, np.zeros((env_count, 1), np.float32), -np.ones(env_count, np.float32), next_obs,
                   np.zeros(env_count, np.float32), dones)


def her(strategy, n_sampled_goal=4, max_size=5000, batch_size=10):
    buffer = HerReplayBuffer(max_size, 1, batch_size, n_sampled_goal=n_sampled_goal, goal_selection_strategy=strategy)
    buffer.use_goals(ACHIEVED, DESIRED, matches)
    buffer.rng = np.random.default_rng(0)
    return buffer


def test_final_strategy_relabels_with_the_episodes_last_achieved_goal():
    buffer = her("final", n_sampled_goal=1, batch_size=400)  # half of each batch relabelled
    episode(buffer, [1.0, 2.0, 3.0])
    batch = buffer.sample()
    relabelled, real = slice(0, 200), slice(200, 400)
    np.testing.assert_array_equal(batch["obs"][relabelled, 1], 3.0)  # the goal reached after the last step
    np.testing.assert_array_equal(batch["next_obs"][relabelled, 1], 3.0)
    reached = batch["next_obs"][relabelled, 0] == 3.0  # only the last transition reaches it: reward 0
    np.testing.assert_array_equal(batch["rewards"][relabelled], np.where(reached, 0.0, -1.0))
    assert reached.any() and not reached.all()
    np.testing.assert_array_equal(batch["obs"][real, 1], 100.0)  # real transitions keep goal and reward
    np.testing.assert_array_equal(batch["rewards"][real], -1.0)


def test_future_goals_come_from_this_step_on_and_episode_goals_from_any_step():
    for strategy, allowed in (("future", lambda t: {t + 1.0, t + 2.0, t + 3.0, t + 4.0} & {1.0, 2.0, 3.0, 4.0}),
                              ("episode", lambda t: {1.0, 2.0, 3.0, 4.0})):
        buffer = her(strategy, n_sampled_goal=4, batch_size=2000)
        episode(buffer, [1.0, 2.0, 3.0, 4.0])
        batch = buffer.sample()
        rows = slice(0, 1600)  # 4 / 5 of the batch
        step = (batch["next_obs"][rows, 0] - 1).astype(int)  # the transition's step in its episode
        goals = batch["obs"][rows, 1]
        for t in range(4):
            seen = set(goals[step == t].tolist())
            assert seen == set(allowed(t)), (strategy, t, seen)
        np.testing.assert_array_equal(batch["rewards"][rows], np.where(goals == step + 1, 0.0, -1.0))


def test_only_finished_episodes_are_drawn_with_envs_interleaved():
    buffer = her("future", batch_size=200)
    episode(buffer, [1.0, 2.0], env_count=2, env=1)  # env 1 finishes, env 0's filler never does
    batch = buffer.sample()
    np.testing.assert_array_equal(np.sort(np.unique(batch["next_obs"][:, 0])), [1.0, 2.0])
    relabelled = batch["obs"][:160, 1]
    step = batch["next_obs"][:160, 0] - 1
    assert set(relabelled[step == 0].tolist()) == {1.0, 2.0} and set(relabelled[step == 1].tolist()) == {2.0}


def test_an_episode_the_ring_overwrites_in_part_is_not_drawn():
    buffer = her("future", max_size=5, batch_size=5)
    episode(buffer, [1.0, 2.0, 3.0], observation=1.0)  # slots 0-2
    episode(buffer, [4.0, 5.0, 6.0], observation=2.0)  # slots 3, 4, then 0: the first episode is cut
    batch = buffer.sample(40)
    np.testing.assert_array_equal(np.unique(batch["obs"][:, 2]), [2.0])
    assert set(batch["obs"][:, 1].tolist()) == {4.0, 5.0, 6.0, 100.0}
    state = buffer.state_dict()
    again = her("future", max_size=5, batch_size=5)
    again.load_state_dict(state)
    np.testing.assert_array_equal(np.unique(again.sample(40)["obs"][:, 2]), [2.0])
    unfinished = her("future")
    unfinished.add(np.zeros((1, 3)), np.zeros((1, 1)), np.zeros(1), np.zeros((1, 3)), np.zeros(1), np.zeros(1, bool))
    with pytest.raises(UserError, match="no finished episode"):
        unfinished.sample()


def test_relabelled_rewards_are_fetchs_compute_reward():
    from rlexp.agents.goals import goal_columns, reward_function
    from rlexp.envs.make import make_envs
    from rlexp.envs.spaces import observation_parts

    envs = make_envs("FetchReach-v4", n_envs=1, seed=0)
    columns = goal_columns(observation_parts(envs.structured_observation_space))
    buffer = HerReplayBuffer(1000, 1, 256, n_sampled_goal=4)
    buffer.use_goals(columns["achieved_goal"], columns["desired_goal"], reward_function(envs))
    buffer.rng = np.random.default_rng(1)
    obs, _ = envs.reset(seed=0)
    for _ in range(100):  # two 50-step episodes
        actions = envs.action_space.sample()
        next_obs, rewards, terminated, truncated, _ = envs.step(actions)
        buffer.add(obs, actions, rewards, next_obs, terminated, terminated | truncated)
        obs = next_obs
    batch = buffer.sample()
    achieved, desired = batch["next_obs"][:, columns["achieved_goal"]], batch["obs"][:, columns["desired_goal"]]
    distance = np.linalg.norm(achieved - desired, axis=-1)  # Fetch's sparse reward: -1 beyond 5 cm
    np.testing.assert_array_equal(batch["rewards"], -(distance > 0.05).astype(np.float32))
    assert (batch["rewards"][:204] == 0).any()  # relabelled goals are reached, as real ones rarely are
    envs.close()


def test_her_rows_translate():
    t = translate(find_row("tqc", "FetchReach-v4", atari=False))
    assert t["buffer"] == {"max_size": 1_000_000, "initial_size": 1000, "batch_size": 256,
                           "_target_": "rlexp.buffers.HerReplayBuffer", "n_sampled_goal": 4,
                           "goal_selection_strategy": "future"}
    a = t["agent"]
    assert (a["n_critics"], a["gamma"], a["lr"], a["normalize_obs"], a["normalize_reward"]) == (1, 0.95, 1e-3, True, True)
    assert t["model"]["encoders"] == {"vector": []}  # MultiInputPolicy: the goals and observation concatenated
    s = translate(find_row("sac", "FetchReach-v4", atari=False))
    assert s["buffer"]["_target_"] == "rlexp.buffers.HerReplayBuffer" and s["run"]["max_steps"] == 20_000


def test_her_row_options_refused(tmp_path):
    path = tmp_path / "sac.yml"
    path.write_text("FetchReach-v1:\n  policy: MultiInputPolicy\n  replay_buffer_class: HerReplayBuffer\n"
                    "  replay_buffer_kwargs: \"dict(goal_selection_strategy='random', copy_info_dict=True)\"\n")
    with pytest.raises(UserError, match="copy_info_dict = True.*goal_selection_strategy = random"):
        translate(find_row("sac", "FetchReach-v4", atari=False, path=path))


def test_fetch_without_gymnasium_robotics_says_what_to_install(monkeypatch):
    from rlexp.envs.make import register_package_ids

    monkeypatch.setitem(sys.modules, "gymnasium_robotics", None)
    monkeypatch.delitem(sys.modules, "rlexp.envs.robotics", raising=False)
    with pytest.raises(UserError, match=r"env.id=FetchReach-v4 is gymnasium_robotics's: pip install "
                                        r"'rlexp\[robotics\]'"):
        register_package_ids("FetchReach-v4")


def test_her_bad_input_is_one_line_on_the_command_line(tmp_path):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    fetch = ["env=generic", "env.id=FetchReach-v4"]
    for args, says in ((["agent=sac", *fetch, "buffer=sac"], "env.id=FetchReach-v4 is goal-conditioned"),
                       (["agent=ppo", *fetch, "buffer=her"], "buffer=her relabels replayed goals: it is for "
                                                             "off-policy agents"),
                       (["agent=sac", "env=pendulum", "buffer=her"], "buffer=her relabels goals, but "
                                                                     "env.id=Pendulum-v1 has no achieved_goal"),
                       (["agent=tqc", *fetch, "buffer=her", "buffer.goal_selection_strategy=random"],
                        "buffer.goal_selection_strategy='random'")):
        result = run_cli(args, tmp_path, env, 300)
        assert result.returncode != 0 and len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert says in result.stderr, result.stderr
    assert not (tmp_path / "outputs").exists()


def test_dqn_trains_with_her_on_a_discrete_goal_env():
    """Any off-policy agent: DQN on bit flipping (tests/space_envs.py), its batches holding relabelled successes."""
    import space_envs  # noqa: F401  (registers BitFlip-v0)

    from rlexp.agents import DQN
    from rlexp.envs.make import make_envs

    agent = DQN(make_envs("BitFlip-v0", n_envs=2, seed=0, vectorization="sync"), model="mlp", seed=0,
                buffer=HerReplayBuffer(5000, 100, 64, n_sampled_goal=4), epsilon_decay_steps=500, train_freq=2)
    agent.fit(1000, progress="none", verbose=0)
    assert agent.steps == 1000
    batch = agent.buffer.sample()
    relabelled, real = batch["rewards"][:51], batch["rewards"][51:]
    assert (relabelled == 0).mean() > (real == 0).mean()
