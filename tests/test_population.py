"""Populations (`run.seeds`, `Agent(seeds=...)`): members are independent runs trained in one graph."""
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import tensorflow as tf

from rlexp.agents.a2c import A2C
from rlexp.agents.base.members import Members
from rlexp.agents.ppo import PPO
from rlexp.agents.trpo import TRPO
from rlexp.envs import make_envs, make_member_envs
from rlexp.errors import UserError
from crashes import Killed, crash_in_the_third_iteration
from test_cli import rlexp

PPO_ARGS = dict(n_steps=16, mini_batches=4, ppo_epochs=2, lr=1e-3, grad_norm=0.5, quiet=True)
STEPS = 3 * 16 * 4  # three rollouts of 4 envs


def population(seeds, cls=PPO, env_id="CartPole-v1", limit=None, broken=None, **kwargs):
    """A population trained for STEPS; `limit`: episodes truncated after that many steps; `broken`: that member's
    weights made NaN first."""
    envs = make_member_envs(env_id, 4, seeds, vectorization="sync", max_episode_steps=limit)
    agent = cls(envs, seeds=seeds, **(kwargs or PPO_ARGS))
    if broken is not None:
        for variable in agent.model.weights:
            values = variable.numpy()
            values[broken] = np.nan
            variable.assign(values)
    agent.summaries = agent.fit_population(STEPS, verbose=0)
    return agent


def member(agent, i):
    return [w[i] for w in agent.model.get_weights()]


@pytest.mark.parametrize("cls, env_id, normalize", [
    (PPO, "CartPole-v1", False), (PPO, "Pendulum-v1", False), (A2C, "CartPole-v1", False), (TRPO, "CartPole-v1", False),
    (TRPO, "Pendulum-v1", False), (PPO, "Pendulum-v1", True), (TRPO, "Pendulum-v1", True)])
def test_a_member_is_unchanged_bit_for_bit_when_another_members_seed_and_data_change(cls, env_id, normalize):
    """TRPO: each member's conjugate gradient, step size and line search its own. `normalize`: each member's own
    observation statistics and reward scaling (RL Zoo's MuJoCo rows normalise)."""
    args = {PPO: {}, A2C: dict(n_steps=5, mini_batches=None, ppo_epochs=None),
            TRPO: dict(n_steps=16, ppo_epochs=None, grad_norm=None, lr=None)}[cls]
    args = {k: v for k, v in (PPO_ARGS | args).items() if v is not None}
    args |= dict(normalize_obs=True, normalize_reward=True) if normalize else {}
    first, second = population([0, 1, 2], cls, env_id, **args), population([0, 7, 2], cls, env_id, **args)
    models = ("actor", "critic") if cls is TRPO else ("model",)
    for name in models:
        weights = getattr(first, name).get_weights(), getattr(second, name).get_weights()
        for i in (0, 2):
            assert all(np.array_equal(a[i], b[i]) for a, b in zip(*weights))
        assert not all(np.array_equal(a[1], b[1]) for a, b in zip(*weights))


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_members_stay_independent_through_truncated_episodes_and_a_diverged_member(env_id):
    """Episodes cut every 10 steps: truncations are bootstrapped with the critic's values of their final
    observations, all steps in one pass (each member's by its own critic). A member whose weights are NaN diverges
    and stops alone; the others train as they do beside a healthy member, bit for bit."""
    first, second = population([0, 1, 2], env_id=env_id, limit=10), population([0, 7, 2], env_id=env_id, limit=10)
    broken = population([0, 1, 2], env_id=env_id, limit=10, broken=1)
    for i in (0, 2):
        assert all(np.array_equal(a, b) for a, b in zip(member(first, i), member(second, i)))
        assert all(np.array_equal(a, b) for a, b in zip(member(first, i), member(broken, i)))
    assert broken.summaries[1]["reason"].startswith("diverged") and broken.summaries[0]["reason"] == "max_steps"


def test_a_member_trains_as_in_a_population_of_another_size_to_float_rounding():
    """Bit for bit within one population size (above); across sizes the batched matmuls may block differently."""
    trio, alone = population([3, 4, 5]), population([4])
    for a, b in zip(member(trio, 1), member(alone, 0)):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
    assert np.array_equal(trio.log_std.numpy()[1], alone.log_std.numpy()[0]) if hasattr(trio, "log_std") else True


def test_a_trpo_member_takes_its_single_runs_first_step_to_float_rounding():
    """TRPO's first natural-gradient step, population of one against the single run of its seed; later steps drift
    further apart than PPO's: float32 conjugate gradient amplifies rounding (a dot product summed in another order
    alone moved a single run's third direction by 0.3%)."""
    single = TRPO(make_envs("CartPole-v1", 4, 2, vectorization="sync"), seed=2, n_steps=64, quiet=True)
    single.numpy_acting = False
    alone = TRPO(make_member_envs("CartPole-v1", 4, [2], vectorization="sync"), seeds=[2], n_steps=64, quiet=True)
    single.train_iteration()
    metrics = alone.train_iteration()
    assert metrics["step_accepted"].tolist() == [1.0]
    for a, b in zip(single.actor.get_weights(), alone.actor.get_weights()):
        np.testing.assert_allclose(a, b[0], rtol=0, atol=2e-5)
    for a, b in zip(single.critic.get_weights(), alone.critic.get_weights()):
        np.testing.assert_allclose(a, b[0], rtol=0, atol=1e-6)


def test_a_population_of_one_starts_as_the_single_run_and_trains_as_it_does_to_float_rounding():
    """The same initial weights, envs and random streams; the first rollout's actions are the same. Updates agree to
    rounding only: the stacked layers sum a value head's one column and a bias's gradient in another order than Keras'
    matrix-vector product and BiasAddGrad (rlexp.models.stacked)."""
    single = PPO(make_envs("CartPole-v1", 4, 4, vectorization="sync"), seed=4, **PPO_ARGS)
    single.numpy_acting = False  # a population acts in TensorFlow, as single runs do with a graph env
    alone = PPO(make_member_envs("CartPole-v1", 4, [4], vectorization="sync"), seeds=[4], **PPO_ARGS)
    assert all(np.array_equal(a, b[0]) for a, b in zip(single.model.get_weights(), alone.model.get_weights()))
    first, other = single.collect(), alone.collect()
    assert np.array_equal(first["actions"].numpy(), other["actions"].numpy())
    assert np.array_equal(first["obs"].numpy(), other["obs"].numpy())
    single.fit(STEPS, verbose=0)
    alone.fit_population(STEPS, verbose=0)
    for a, b in zip(single.model.get_weights(), alone.model.get_weights()):
        np.testing.assert_allclose(a, b[0], rtol=0, atol=1e-5)


def test_each_member_is_clipped_to_its_own_norm_as_tf_clip_by_global_norm_clips_a_single_run():
    members = Members([0, 1, 2], 1)
    rng = np.random.default_rng(0)
    grads = [rng.standard_normal((3, 4, 5)).astype(np.float32), rng.standard_normal((3, 5)).astype(np.float32)]
    grads[0][1] *= 1e-3  # member 1 is under the norm: left as it is
    clipped = members.clip_gradients([tf.constant(g) for g in grads], 0.5)
    for i in range(3):
        expected, _ = tf.clip_by_global_norm([tf.constant(g[i]) for g in grads], 0.5)
        for got, want in zip(clipped, expected):
            np.testing.assert_allclose(got.numpy()[i], want.numpy(), rtol=1e-6)
    norm_1 = np.sqrt(sum(np.sum(g[1] ** 2) for g in grads))
    if norm_1 < 0.5:
        assert np.array_equal(clipped[0].numpy()[1], grads[0][1])


def test_a_stopped_member_keeps_its_weights_and_does_not_change_the_others_updates():
    seeds = [0, 1]
    going = PPO(make_member_envs("CartPole-v1", 4, seeds, vectorization="sync"), seeds=seeds, **PPO_ARGS)
    stopped = PPO(make_member_envs("CartPole-v1", 4, seeds, vectorization="sync"), seeds=seeds, **PPO_ARGS)
    before = member(stopped, 1)
    slots = [v.numpy()[1] for v in stopped.optimizer.variables if len(v.shape)]
    stopped.members.active.assign([1.0, 0.0])
    going.fit_population(STEPS, verbose=0)
    stopped.fit_population(STEPS, verbose=0)
    assert all(np.array_equal(a, b) for a, b in zip(member(stopped, 1), before))
    assert all(np.array_equal(a, v.numpy()[1]) for a, v in
               zip(slots, [v for v in stopped.optimizer.variables if len(v.shape)]))
    assert all(np.array_equal(a, b) for a, b in zip(member(stopped, 0), member(going, 0)))
    assert not all(np.array_equal(a, b) for a, b in zip(member(going, 1), before))


def test_members_with_one_seed_and_their_own_rates_step_as_single_members_with_those_rates():
    """run.members: the same seed, two learning rates, discounts and clip ranges; each member takes the steps of a
    population of one with its values (to rounding: a member's step is scaled to its rate after the optimizer's)."""
    values = dict(lr=[1e-3, 3e-3], gamma=[0.99, 0.9], clip_norm=[0.1, 0.3], entropy_coef=[0.0, 0.01])
    both = PPO(make_member_envs("CartPole-v1", 4, [0, 0], vectorization="sync"), seeds=[0, 0], member_values=values,
               **PPO_ARGS | dict(lr=5e-4))
    both.fit_population(STEPS, verbose=0)
    start = PPO(make_member_envs("CartPole-v1", 4, [0], vectorization="sync"), seeds=[0], **PPO_ARGS)
    for i in (0, 1):
        own = {key: listed[i] for key, listed in values.items()}
        alone = PPO(make_member_envs("CartPole-v1", 4, [0], vectorization="sync"), seeds=[0], **PPO_ARGS | own)
        alone.fit_population(STEPS, verbose=0)
        moved = max(np.abs(a[0] - b[0]).max() for a, b in zip(alone.model.get_weights(), start.model.get_weights()))
        assert moved > 1e-3
        for a, b in zip(member(both, i), member(alone, 0)):
            np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
    with pytest.raises(UserError, match=r"^run.members.lr=\[0.001\] must list one value per member \(2: one per"):
        PPO(make_member_envs("CartPole-v1", 4, [0, 1], vectorization="sync"), seeds=[0, 1],
            member_values=dict(lr=[1e-3]))
    with pytest.raises(UserError, match=r"^run.members.n_steps: members of PPO may differ only in lr, gamma"):
        PPO(make_member_envs("CartPole-v1", 4, [0, 1], vectorization="sync"), seeds=[0, 1],
            member_values=dict(n_steps=[8, 16]))


def test_a_population_resumes_every_member_from_its_own_checkpoint(tmp_path):
    seeds = [0, 1]
    dirs = [tmp_path / f"seed_{s}" for s in seeds]
    first = PPO(make_member_envs("CartPole-v1", 4, seeds, vectorization="sync"), seeds=seeds, **PPO_ARGS)
    first.fit_population(STEPS, run_dirs=dirs, verbose=0)
    episodes = [len(pd.read_parquet(d / "history.parquet")) for d in dirs]
    again = PPO(make_member_envs("CartPole-v1", 4, seeds, vectorization="sync"), seeds=seeds, **PPO_ARGS)
    again.resume_population([d / "checkpoints" / "last.ckpt" for d in dirs])
    assert again.steps == first.steps == STEPS
    for i in (0, 1):
        assert all(np.array_equal(a, b) for a, b in zip(member(again, i), member(first, i)))
    summaries = again.fit_population(2 * STEPS, run_dirs=dirs, verbose=0)
    for d, before, summary in zip(dirs, episodes, summaries):
        history = pd.read_parquet(d / "history.parquet")
        assert summary["steps"] == 2 * STEPS and len(history) == summary["episodes"] > before
        assert PPO.read_state(d / "checkpoints" / "last.ckpt")["steps"] == 2 * STEPS


def test_a_population_killed_in_its_third_iteration_resumes_every_member_from_the_first(tmp_path):
    seeds = [0, 1]
    dirs = [tmp_path / f"seed_{s}" for s in seeds]
    agent = PPO(make_member_envs("CartPole-v1", 4, seeds, vectorization="sync"), seeds=seeds, **PPO_ARGS)
    steps = crash_in_the_third_iteration(agent)
    with pytest.raises(Killed):
        agent.fit_population(10_000, run_dirs=dirs, checkpoint_interval=3600, verbose=0)
    again = PPO(make_member_envs("CartPole-v1", 4, seeds, vectorization="sync"), seeds=seeds, **PPO_ARGS)
    again.resume_population([d / "checkpoints" / "last.ckpt" for d in dirs])
    assert again.steps == steps[0] > 0
    summaries = again.fit_population(steps[0] + STEPS, run_dirs=dirs, verbose=0)
    assert [s["steps"] for s in summaries] == [steps[0] + STEPS] * 2


def test_members_saved_at_different_steps_resume_from_the_step_they_all_reached(tmp_path):
    """A kill between two members' saves: member 0's last.ckpt is one iteration ahead; its previous.ckpt holds the
    step the other member's last.ckpt has."""
    seeds = [0, 1]
    dirs = [tmp_path / f"seed_{s}" for s in seeds]
    agent = PPO(make_member_envs("CartPole-v1", 4, seeds, vectorization="sync"), seeds=seeds, **PPO_ARGS)
    agent.fit_population(STEPS, run_dirs=dirs, verbose=0)
    agent.max_steps = 2 * STEPS
    agent.train_iteration()
    agent.member_records()[0].steps = agent.steps
    agent.save_member(0, dirs[0] / "checkpoints" / "last.ckpt", keep_previous=True)
    assert PPO.read_state(dirs[0] / "checkpoints" / "last.ckpt")["steps"] > STEPS
    again = PPO(make_member_envs("CartPole-v1", 4, seeds, vectorization="sync"), seeds=seeds, **PPO_ARGS)
    again.resume_population([d / "checkpoints" / "last.ckpt" for d in dirs])
    assert again.steps == STEPS and [r.steps for r in again.member_records()] == [STEPS, STEPS]


def test_rows_are_member_major_and_minibatches_hold_each_members_own_rows():
    members = Members([0, 1], 2)
    x = tf.reshape(tf.range(3 * 4), [3, 4])  # [T=3, N*E=4]: value 4t + column
    rows = members.member_major(x).numpy()
    assert rows.tolist() == [0, 1, 4, 5, 8, 9, 2, 3, 6, 7, 10, 11]  # member 0: columns 0-1 time-major, then 1
    order = tf.constant([[5, 4, 3, 2, 1, 0], [0, 1, 2, 3, 4, 5]])
    batches = members.shuffle(tf.constant(rows), order, 2).numpy()
    assert batches.tolist() == [[9, 8, 5, 2, 3, 6], [4, 1, 0, 7, 10, 11]]


@pytest.mark.parametrize("seeds, message", [
    (0, "run.seeds=0 must be at least 1 (a count of members) or a list of seeds"),
    (-2, "run.seeds=-2 must be at least 1 (a count of members) or a list of seeds"),
    (1.5, "run.seeds=1.5 must be a count of members (e.g. 8) or a list of seeds (e.g. [0,3,7])"),
    ("x", "run.seeds='x' must be a count of members (e.g. 8) or a list of seeds (e.g. [0,3,7])"),
    ([], "run.seeds=[] names no member; give a count (e.g. 8) or at least one seed"),
    ([0, "a"], "run.seeds=[0, 'a']: 'a' is not an integer seed"),
])
def test_bad_seed_counts_and_lists_are_refused(seeds, message):
    from rlexp.agents.base.population import member_seeds

    with pytest.raises(UserError) as error:
        member_seeds(0, seeds)
    assert str(error.value) == message


def test_what_a_population_does_not_support_is_refused_in_one_line():
    envs = make_member_envs("CartPole-v1", 2, [0, 1], vectorization="sync")
    from rlexp.agents.td3 import TD3  # an off-policy population's replay samples are not normalised per member yet

    with pytest.raises(UserError, match=r"^run.seeds: agent.normalize_obs=True is not supported in a population yet"):
        TD3(make_member_envs("Pendulum-v1", 1, [0, 1], vectorization="sync"), seeds=[0, 1], normalize_obs=True)
    with pytest.raises(UserError, match=r"^run.seeds: agent.kl_threshold=0.02 is not supported in a population yet"):
        PPO(envs, seeds=[0, 1], kl_threshold=0.02)
    pendulum = make_member_envs("Pendulum-v1", 2, [0, 1], vectorization="sync")
    with pytest.raises(UserError, match=r"^run.seeds: agent.use_sde=True is not supported in a population yet"):
        PPO(pendulum, seeds=[0, 1], use_sde=True)
    with pytest.raises(UserError, match=r"^agent.mini_batches=4 must divide the rollout size n_steps\*n_envs=6"):
        PPO(envs, seeds=[0, 1], n_steps=3, mini_batches=4)  # each member's rollout: 3 x 2
    with pytest.raises(UserError, match="needs each member's envs"):
        PPO(make_envs("CartPole-v1", 2, 0), seeds=[0, 1])


@pytest.fixture(scope="module")
def trained_population(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("population")
    result = rlexp(cwd, "agent=ppo", "env=cartpole", "run.seeds=[3,5]", "run.max_steps=3000", "run.eval_episodes=2",
                   "run.progress=none")
    assert result.returncode == 0, result.stdout + result.stderr
    (run,) = Path(cwd).glob("outputs/*/*_ppo_cartpole")
    return cwd, run, result


def test_each_member_writes_an_ordinary_run_dir_with_its_own_seed(trained_population):
    cwd, run, result = trained_population
    assert sorted(p.name for p in run.glob("seed_*")) == ["seed_3", "seed_5"]
    for seed in (3, 5):
        member_dir = run / f"seed_{seed}"
        config = (member_dir / ".hydra" / "config.yaml").read_text()
        assert f"seed: {seed}\n" in config and "seeds: null" in config
        summary = json.loads((member_dir / "summary.json").read_text())
        assert summary["steps"] >= 3000 and summary["final_eval"]["episodes"] == 2
        history = pd.read_parquet(member_dir / "history.parquet")
        assert len(history) == summary["episodes"] > 0
        assert list((member_dir / "tb").glob("events.out.tfevents.*"))
        state = PPO.read_state(member_dir / "checkpoints" / "last.ckpt")
        assert state["config"]["seed"] == seed and state["steps"] == summary["steps"]
    assert "a population of 2 members (seeds 3, 5)" in result.stdout
    # the members' evaluation agents keep the population's thread pools (no "can't apply" warning)
    assert "already runs in this process" not in result.stdout + result.stderr


def test_play_eval_plot_and_resume_take_a_member_as_any_run(trained_population):
    cwd, run, _ = trained_population
    evaluated = rlexp(cwd, "mode=eval", f"+checkpoint={run / 'seed_5'}", "run.eval_episodes=2")
    assert evaluated.returncode == 0 and "eval:" in evaluated.stdout, evaluated.stderr
    plotted = rlexp(cwd, "mode=plot", f"+runs={run}/seed_*", "+output=members.png")
    assert plotted.returncode == 0 and "over 2 run(s)" in plotted.stdout and "1 group(s)" in plotted.stdout, (
        plotted.stdout + plotted.stderr)
    resumed = rlexp(cwd, f"+resume={run / 'seed_3'}", "run.max_steps=4000", "run.eval_episodes=2")
    assert resumed.returncode == 0 and "resumed" in resumed.stdout, resumed.stdout + resumed.stderr
    assert json.loads((run / "seed_3" / "summary.json").read_text())["steps"] >= 4000
    apart = rlexp(cwd, f"+resume={run}", "run.max_steps=5000")  # the members are at different steps now
    assert apart.returncode == 2 and "resume the members one by one" in apart.stderr, apart.stderr
    resumed = rlexp(cwd, f"+resume={run / 'seed_5'}", "run.max_steps=4000", "run.eval_episodes=2")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr


def test_resume_on_a_population_dir_resumes_every_member(trained_population):
    cwd, run, _ = trained_population
    before = json.loads((run / "seed_5" / "summary.json").read_text())["steps"]
    kept = rlexp(cwd, f"+resume={run}", "run.eval_episodes=2")  # the run's own run.max_steps: nothing to train
    assert kept.returncode == 0, kept.stdout + kept.stderr
    assert json.loads((run / "seed_5" / "summary.json").read_text())["steps"] == before
    resumed = rlexp(cwd, f"+resume={run}", "run.max_steps=5000", "run.eval_episodes=2")
    assert resumed.returncode == 0 and "resumed 2 members" in resumed.stdout, resumed.stdout + resumed.stderr
    for seed in (3, 5):
        summary = json.loads((run / f"seed_{seed}" / "summary.json").read_text())
        assert summary["steps"] >= 5000 > before
        assert len(pd.read_parquet(run / f"seed_{seed}" / "history.parquet")) == summary["episodes"]


@pytest.mark.parametrize("args, message", [
    (["run.seeds=0"], "run.seeds=0 must be at least 1"),
    (["agent=dqn", "buffer=prioritized", "run.seeds=2"],
     "run.seeds: a population's members replay from uniform buffers, not PrioritizedReplayBuffer; populations train "
     "PPO, A2C, VPG, TRPO, DQN, QR-DQN, DDPG, TD3, SAC and TQC"),
    (["run.members={lr:[0.001,0.002]}", "run.seeds=3"], "run.members.lr=[0.001, 0.002] must list one value per member"),
])
def test_a_refused_population_says_so_in_one_line_and_leaves_no_run_dir(tmp_path, args, message):
    result = rlexp(tmp_path, "env=cartpole", *args)
    assert result.returncode == 2 and message in result.stderr and len(result.stderr.strip().splitlines()) == 1, (
        result.stderr)
    assert not list(Path(tmp_path).glob("outputs/*/*"))


def test_a_population_with_a_member_stopped_before_the_others_resumes_every_member(tmp_path):
    """Member 1 stopped (diverged) at STEPS and was saved then; member 0 trained on to 2 x STEPS. The population
    resumes from member 0's step, member 1 stays stopped."""
    seeds = [0, 1]
    dirs = [tmp_path / f"seed_{s}" for s in seeds]
    agent = PPO(make_member_envs("CartPole-v1", 4, seeds, vectorization="sync"), seeds=seeds, **PPO_ARGS)
    agent.fit_population(STEPS, run_dirs=dirs, verbose=0)
    agent.stop_member(1, "diverged (non-finite loss)")
    agent.save_member(1, dirs[1] / "checkpoints" / "last.ckpt", keep_previous=True)
    agent.fit_population(2 * STEPS, run_dirs=dirs, verbose=0)
    assert [PPO.read_state(d / "checkpoints" / "last.ckpt")["steps"] for d in dirs] == [2 * STEPS, STEPS]
    again = PPO(make_member_envs("CartPole-v1", 4, seeds, vectorization="sync"), seeds=seeds, **PPO_ARGS)
    again.resume_population([d / "checkpoints" / "last.ckpt" for d in dirs])
    assert again.steps == 2 * STEPS and [r.steps for r in again.member_records()] == [2 * STEPS, STEPS]
    assert list(again.members.active.numpy()) == [1.0, 0.0]
    assert all(np.array_equal(a, b) for a, b in zip(member(again, 0), member(agent, 0)))


def test_members_evaluate_during_training_their_best_evaluation_is_their_best_ckpt_and_resume_keeps_them(tmp_path):
    """run.eval_interval in a population: each member's own evaluations.parquet at its single run's steps (PPO
    evaluates after the rollout that passes each multiple of 2,000: 2,048 and 4,096), best.ckpt the weights of its best
    one (mode=eval of it scores that row again), and a resumed population evaluates on from there."""
    result = rlexp(tmp_path, "agent=ppo", "env=cartpole", "run.seeds=[3,5]", "run.max_steps=5000",
                   "run.eval_interval=2000", "run.eval_episodes=2", "run.progress=none")
    assert result.returncode == 0, result.stdout + result.stderr
    (run,) = Path(tmp_path).glob("outputs/*/*_ppo_cartpole")
    firsts = []
    for seed in (3, 5):
        rows = pd.read_parquet(run / f"seed_{seed}" / "evaluations.parquet")
        assert rows["step"].tolist() == [2048, 4096] and rows["episodes"].tolist() == [2, 2]
        firsts.append(rows["mean_return"].iloc[0])
        best = rows["mean_return"].max()
        again = rlexp(tmp_path, "mode=eval", f"+checkpoint={run / f'seed_{seed}' / 'checkpoints' / 'best.ckpt'}",
                      "run.eval_episodes=2")
        assert again.returncode == 0 and f"eval: {best:.2f}" in again.stdout, again.stdout + again.stderr
        assert f"seed {seed}) eval at step 2,048" in result.stdout
    resumed = rlexp(tmp_path, f"+resume={run}", "run.max_steps=7000", "run.eval_interval=2000", "run.eval_episodes=2")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    for seed in (3, 5):
        rows = pd.read_parquet(run / f"seed_{seed}" / "evaluations.parquet")
        assert rows["step"].tolist() == [2048, 4096, 6144]


def test_each_member_normalises_with_its_own_statistics_as_its_single_run_would():
    """Two members of two envs each: member 0's rows are scaled by the statistics of member 0's rows alone (mean and
    variance worked out here, from the normaliser's start of mean 0, variance 1 and count 1e-4), whatever member 1
    sees; rewards are divided by the std of each member's own discounted returns, with its own gamma."""
    from rlexp.envs.normalize import MemberNormalizers, Normalizer

    normalizers = MemberNormalizers([Normalizer((1,), 2, gamma, True, True) for gamma in (0.5, 0.9)])
    obs = np.array([[1.0], [3.0], [100.0], [300.0]])
    scaled = normalizers.obs(obs, update=True)
    count = 2 + 1e-4
    mean = 2.0 * 2 / count  # batch mean 2, var 1: the parallel update from (0, 1, 1e-4)
    var = (1.0 * 1e-4 + 1.0 * 2 + 2.0 ** 2 * 1e-4 * 2 / count) / count
    np.testing.assert_allclose(scaled[:2, 0], np.array([1.0 - mean, 3.0 - mean]) / np.sqrt(var + 1e-8), rtol=1e-6)
    assert normalizers.obs(np.array([[1.0], [3.0], [-5.0], [9.0]]))[:2].tolist() == scaled[:2].tolist()
    rewards = normalizers.reward(np.array([1.0, 1.0, 1.0, 1.0]), np.zeros(4, bool))
    rewards = normalizers.reward(np.array([1.0, 1.0, 1.0, 1.0]), np.zeros(4, bool))  # returns 1.5 (gamma .5), 1.9
    for block, returns in ((rewards[:2], [1.0, 1.0, 1.5, 1.5]), (rewards[2:], [1.0, 1.0, 1.9, 1.9])):
        n1, n2 = 2, 2  # two updates of two equal returns: the running variance of [1, 1] then [r, r]
        count1 = 1e-4 + n1
        mean1 = 1.0 * n1 / count1
        var1 = (1.0 * 1e-4 + 0.0 + 1.0 * 1e-4 * n1 / count1) / count1
        r = returns[2]
        delta, total = r - mean1, count1 + n2
        var2 = (var1 * count1 + 0.0 + delta ** 2 * count1 * n2 / total) / total
        np.testing.assert_allclose(block, 1.0 / np.sqrt(var2 + 1e-8), rtol=1e-6)


def test_a_members_checkpoint_holds_its_own_normalisation_and_a_resume_restores_it(tmp_path):
    seeds = [0, 1]
    make = lambda: PPO(make_member_envs("Pendulum-v1", 4, seeds, vectorization="sync"), seeds=seeds,
                       normalize_obs=True, normalize_reward=True, member_values={"gamma": [0.9, 0.99]},
                       **(PPO_ARGS | dict(use_sde=False)))
    agent = make()
    assert [n.gamma for n in agent.normalizer.members] == [0.9, 0.99]  # each member's reward scaling, its gamma
    agent.fit_population(STEPS, verbose=0)
    for i in (0, 1):
        agent.save_member(i, tmp_path / f"m{i}.ckpt")
    saved = [np.load(tmp_path / f"m{i}.ckpt") for i in (0, 1)]
    for i in (0, 1):
        own = agent.normalizer.members[i]
        assert np.array_equal(saved[i]["normalizer/obs/mean"], own.obs_rms.mean)
        assert np.array_equal(saved[i]["normalizer/return/var"], own.return_rms.var)
    assert not np.array_equal(saved[0]["normalizer/obs/mean"], saved[1]["normalizer/obs/mean"])
    again = make()
    again.resume_population([tmp_path / "m0.ckpt", tmp_path / "m1.ckpt"])
    for i in (0, 1):
        assert np.array_equal(again.normalizer.members[i].obs_rms.mean, agent.normalizer.members[i].obs_rms.mean)
