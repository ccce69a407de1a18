"""Tuning that finds better settings: only unfinished trials are pruned, rungs fall after learning starts and ties
don't promote every trial, job slots never wait for each other, the step budget is a hard cap, a baseline study
continues, and autotune's preset is found by the command the user typed."""
import json
import os
import time
from pathlib import Path

import optuna
import pandas as pd
import pytest
from forked_cli import run_cli
from hydra.core.utils import JobReturn, JobStatus
from omegaconf import OmegaConf
from optuna.trial import TrialState

from rlexp.sweep import OptunaSweep, halving_rungs, make_pruner

TINY = ["run.eval_episodes=2", "agent.n_steps=32", "env.n_envs=4", "agent.ppo_epochs=2"]
SETTINGS = dict(sampler={"_target_": "optuna.samplers.RandomSampler", "seed": 0}, direction="maximize",
                directions=None, objective="final_eval", last_evals=3, seeds_per_trial=1, aggregate="mean",
                confirm=None, storage=None, study_name="s", n_trials=3, n_jobs=2, max_failure_rate=1.0, params=None,
                pruner="none", warmup_trials=1, warmup_steps=None, reports=10, heartbeat_interval=10,
                grace_period=60, baseline=None, max_env_steps=None)


def rlexp(cwd, *args, timeout=600):
    return run_cli(args, cwd, dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"), timeout)


# ----- pruning only stops unfinished trials ------------------------------------------------------------------
@pytest.mark.hydra14
@pytest.mark.parametrize("pruner,warmup,ahead_at", [
    ("median", 850, {m: 1e9 for m in range(100, 1001, 100)}),  # every mark judged from 900 on: 900 is the last
    ("halving", 300, {900: 1e9}),                                # rungs at the 300 and 900 marks; ahead at 900
])
def test_a_trial_that_trains_its_full_length_is_complete(tmp_path, pruner, warmup, ahead_at):
    """No run.eval_interval (the default): a trial reports its training mean at 10 marks of 100 steps. Rollouts of
    4 envs x 32 steps end at 896 and 1,024: the 900 mark is reported at the end of an episode inside the last
    rollout, after the trial trained 1,024 steps. The study holds a finished trial far ahead at that mark, so a
    pruner asked there would stop the trial; it trained its full length, so it is COMPLETE, with 1,024 steps."""
    folder = tmp_path / "multirun" / "full"
    folder.mkdir(parents=True)
    url = f"sqlite:///{folder}/optuna.db"
    study = optuna.create_study(study_name="full", storage=url, direction="maximize")
    study.add_trial(optuna.trial.create_trial(value=1e9, intermediate_values=ahead_at,
                                              user_attrs={f"rung_{m}": v for m, v in ahead_at.items()}))
    result = rlexp(tmp_path, "-m", *TINY, "run.max_steps=1000", "run.target_reward=null", "agent.lr=choice(1e-3)",
                   "hydra.sweeper.study_name=full", f"hydra.sweeper.pruner={pruner}", "hydra.sweeper.reports=10",
                   f"hydra.sweeper.warmup_steps={warmup}", "hydra.sweeper.warmup_trials=1",
                   "hydra.sweeper.n_trials=2")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    ran = [t for t in optuna.load_study(study_name="full", storage=url).trials if t.number > 0]
    assert [t.state for t in ran] == [TrialState.COMPLETE], [(t.state, t.user_attrs.get("error")) for t in ran]
    assert 900 in ran[0].intermediate_values  # the mark was reported, and recorded without a judgement
    assert ran[0].user_attrs["env_steps"] == 1024  # what it trained, not the step an episode ended at


def test_halving_rungs_fall_after_learning_starts_and_before_the_end():
    assert halving_rungs(90_000, 0, None) == [10_000, 30_000]              # 1/9 and 1/3 of the trial
    assert halving_rungs(100_001, 10_001, None) == [20_001, 40_001]        # of the steps after the warm-up
    assert halving_rungs(10_000 + 9 * 1_500, 10_001, 1_500) == [11_501, 14_501]  # autotune: L, 3L past it
    assert halving_rungs(4_000, 1_000, 3_000) == []                        # one length: nothing to compare


def test_ties_at_a_rung_promote_only_the_trial_that_got_there_first():
    """A trial that ties with the trials ahead of it at a rung is behind them (Optuna's successive halving promotes
    every tie): a trial at -150 reaches the rung first, then four at -200, then one at -150."""
    study = optuna.create_study(direction="maximize", pruner=make_pruner("halving", 1, 100, max_steps=1000))
    decisions = []
    for value in (-150.0, -200.0, -200.0, -200.0, -200.0, -150.0):
        trial = study.ask()
        trial.report(value, 100)
        decisions.append(trial.should_prune())
    # a trial stops when at least max(1, n // 3) of the n there (itself included) are ahead of it, a tie ahead
    # when it got there first: the 2nd has 1 ahead (of 2), the 3rd 2 (of 3), the 4th 3, the 5th 4 (of 5: 1 needed);
    # the 6th only the first -150 (of 6: 2 needed)
    assert decisions == [False, True, True, True, True, False]


def test_a_rung_where_every_trial_scored_the_same_stops_none_and_the_next_rung_compares_them():
    """A sparse reward: every trial scores -200 at the first rung (none reached the goal yet), which ranks nothing,
    so all four go on; at the next rung one scores -150, and a later -200 there is behind it."""
    study = optuna.create_study(direction="maximize", pruner=make_pruner("halving", 1, 100, max_steps=1000))
    trials = [study.ask() for _ in range(4)]
    decisions = []
    for trial in trials:
        trial.report(-200.0, 100)
        decisions.append(trial.should_prune())
    assert decisions == [False, False, False, False]
    trials[0].report(-200.0, 300)
    trials[1].report(-150.0, 300)
    trials[2].report(-200.0, 300)
    assert [t.should_prune() for t in trials[:2]] == [False, False]
    assert trials[2].should_prune()  # behind -150 and tied with the earlier -200: 2 ahead of 3


def test_the_median_pruner_waits_for_a_third_of_the_steps_after_learning_starts():
    assert make_pruner("median", 5, None, max_steps=30_000)._n_warmup_steps == 10_000
    assert make_pruner("median", 5, None, max_steps=31_000, learning_start=1_000)._n_warmup_steps == 11_000
    assert make_pruner("median", 5, 0, max_steps=30_000)._n_warmup_steps == 0


# ----- job slots, budgets, baselines (a launcher that stands in for the trials' processes) ---------------------
class TimedLauncher:
    """Each job sleeps, then ends as its trial's number says: {trial: (seconds, "complete" | "pruned" | "fail",
    env steps)}; a job's run dir gets a history of the steps it trained, as a real one would."""

    def __init__(self, sweep_dir: Path, plan: dict[int, tuple[float, str, int]]) -> None:
        self.sweep_dir, self.plan, self.calls, self.given = sweep_dir, plan, [], {}

    def launch(self, job_overrides, initial_job_idx):
        (overrides,) = job_overrides
        subdir = next(o.split("=", 1)[1] for o in overrides if o.startswith("hydra.sweep.subdir="))
        trial = int(subdir.split("/")[0].split("_")[1])
        seconds, how, steps = self.plan[trial]
        self.calls.append((subdir, time.time()))
        self.given[subdir] = list(overrides)
        time.sleep(seconds)
        run_dir = self.sweep_dir / subdir
        run_dir.mkdir(parents=True, exist_ok=True)
        pd.DataFrame({"step": [steps // 2, steps]}).to_parquet(run_dir / "history.parquet")
        ret = JobReturn()
        if how == "complete":
            ret.status, ret.return_value = JobStatus.COMPLETED, {"final_eval": float(trial), "steps": steps}
        elif how == "pruned":
            error = optuna.TrialPruned(f"pruned at step {steps}")
            error.steps = steps
            ret.status, ret._return_value = JobStatus.FAILED, error
        else:
            ret.status, ret._return_value = JobStatus.FAILED, RuntimeError("the trial's process died")
        return [ret]


def sweep_of(tmp_path: Path, plan, max_steps: int = 1000, **settings) -> tuple[OptunaSweep, TimedLauncher]:
    config = OmegaConf.create({"seed": 0, "run": {"max_steps": max_steps, "eval_episodes": 2},
                               "env": {"id": "CartPole-v1"},
                               "hydra": {"sweep": {"dir": str(tmp_path / "study")}, "job": {"config_name": "config"},
                                         "runtime": {"choices": {"agent": "ppo", "env": "cartpole"}}}})
    launcher = TimedLauncher(tmp_path / "study", plan)
    return OptunaSweep({**SETTINGS, **settings}, config, launcher), launcher


def study_trials(tmp_path: Path, name: str = "s") -> list[optuna.trial.FrozenTrial]:
    return sorted(optuna.load_study(study_name=name, storage=f"sqlite:///{tmp_path}/study/optuna.db").trials,
                  key=lambda t: t.number)


def test_a_pruned_trials_slot_starts_the_next_job_before_its_partner_ends(tmp_path):
    """n_jobs=2: trial 0 runs 4 s, trial 1 is pruned after 0.3 s; trial 2 starts in trial 1's slot at once, not
    when trial 0 ends (a batch would wait for it), and each trial's seconds are its own."""
    sweep, launcher = sweep_of(tmp_path, {0: (4.0, "complete", 1000), 1: (0.3, "pruned", 200),
                                          2: (0.3, "complete", 1000)})
    sweep.run(["agent.lr=tag(log,interval(1e-4,1e-2))"])
    trials = study_trials(tmp_path)
    assert [t.state for t in trials] == [TrialState.COMPLETE, TrialState.PRUNED, TrialState.COMPLETE]
    started = dict(launcher.calls)
    assert started["trial_2"] < trials[0].user_attrs["ended"] - 2.0  # well before trial 0 ended
    assert trials[1].user_attrs["seconds"] < 2.0 and trials[0].user_attrs["seconds"] >= 4.0


def test_a_trials_seeds_are_jobs_like_any_other(tmp_path):
    """seeds_per_trial=3, n_jobs=2: trial 0's third seed starts as soon as one of its first two ends."""
    sweep, launcher = sweep_of(tmp_path, {0: (0.5, "complete", 1000)}, seeds_per_trial=3, n_trials=1)
    sweep.run(["agent.lr=tag(log,interval(1e-4,1e-2))"])
    (trial,) = study_trials(tmp_path)
    assert trial.state == TrialState.COMPLETE and trial.user_attrs["env_steps"] == 3000
    starts = [at for _, at in sorted(launcher.calls, key=lambda c: c[1])]
    assert starts[2] - starts[0] < 0.9  # after one seed (0.5 s), not after a batch of two and a wait
    assert 0.9 < trial.user_attrs["seconds"] < 1.5  # two rounds of 0.5 s, not three


def test_the_step_budget_counts_what_failed_trials_trained(tmp_path):
    """Trials of up to 1,000 steps within max_env_steps=2,500: each fails after training 600 (its run dir says so).
    They count 600 each, and a trial starts only while the budget holds it at its full length (1,000): three
    trials (1,800 steps), never more than the cap."""
    sweep, _ = sweep_of(tmp_path, {n: (0.05, "fail", 600) for n in range(10)}, n_trials=10, n_jobs=1,
                        max_env_steps=2500)
    sweep.run(["agent.lr=tag(log,interval(1e-4,1e-2))"])
    trials = study_trials(tmp_path)
    assert [t.user_attrs["env_steps"] for t in trials] == [600, 600, 600]
    assert all(t.state == TrialState.FAIL for t in trials)


def test_a_study_whose_baseline_lies_outside_the_space_is_continued(tmp_path):
    """Trial 0 trains the baseline, whose entropy coefficient 0 lies outside the log interval: it is not one of the
    trial's Optuna parameters, yet the same sweep continues the study instead of calling it another space."""
    plan = {n: (0.05, "complete", 1000) for n in range(4)}
    space = ["agent.lr=tag(log,interval(1e-4,1e-2))", "agent.entropy_coef=tag(log,interval(1e-8,1e-1))"]
    baseline = {"agent.lr": 7e-4, "agent.entropy_coef": 0.0}
    first, _ = sweep_of(tmp_path, plan, n_trials=2, baseline=baseline)
    first.run(space)
    again, _ = sweep_of(tmp_path, plan, n_trials=4, baseline=baseline)
    again.run(space)
    trials = study_trials(tmp_path)
    assert len(trials) == 4 and trials[0].params == {"agent.lr": 7e-4}
    assert trials[0].user_attrs["baseline_values"] == {"agent.entropy_coef": 0.0}


def test_enqueued_configurations_train_after_the_baseline_with_their_other_values_fixed(tmp_path):
    """hydra.sweeper.enqueue: after the baseline, its two configurations, in order, one trial each. A value in the
    space is the trial's Optuna parameter; one outside it (lr 0.5) or of a key the study does not search (gamma)
    is a fixed value the trial's job gets, but the command line's own values win (env.n_envs=4). A study stopped
    after two trials, continued, trains the second configuration next (not the baseline again), then samples."""
    plan = {n: (0.05, "complete", 1000) for n in range(4)}
    settings = dict(n_jobs=1, baseline={"agent.lr": 7e-4},
                    enqueue=[{"agent.lr": 1e-3, "agent.gamma": 0.95}, {"agent.lr": 0.5, "env.n_envs": 16}])
    overrides = ["agent.lr=tag(log,interval(1e-4,1e-2))", "env.n_envs=4"]
    first, _ = sweep_of(tmp_path, plan, n_trials=2, **settings)
    first.run(overrides)
    sweep, launcher = sweep_of(tmp_path, plan, n_trials=4, **settings)
    sweep.run(overrides)
    trials = study_trials(tmp_path)
    assert [t.params for t in trials[:3]] == [{"agent.lr": 7e-4}, {"agent.lr": 1e-3}, {}]
    assert [t.user_attrs.get("baseline_values") for t in trials] == [None, {"agent.gamma": 0.95}, {"agent.lr": 0.5},
                                                                     None]
    assert "agent.lr" in trials[3].params and trials[3].params["agent.lr"] not in (7e-4, 1e-3)
    assert {"agent.lr=0.5", "env.n_envs=4"} <= set(launcher.given["trial_2"])
    assert "env.n_envs=16" not in launcher.given["trial_2"]


def test_the_baseline_keeps_the_pairs_group_choices(monkeypatch):
    """model=choice(mlp, mlp_large) in the space: trial 0 trains the model the pair trains untuned (auto)."""
    import rlexp.commands.autotune.request as autotune

    monkeypatch.setattr(autotune, "choices", lambda: {"agent": "a2c", "env": "cartpole", "model": "auto"})
    trial_cfg = OmegaConf.create({"agent": {"lr": 7e-4, "n_steps": 5}, "model": {"name": "mlp", "layers": []}})
    assert autotune.baseline_values(trial_cfg, {"model", "agent.lr", "agent.n_steps"}) == {
        "agent.lr": 7e-4, "agent.n_steps": 5, "model": "auto"}


def test_the_baseline_covers_the_keys_a_search_space_takes_from_the_space_it_builds_on(monkeypatch):
    """sweep/a2c_continuous.yaml is `defaults: [a2c, _self_]` and gSDE: trial 0 trains the pair's untuned values of
    all of them, not only of the three it adds."""
    import rlexp.commands.autotune.request as autotune

    shipped = Path(__file__).parents[1] / "conf" / "sweep"
    monkeypatch.setattr(autotune, "hydra_preset", lambda group, name: (shipped / f"{name}.yaml", False))
    a2c = {"agent.lr", "agent.n_steps", "agent.gamma", "agent.lam", "agent.entropy_coef", "agent.grad_norm",
           "agent.normalize_obs", "agent.normalize_reward", "env.n_envs", "model"}
    assert autotune.searched_keys("a2c", autotune.Overrides([], [], [], [], None)) == a2c
    assert autotune.searched_keys("a2c_continuous", autotune.Overrides([], [], [], [], None)) == a2c | {
        "agent.use_sde", "agent.sde_sample_freq", "agent.log_std_init"}


def test_a_final_evaluation_that_draws_actions_otherwise_than_the_last_periodic_one_runs_again(monkeypatch):
    """Sampled evaluations during training (run.eval_deterministic=false), a deterministic final one: the periodic
    evaluation at the final step can't stand in for it."""
    from types import SimpleNamespace

    import rlexp.commands.train as train

    calls = []
    monkeypatch.setattr(train, "evaluate", lambda agent, cfg, deterministic=None: calls.append(deterministic) or [1.0])
    agent = SimpleNamespace(steps=100, episodes=4)
    evaluator = SimpleNamespace(last_returns=[7.0, 9.0], rows=[{"step": 100}])
    cfg = OmegaConf.create({"run": {"eval_episodes": 2, "eval_deterministic": False, "final_eval_deterministic": True},
                            "env": {"id": "CartPole-v1"}})
    assert train.final_evaluation(agent, cfg, evaluator) == ([1.0], True) and calls == [True]
    cfg.run.final_eval_deterministic = None  # as the periodic ones: the last one is the final evaluation
    assert train.final_evaluation(agent, cfg, evaluator) == ([7.0, 9.0], False) and calls == [True]


# ----- autotune's budget and its preset ----------------------------------------------------------------------
def test_autotune_rungs_start_after_the_warm_up_and_leave_room_for_the_trials_running_beside_the_last():
    """TD3 with 10,000 random steps, 200,000 env steps over 10 trials x 2 seeds, 2 job slots (one trial at a time):
    100,000 per seed less 10 warm-ups leaves 0 steps... so a budget of 3x: 300,000 / 2 = 150,000 - 100,000 = 50,000
    over 9 + 9 x 7/3 + 1 x (9 - 7/3) = 36.67 first-rung lengths: L = 1,363; rungs 11,363 and 14,089 moved up to
    the evaluations (every L steps) after them: 9 L = 12,267 and 11 L = 14,993."""
    from rlexp.commands.autotune.budget import check_budget

    defaults = OmegaConf.load(Path(__file__).parents[1] / "conf" / "config.yaml").autotune
    budget = check_budget(OmegaConf.create({"autotune": {**defaults, "budget": 3}}), 100_000, 10_000, 2)
    assert budget.eval_interval == 1_363 and budget.trial_steps == 10_000 + 9 * 1_363
    assert budget.rung_steps == [12_267, 14_993]


def test_the_portfolio_takes_your_presets_first_then_the_nearest_training_length_and_skips_repeats(monkeypatch):
    """Candidates for a pair of 1e6 steps (lr searched; its untuned lr 7e-4, gamma 0.99), limit 3: your own preset
    first whatever its length; then |log(steps / 1e6)|: 5e5 (0.69) before 4e5 (0.92) before 3e6 (1.10). A
    candidate keeps its unsearched values only where they differ from the pair's (gamma 0.99 goes, 0.9 stays); one
    that trains the pair's own values (lr 7e-4 and gamma 0.99: trial 0), or an earlier candidate's, is skipped."""
    import rlexp.presets.portfolio as portfolio
    from rlexp.presets.portfolio import Candidate

    found = [Candidate("a2c_far", False, 10_000, {"agent.lr": 1.0}),
             Candidate("a2c_long", False, 3_000_000, {"agent.lr": 2.0, "agent.gamma": 0.9}),
             Candidate("a2c_same_as_the_pair", False, 1_000_000, {"agent.lr": 7e-4, "agent.gamma": 0.99}),
             Candidate("a2c_near", False, 500_000, {"agent.lr": 3.0, "agent.gamma": 0.99}),
             Candidate("a2c_near_repeat", False, 400_000, {"agent.lr": 3.0}),
             Candidate("a2c_mine", True, 10, {"agent.lr": 4.0})]
    monkeypatch.setattr(portfolio, "candidates", lambda *args: found)
    untuned = {"agent.lr": 7e-4, "agent.gamma": 0.99}

    def pair(keys):
        return {k: v for k, v in untuned.items() if k in keys}

    chosen = portfolio.portfolio("a2c", "MountainCar-v0", "discrete_vector", {"agent.lr"}, pair, 1_000_000, 3, 0)
    assert [(c.name, c.values) for c in chosen] == [("a2c_mine", {"agent.lr": 4.0}), ("a2c_near", {"agent.lr": 3.0}),
                                                    ("a2c_long", {"agent.lr": 2.0, "agent.gamma": 0.9})]
    assert portfolio.portfolio("a2c", "MountainCar-v0", "discrete_vector", {"agent.lr"}, pair, 1_000_000, 0, 0) == []


def test_a_preset_of_the_same_task_with_the_other_actions_comes_before_the_nearest_training_length(monkeypatch):
    """LunarLanderContinuous-v3 (1e6 steps) with candidates ppo_hopper (1e6 steps: distance 0) and ppo_lunarlander
    (the same task with discrete actions, 1e6 steps too, after ppo_hopper by name alone): the same task first; your
    own preset still before both."""
    import rlexp.presets.portfolio as portfolio
    from rlexp.presets.portfolio import Candidate

    found = [Candidate("ppo_hopper", False, 1_000_000, {"agent.lr": 1.0}),
             Candidate("ppo_lunarlander", False, 1_000_000, {"agent.lr": 2.0}, same_task=True),
             Candidate("ppo_mine", True, 10, {"agent.lr": 3.0})]
    monkeypatch.setattr(portfolio, "candidates", lambda *args: found)
    chosen = portfolio.portfolio("ppo", "LunarLanderContinuous-v3", "continuous_vector", {"agent.lr"},
                                 lambda keys: {"agent.lr": 3e-4}, 1_000_000, 3, 0)
    assert [c.name for c in chosen] == ["ppo_mine", "ppo_lunarlander", "ppo_hopper"]


@pytest.mark.parametrize("env_id, family", [
    ("LunarLanderContinuous-v3", "LunarLander"), ("LunarLander-v3", "LunarLander"),
    ("MountainCarContinuous-v0", "MountainCar"), ("Hopper-v5", "Hopper"), ("ALE/Pong-v5", "Pong"),
    ("my_pkg:Corridor-v12", "my_pkg:Corridor")])
def test_an_env_family_is_the_id_without_namespace_version_and_continuous(env_id, family):
    from rlexp.presets.portfolio import env_family

    assert env_family(env_id) == family


def test_a_report_past_max_steps_is_never_judged(tmp_path):
    """Without run.eval_interval a trial reports its training mean at evenly spaced marks; an on-policy trial
    collects its last rollout whole, past max_steps. Rollouts of 128 steps, max_steps 1000, 10 reports: an episode
    of the last rollout (896 to 1,024) ends at 905 and reports the 900 mark after the trial trained its full
    length, so it is recorded, not judged. A trial behind a finished one at a mark it reaches before max_steps is
    still pruned, and its error carries the steps it trained."""
    from rlexp.sweep.pruning import PruningReporter

    url = f"sqlite:///{tmp_path}/optuna.db"
    study = optuna.create_study(study_name="s", storage=url, direction="maximize")
    study.add_trial(optuna.trial.create_trial(value=100.0, intermediate_values={m: 100.0 for m in range(100, 1001, 100)}))

    def reporter():
        trial_id = study.ask()._trial_id
        spec = {"storage": url, "study": "s", "trial_id": trial_id, "pruner": "median", "warmup_trials": 1,
                "warmup_steps": 850, "reports": 10, "leader": True, "prune": True}
        return PruningReporter(spec, max_steps=1000, eval_interval=0), trial_id

    whole, whole_id = reporter()
    for step in range(128, 1024, 128):  # marks 100..800: before the pruner's warm-up ends at 850
        whole.trained(step)
        whole.scalars(step, {"episode/mean_return": 0.0})
    whole.trained(1024)  # the last rollout, 896 to 1,024: its episodes end at 905 and 990, before max_steps
    whole.scalars(905, {"episode/mean_return": 0.0})  # the 900 mark, after 1,024 steps: not judged
    whole.scalars(990, {"episode/mean_return": 0.0})
    assert 900 in study._storage.get_trial(whole_id).intermediate_values
    behind, _ = reporter()
    for step in range(100, 900, 100):
        behind.trained(step)
        behind.scalars(step, {"episode/mean_return": 0.0})
    behind.trained(960)  # a rollout ending at 960: it has not trained its full length
    with pytest.raises(optuna.TrialPruned, match="pruned at step 900") as pruned:
        behind.scalars(905, {"episode/mean_return": 0.0})
    assert pruned.value.steps == 960  # the steps it trained count against the study's budget


def test_the_baseline_is_scored_at_the_rungs_but_never_pruned(tmp_path):
    """mode=autotune's trial 0 (the untuned values) is the reference the tuned preset must beat: a halving rung
    records its score, where it is behind, and it trains on; another trial behind at the same rung stops."""
    from rlexp.sweep.pruning import PruningReporter

    url = f"sqlite:///{tmp_path}/optuna.db"
    study = optuna.create_study(study_name="s", storage=url, direction="maximize")
    study.add_trial(optuna.trial.create_trial(value=100.0, intermediate_values={100: 100.0},
                                              user_attrs={"rung_100": 100.0, "rung_100_at": 0.0}))

    def reporter(reference):
        trial_id = study.ask()._trial_id
        spec = {"storage": url, "study": "s", "trial_id": trial_id, "pruner": "halving", "warmup_trials": 1,
                "warmup_steps": 100, "reports": 10, "leader": True, "prune": True, "reference": reference}
        return PruningReporter(spec, max_steps=1000, eval_interval=100), trial_id

    baseline, baseline_id = reporter(True)
    baseline.scalars(100, {"eval/mean_return": 0.0})  # behind the finished trial at the 100-step rung
    assert study._storage.get_trial(baseline_id).user_attrs["rung_100"] == 0.0
    other, _ = reporter(False)
    with pytest.raises(optuna.TrialPruned, match="pruned at step 100"):
        other.scalars(100, {"eval/mean_return": 0.0})


# ----- trials compared at equal steps ------------------------------------------------------------------------
def reporters_of(tmp_path, pruner="none", warmup_steps=None):
    """A study and a maker of reporters for new trials in it: max_steps 1,000, 10 report marks (every 100 steps)."""
    from rlexp.sweep.pruning import PruningReporter

    url = f"sqlite:///{tmp_path}/optuna.db"
    study = optuna.create_study(study_name="s", storage=url, direction="maximize")

    def reporter(eval_interval=0):
        trial_id = study.ask()._trial_id
        spec = {"storage": url, "study": "s", "trial_id": trial_id, "pruner": pruner, "warmup_trials": 1,
                "warmup_steps": warmup_steps, "reports": 10, "leader": True, "prune": True}
        return PruningReporter(spec, max_steps=1000, eval_interval=eval_interval), trial_id

    return study, reporter


def test_scores_are_reported_at_the_same_steps_whatever_the_rollout_size(tmp_path):
    """The score grows as step / 10. A trial measured every 300 steps and one measured every 128 report the score
    of the step each mark names, not of the step they measured it at: the first scores 30 at the 300 mark and 40 at
    the 400 mark (between its 300 and 600 measurements), the second 20 at the 200 mark (between 128 and 256). Marks
    before a trial's first measurement get no score."""
    study, reporter = reporters_of(tmp_path)
    coarse, coarse_id = reporter()
    for step in (300, 600, 900):
        coarse.scalars(step, {"episode/mean_return": step / 10})
    fine, fine_id = reporter()
    for step in range(128, 1025, 128):  # the last measured at 1,024, past the trial's end
        fine.scalars(step, {"episode/mean_return": step / 10})
    values = {trial_id: study._storage.get_trial(trial_id).intermediate_values for trial_id in (coarse_id, fine_id)}
    assert values[coarse_id] == pytest.approx({300: 30.0, 400: 40.0, 500: 50.0, 600: 60.0, 700: 70.0, 800: 80.0,
                                               900: 90.0})
    assert values[fine_id] == pytest.approx({200: 20.0, 300: 30.0, 400: 40.0, 500: 50.0, 600: 60.0, 700: 70.0,
                                             800: 80.0, 900: 90.0, 1000: 100.0})


def test_an_evaluation_between_marks_scores_the_marks_it_passed_by_interpolation(tmp_path):
    """run.eval_interval=100: an on-policy trial evaluated after its rollouts of 384 steps (at 384 and 768) reports
    the marks 400 to 700 on the line between its two evaluations: 0 at 384, 38.4 at 768: 1.6 at 400, 11.6 at 500."""
    study, reporter = reporters_of(tmp_path)
    trial, trial_id = reporter(eval_interval=100)
    trial.scalars(384, {"eval/mean_return": 0.0})
    trial.scalars(768, {"eval/mean_return": 38.4})
    assert study._storage.get_trial(trial_id).intermediate_values == pytest.approx(
        {400: 1.6, 500: 11.6, 600: 21.6, 700: 31.6})


def test_halving_rungs_lie_on_the_report_marks():
    """A first rung at 111 steps, rungs at 111 x 1, 3, 9: on marks every 100 steps they are 200 and 400 (999 is
    past the last mark before the trial's end, 1,000)."""
    assert halving_rungs(1000, 0, 111, grid=100) == [200, 400]
    assert halving_rungs(1000, 50, 100, grid=100) == [200, 400]  # 150 and 350 after a warm-up of 50 steps


def test_a_rung_compares_trials_at_its_own_step(tmp_path):
    """Successive halving with a rung at 200 steps: a trial measured at 128 (score 12.8) and 256 (25.6) scores 20
    there. A trial with long rollouts, measured at 190 (19) and next at 600 (40), scores 19 + 21 x 10 / 410 =
    19.51 at the rung: behind, it stops, though its score after 600 steps is above the first trial's after 256."""
    study, reporter = reporters_of(tmp_path, pruner="halving", warmup_steps=200)
    first, first_id = reporter()
    first.scalars(128, {"episode/mean_return": 12.8})
    first.scalars(256, {"episode/mean_return": 25.6})
    assert study._storage.get_trial(first_id).user_attrs["rung_200"] == pytest.approx(20.0)
    second, second_id = reporter()
    second.scalars(190, {"episode/mean_return": 19.0})
    with pytest.raises(optuna.TrialPruned, match="pruned at step 200"):
        second.scalars(600, {"episode/mean_return": 40.0})
    assert study._storage.get_trial(second_id).user_attrs["rung_200"] == pytest.approx(19.0 + 21.0 * 10 / 410)


def test_the_portfolio_takes_rl_zoos_rows_of_env_presets_without_a_tuned_preset():
    """TD3 on MountainCarContinuous-v0: env=pendulum and env=bipedal have no tuned TD3 preset, only RL Zoo's rows
    (td3.yml Pendulum-v1: lr 1e-3, gamma 0.98, 400-300 network, 20k steps), whose values make them candidates,
    named by the row; presets of image envs and the pair's own env are none."""
    from hydra import compose, initialize_config_module
    from hydra.core.hydra_config import HydraConfig

    from rlexp.presets.portfolio import candidates

    with initialize_config_module(config_module="rlexp.conf", version_base="1.3"):
        cfg = compose(config_name="config", overrides=["agent=td3", "env=generic",
                                                       "env.id=MountainCarContinuous-v0"], return_hydra_config=True)
        HydraConfig.instance().set_config(cfg)
        found = {c.name: c for c in candidates("td3", "MountainCarContinuous-v0", "continuous_vector",
                                               {"agent.lr", "agent.gamma"}, 0)}
    pendulum = found["td3_pendulum"]
    assert (pendulum.row, pendulum.label, pendulum.own, pendulum.max_steps) == (
        "td3.yml Pendulum-v1", "RL Zoo's row td3.yml Pendulum-v1", False, 20_000)
    assert (pendulum.values["agent.lr"], pendulum.values["agent.gamma"]) == (1e-3, 0.98)
    bipedal = found["td3_bipedal"]  # its shipped preset is gone: the row itself (gamma 0.98, 1M steps)
    assert (bipedal.row, bipedal.label, bipedal.max_steps) == (
        "td3.yml BipedalWalker-v3", "RL Zoo's row td3.yml BipedalWalker-v3", 1_000_000)
    assert (bipedal.values["agent.lr"], bipedal.values["agent.gamma"]) == (1e-3, 0.98)
    assert not {"td3_pong", "td3_breakout", "td3_generic"} & set(found)


# ----- a trial's seeds as one population ------------------------------------------------------------------------
def test_a_pruned_trial_in_a_packed_job_stops_alone(tmp_path):
    """trials_per_job=2: the baseline (never pruned) and a sampled trial train as one population. A finished trial far
    ahead makes the median pruner stop the sampled one at its first judged mark: its member stops there and its trial
    counts its steps alone, while the baseline's member trains on to the end and completes."""
    folder = tmp_path / "multirun" / "pack"
    folder.mkdir(parents=True)
    url = f"sqlite:///{folder}/optuna.db"
    study = optuna.create_study(study_name="pack", storage=url, direction="maximize")
    study.set_user_attr("marks_first_trials", True)  # its first trials marked: the baseline still to train
    study.add_trial(optuna.trial.create_trial(value=1e9, intermediate_values={m: 1e9 for m in range(600, 6001, 600)}))
    result = rlexp(tmp_path, "-m", *TINY, "run.max_steps=6000", "run.target_reward=null",
                   "agent.lr=interval(1e-4,1e-2)", "hydra.sweeper.baseline={agent.lr:3e-4}",
                   "hydra.sweeper.study_name=pack", "hydra.sweeper.pruner=median", "hydra.sweeper.reports=10",
                   "hydra.sweeper.warmup_steps=500", "hydra.sweeper.warmup_trials=1", "hydra.sweeper.n_trials=3",
                   "hydra.sweeper.trials_per_job=2", "seed=4")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    baseline, sampled = [t for t in optuna.load_study(study_name="pack", storage=url).trials if t.number > 0]
    assert baseline.user_attrs["baseline"] and baseline.state == TrialState.COMPLETE
    assert sampled.state == TrialState.PRUNED and sampled.user_attrs["pruned_at"] == 600, sampled.user_attrs
    assert sorted(p.name for p in (folder / ".launcher").glob("*.out")) == ["job_1.out"]  # one job of both
    own = pd.read_parquet(folder / "trial_2" / "history.parquet")["step"].max()
    assert 600 <= own <= 2048 and sampled.user_attrs["env_steps"] == 2048
    assert "pruned" in json.loads((folder / "trial_2" / "summary.json").read_text())["reason"]
    summary = json.loads((folder / "trial_1" / "summary.json").read_text())
    assert summary["reason"] == "max_steps" and summary["steps"] >= 6000
    assert baseline.user_attrs["env_steps"] == summary["steps"] and baseline.value == summary["final_eval"]["mean_return"]


def test_a_pruned_population_stops_every_member_and_counts_all_their_steps(tmp_path):
    """seeds_per_trial=3 with population=true: one process trains the 3 seeds; its first member reports its training
    mean. A finished trial far ahead at every mark makes the median pruner stop it at the first mark it judges: all
    3 members stop there, after the first fused call (2,048 steps), and the budget counts the 3 members' steps."""
    folder = tmp_path / "multirun" / "pop"
    folder.mkdir(parents=True)
    url = f"sqlite:///{folder}/optuna.db"
    study = optuna.create_study(study_name="pop", storage=url, direction="maximize")
    ahead = {m: 1e9 for m in range(600, 6001, 600)}
    study.add_trial(optuna.trial.create_trial(value=1e9, intermediate_values=ahead))
    result = rlexp(tmp_path, "-m", *TINY, "run.max_steps=6000", "run.target_reward=null", "agent.lr=choice(1e-3)",
                   "hydra.sweeper.study_name=pop", "hydra.sweeper.pruner=median", "hydra.sweeper.reports=10",
                   "hydra.sweeper.warmup_steps=500", "hydra.sweeper.warmup_trials=1", "hydra.sweeper.n_trials=2",
                   "hydra.sweeper.seeds_per_trial=3", "hydra.sweeper.population=true", "seed=4")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (ran,) = [t for t in optuna.load_study(study_name="pop", storage=url).trials if t.number > 0]
    assert ran.state == TrialState.PRUNED and ran.user_attrs["pruned_at"] == 600, ran.user_attrs
    logs = sorted(p.name for p in (folder / ".launcher").glob("*.out"))
    assert logs == ["job_3.out"]  # trial 1's one job
    assert "a population of 3 members (seeds 4, 5, 6)" in (folder / ".launcher" / "job_3.out").read_text()
    trained = [pd.read_parquet(folder / "trial_1" / f"seed_{s}" / "history.parquet")["step"].max() for s in (4, 5, 6)]
    assert all(600 <= steps <= 2048 for steps in trained)
    assert ran.user_attrs["trained_0"] == 2048 and ran.user_attrs["env_steps"] == 3 * 2048
