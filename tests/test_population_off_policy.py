"""Off-policy populations (DQN, DDPG, TD3, SAC, and TQC and QR-DQN on their bases): each member's own replay, warm-up, exploration and targets."""
import numpy as np
import pytest
import tensorflow as tf

from rlexp.agents.base.members import MemberGenerators
from rlexp.agents.base.population import population_members
from rlexp.agents.ddpg import DDPG
from rlexp.agents.dqfd import DQfD
from rlexp.agents.dqn import DQN
from rlexp.agents.naf import NAF
from rlexp.agents.off_policy import soft_update
from rlexp.agents.qrdqn import QRDQN
from rlexp.agents.sac import SAC
from rlexp.agents.td3 import TD3
from rlexp.agents.tqc import TQC
from rlexp.buffers import GraphReplayBuffer, PrioritizedReplayBuffer, ReplayBuffer
from rlexp.buffers.members import MemberGraphReplayBuffer, MemberReplayBuffers
from rlexp.envs import make_envs, make_member_envs
from rlexp.errors import UserError

STEPS = 600  # 200 random warm-up steps per member, then updates
ARGS = {TD3: dict(), SAC: dict(), DDPG: dict(noise_type="ornstein_uhlenbeck", step_noise_coef=0.5),
        DQN: dict(epsilon_decay_steps=400, target_sync_steps=100, train_freq=2),
        TQC: dict(n_quantiles=5, top_quantiles_to_drop_per_net=1),
        QRDQN: dict(n_quantiles=7, epsilon_decay_steps=400, target_sync_steps=100, train_freq=2)}
ENVS = {TD3: "Pendulum-v1", SAC: "Pendulum-v1", DDPG: "MountainCarContinuous-v0", DQN: "CartPole-v1",
        TQC: "Pendulum-v1", QRDQN: "CartPole-v1"}


def buffer():
    return ReplayBuffer(2000, 200, 32)


def population(cls, seeds, steps=STEPS, fit=True, **kwargs):
    """A population of `cls` on its env (2 envs a member, episodes cut at 50 steps), fitted for `steps`."""
    envs = make_member_envs(ENVS[cls], 2, seeds, vectorization="sync", max_episode_steps=50)
    agent = cls(envs, model="mlp", buffer=buffer(), seeds=seeds, quiet=True, **ARGS[cls] | kwargs)
    if fit:
        agent.fit_population(steps, verbose=0)
    return agent


def weights(agent, i):
    return {name: [w[i] for w in model.get_weights()] for name, model in agent.models().items()}


def replay(agent, i):
    return agent.buffer.member_state_dict(i)


def same(a, b) -> bool:
    """Whether two dicts of arrays (or of lists of arrays) hold the same values, bit for bit."""
    def equal(x, y):
        return np.array_equal(x, y) if not isinstance(x, list) else all(map(np.array_equal, x, y))
    return a.keys() == b.keys() and all(equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("cls", [TD3, SAC, DDPG, DQN, TQC, QRDQN])
def test_an_off_policy_member_is_unchanged_bit_for_bit_when_another_members_seed_changes(cls):
    """Graph envs and replay (TD3, SAC on Pendulum), NumPy envs and replay (DDPG with Ornstein-Uhlenbeck noise
    restarting at episode ends, DQN): member 1's other seed changes its warm-up, exploration, replay and updates."""
    first, second = population(cls, [0, 1, 2]), population(cls, [0, 7, 2])
    assert first.steps == STEPS
    for i in (0, 2):
        assert same(weights(first, i), weights(second, i))
        assert same(replay(first, i), replay(second, i))
    assert not same(weights(first, 1), weights(second, 1))
    assert not np.array_equal(replay(first, 1)["data/obs"], replay(second, 1)["data/obs"])


@pytest.mark.parametrize("cls", [TD3, DQN, TQC, QRDQN])
def test_each_off_policy_member_trains_as_its_single_run_to_float_rounding(cls):
    """The same warm-up actions and replay draws; updates agree to rounding (rlexp.models.stacked)."""
    seeds = [3, 5]
    start, together = population(cls, seeds, fit=False), population(cls, seeds)
    for i, seed in enumerate(seeds):
        single = cls(make_envs(ENVS[cls], 2, seed, vectorization="sync", max_episode_steps=50), model="mlp",
                     buffer=buffer(), seed=seed, quiet=True, **ARGS[cls])
        single.fit(STEPS)
        assert single.steps == together.member_records()[i].steps == STEPS
        assert single.episodes == together.member_records()[i].episodes
        mine, initial = weights(together, i), weights(start, i)
        for name, model in single.models().items():
            for a, b in zip(model.get_weights(), mine[name]):
                np.testing.assert_allclose(a, b, rtol=0, atol=2e-5)
        assert max(np.abs(a - b).max() for a, b in zip(mine[list(mine)[0]], initial[list(mine)[0]])) > 1e-3
        warm_up = single.buffer.state_dict()["data/actions"][:200]
        assert np.array_equal(warm_up, replay(together, i)["data/actions"][:200])


def test_member_replay_samples_each_members_batches_with_its_own_generator_update_by_update():
    """A sample for 2 updates of batch 3 from 2 members: [member 0's first batch, member 1's first batch, member 0's
    second, member 1's second], each as a single run's buffer with the member's generator draws it."""
    rows = [np.arange(10, dtype=np.float32)[:, None] + 100 * m for m in range(2)]

    def fill(target, obs_rows, envs=2):
        for t in range(5):
            obs = obs_rows[envs * t:envs * (t + 1)]
            target.add(obs, np.zeros((envs, 1), np.float32), np.zeros(envs, np.float32), obs, np.zeros(envs, bool))

    members = MemberReplayBuffers(ReplayBuffer(20, 1, 3), [np.random.default_rng(s) for s in (4, 9)])
    fill(members, np.concatenate([np.concatenate([r[2 * t:2 * t + 2] for r in rows]) for t in range(5)]), envs=4)
    got = members.sample(2)["obs"][:, 0]
    singles = []
    for m, seed in enumerate((4, 9)):
        single = ReplayBuffer(20, 1, 3)
        single.rng = np.random.default_rng(seed)
        fill(single, rows[m])
        singles.append(single.sample(2)["obs"][:, 0])
    assert np.array_equal(got, np.concatenate([singles[0][:3], singles[1][:3], singles[0][3:], singles[1][3:]]))
    assert set(got[:3]) <= set(range(10)) and set(got[3:6]) <= set(range(100, 110))

    graph = MemberGraphReplayBuffer(members)  # the same transitions, in TF variables, drawn in a graph
    drawn = graph.graph_sample(6, MemberGenerators([4, 9]))[0].numpy()[:, 0]
    expected = []
    for m, seed in enumerate((4, 9)):
        single = GraphReplayBuffer(20, 1, 3)
        fill(single, rows[m])
        expected.append(single.graph_sample(6, tf.random.Generator.from_seed(seed))[0].numpy()[:, 0])
    assert np.array_equal(drawn, np.concatenate([expected[0][:3], expected[1][:3], expected[0][3:], expected[1][3:]]))


def test_a_stopped_off_policy_member_keeps_its_weights_and_targets_and_does_not_change_the_others():
    going, stopped = population(TD3, [0, 1], fit=False), population(TD3, [0, 1], fit=False)
    before = weights(stopped, 1)
    stopped.members.active.assign([1.0, 0.0])
    going.fit_population(STEPS, verbose=0)
    stopped.fit_population(STEPS, verbose=0)
    assert same(weights(stopped, 1), before)  # the actor, critics and their targets
    assert same(weights(stopped, 0), weights(going, 0))
    assert not same(weights(going, 1), before)


def test_target_updates_move_each_member_at_its_own_rate_and_leave_a_stopped_member():
    agent = population(TD3, [0, 1, 2], fit=False)
    agent.members.active.assign([1.0, 1.0, 0.0])
    target, source = tf.Variable(tf.zeros([3, 2])), tf.Variable(tf.ones([3, 2]))
    agent.update_targets([target], [source], [0.5, 0.25, 0.5])
    assert np.array_equal(target.numpy(), [[0.5, 0.5], [0.25, 0.25], [0.0, 0.0]])
    agent.copy_targets([target], [source])
    assert np.array_equal(target.numpy(), [[1.0, 1.0], [1.0, 1.0], [0.0, 0.0]])


def test_off_policy_members_with_one_seed_and_their_own_values_step_as_populations_of_one_with_them():
    values = dict(lr=[1e-3, 3e-4], gamma=[0.99, 0.9], tau=[0.005, 0.05], step_noise_coef=[0.1, 0.3],
                  policy_noise_coef=[0.2, 0.05])
    both = population(TD3, [0, 0], member_values=values)
    for i in (0, 1):
        own = {key: listed[i] for key, listed in values.items()}
        alone = population(TD3, [0], **own)
        for name, model in alone.models().items():
            for a, b in zip(model.get_weights(), weights(both, i)[name]):
                np.testing.assert_allclose(a[0], b, rtol=0, atol=1e-6)
    assert not same(weights(both, 0), weights(both, 1))


def test_an_off_policy_population_resumes_every_member_and_a_member_loads_as_a_single_run(tmp_path):
    """Each member's checkpoint holds its replay, generators and exploration noise in the single-run format."""
    seeds = [0, 1]
    dirs = [tmp_path / f"seed_{s}" for s in seeds]
    first = population(DDPG, seeds, fit=False)
    first.fit_population(STEPS, run_dirs=dirs, verbose=0)
    again = population(DDPG, seeds, fit=False)
    again.resume_population([d / "checkpoints" / "last.ckpt" for d in dirs])
    assert again.steps == STEPS
    for i in (0, 1):
        assert same(weights(again, i), weights(first, i))
        assert same(replay(again, i), replay(first, i))
        assert np.array_equal(again.ou_noise.numpy()[2 * i:2 * i + 2], first.ou_noise.numpy()[2 * i:2 * i + 2])
        single = DDPG(make_envs(ENVS[DDPG], 2, seeds[i], vectorization="sync", max_episode_steps=50), model="mlp",
                      buffer=buffer(), seed=seeds[i], quiet=True, **ARGS[DDPG])
        single.load(dirs[i] / "checkpoints" / "last.ckpt")
        assert single.steps == single.buffer.size == STEPS  # 2 envs: a transition per member step
        assert same(single.buffer.state_dict(), replay(first, i))
        assert np.array_equal(single.ou_noise.numpy(), first.ou_noise.numpy()[2 * i:2 * i + 2])
    summaries = again.fit_population(2 * STEPS, run_dirs=dirs, verbose=0)
    assert [s["steps"] for s in summaries] == [2 * STEPS] * 2


@pytest.mark.parametrize("cls, args, message", [
    (NAF, {}, r"^run.seeds: NAF does not train as a population yet; populations train PPO, A2C, VPG, TRPO, DQN, QR-DQN, DDPG"),
    (DQN, dict(buffer=PrioritizedReplayBuffer(1000, 100, 32)),
     r"^run.seeds: a population's members replay from uniform buffers, not PrioritizedReplayBuffer"),
])
def test_what_an_off_policy_population_does_not_support_is_refused_in_one_line(cls, args, message):
    envs = make_member_envs("Pendulum-v1" if cls is NAF else "CartPole-v1", 1, [0, 1], vectorization="sync")
    with pytest.raises(UserError, match=message):
        cls(envs, **{"buffer": buffer()} | args, seeds=[0, 1], quiet=True)
    with pytest.raises(UserError, match=r"^run.seeds: DQfD does not train as a population yet"):
        population_members(DQfD, envs, 0, [0, 1], {})


def test_soft_updates_take_each_members_single_run_rates_bit_for_bit_and_skip_a_stopped_one():
    """tau = 0.9 and 0.0203: a single run's (1 - tau) is taken in float64 and rounded once, which float32
    arithmetic on a rounded tau does not give for these; a stopped member's targets stay, even beside NaN weights."""
    taus = [0.9, 0.0203, 0.5]
    agent = population(TD3, [0, 1, 2], fit=False, member_values=dict(tau=taus))
    rng = np.random.default_rng(0)
    targets, sources = rng.standard_normal((3, 5, 4)).astype(np.float32), rng.standard_normal((3, 5, 4)).astype(np.float32)
    sources[2] = np.nan
    agent.members.active.assign([1.0, 1.0, 0.0])
    target = tf.Variable(targets)
    agent.update_targets([target], [tf.Variable(sources)], agent.tau)
    for i in (0, 1):
        alone = tf.Variable(targets[i])
        soft_update([alone], [tf.Variable(sources[i])], taus[i])  # a single run's update
        assert np.array_equal(target.numpy()[i], alone.numpy())
    assert np.array_equal(target.numpy()[2], targets[2])


def test_a_resumed_dqn_population_keeps_each_members_target_sync_step(tmp_path):
    seeds = [0, 1]
    dirs = [tmp_path / f"seed_{s}" for s in seeds]
    first = population(DQN, seeds, fit=False)
    first.fit_population(STEPS, run_dirs=dirs, verbose=0)
    assert first.last_sync > 0
    again = population(DQN, seeds, fit=False)
    again.resume_population([d / "checkpoints" / "last.ckpt" for d in dirs])
    assert again.last_sync == first.last_sync


def test_the_numpy_mirror_of_stacked_models_computes_each_members_own_network():
    """DQN's population acts with the NumPy mirror of its stacked Q-networks: member n's rows through member n's
    network, as each network's own mirror and the stacked Keras model compute them."""
    from rlexp.agents.base.agent import load_model_preset
    from rlexp.models.networks import build_model
    from rlexp.models.numpy_mirror import NumpyModel
    from rlexp.models.stacked import stack_models

    models = [build_model(load_model_preset("mlp"), (4,), {"q": 2}, name=f"q{i}") for i in range(3)]
    stacked = stack_models(models, "q")
    x = np.random.default_rng(0).standard_normal((15, 4)).astype(np.float32)
    got = NumpyModel.mirror(stacked)([w.numpy() for w in stacked.weights], x)[0]
    assert got.shape == (15, 2)
    for i, model in enumerate(models):
        own = NumpyModel.mirror(model)([w.numpy() for w in model.weights], x[5 * i:5 * i + 5])[0]
        np.testing.assert_allclose(got[5 * i:5 * i + 5], own, rtol=0, atol=1e-6)
    np.testing.assert_allclose(got, stacked(x).numpy(), rtol=0, atol=1e-6)


def test_member_buffers_round_trip_every_members_replay_and_the_graph_buffer_stores_as_the_numpy_one():
    rng = np.random.default_rng(1)
    numpy_buffers = MemberReplayBuffers(ReplayBuffer(8, 1, 2), [np.random.default_rng(s) for s in (0, 1)])
    graph = MemberGraphReplayBuffer(MemberReplayBuffers(ReplayBuffer(8, 1, 2), [np.random.default_rng(s) for s in (0, 1)]))
    for _ in range(5):  # 2 members x 2 envs a step: the ring wraps after 4 steps
        obs = rng.standard_normal((4, 3)).astype(np.float32)
        for target in (numpy_buffers, graph):
            target.add(obs, rng.standard_normal((4, 1)).astype(np.float32) * 0, np.ones(4, np.float32), obs,
                       np.zeros(4, bool))
    for member in (0, 1):
        assert same(numpy_buffers.member_state_dict(member), graph.member_state_dict(member))
    state = numpy_buffers.state_dict()
    assert sorted({k.split("/")[0] for k in state}) == ["member_0", "member_1"]
    again = MemberReplayBuffers(ReplayBuffer(8, 1, 2), [np.random.default_rng(s) for s in (0, 1)])
    again.load_state_dict(state)
    assert same(again.state_dict(), state) and again.size == 8


def test_member_graph_replay_samples_only_the_drawn_rows_never_a_whole_buffer():
    # scatter updates put a variable in copy-on-read mode: reading a whole member buffer in each sample copied
    # N x max_size rows per column and update (the population's per-step cost grew with the buffer's size)
    graph = MemberGraphReplayBuffer(MemberReplayBuffers(ReplayBuffer(64, 1, 4), [np.random.default_rng(s) for s in (0, 1)]))
    obs = np.ones((2, 3), np.float32)
    graph.add(obs, np.zeros((2, 1), np.float32), np.ones(2, np.float32), obs, np.zeros(2, bool))
    rng = MemberGenerators([0, 1])
    sample = tf.function(lambda: graph.graph_sample(8, rng))
    traced = sample.get_concrete_function().graph
    ops = traced.get_operations()
    handles = [v.handle for v in graph.data.values()]
    replay = {inside.name for outside, inside in traced.captures if any(outside is h for h in handles)}
    assert len(replay) == 5
    whole_reads = [op.name for op in ops if op.type == "ReadVariableOp" and op.inputs[0].name in replay]
    gathers = [op for op in ops if op.type == "ResourceGatherNd"]
    assert whole_reads == [] and len(gathers) == 5
