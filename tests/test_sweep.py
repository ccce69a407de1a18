"""The Optuna sweeper: search-space grammar, and real sweeps through the CLI (one process per trial)."""
import json
import multiprocessing
import os
import signal
import stat
import subprocess
import sys
import time

import numpy as np
import optuna
import pandas as pd
import pytest
from forked_cli import run_cli
import yaml
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState

from conftest import study_folder
from rlexp.errors import SweepError
from rlexp.sweep import grid_points, make_storage, search_space

TINY = ["run.max_steps=2048", "run.eval_episodes=2", "agent.n_steps=32", "env.n_envs=4"]


def rlexp(cwd, *args, timeout=600):
    return run_cli(args, cwd, dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"), timeout)


def trials(cwd, study=None, storage=None):
    """The trials of study `study` (multirun/<study>/), or of the one generated ppo_cartpole_<hash> study."""
    if study is None:
        study = study_folder(cwd).name
    storage = storage or f"sqlite:///{cwd}/multirun/{study}/optuna.db"
    return optuna.load_study(study_name=study, storage=storage).get_trials()


# ----- the grammar ---------------------------------------------------------------------------------
def test_search_space_grammar():
    dists, fixed, grid = search_space(["agent.lr=tag(log,interval(1e-5,1e-2))", "a=interval(0.1,0.9)",
                                       "b=int(interval(1,9))", "c=choice(16,32)", "d=range(1,5)",
                                       "e=range(0.1,0.4,0.1)", "f=tag(log,int(interval(16,256)))", "g=3"])
    assert dists["agent.lr"] == FloatDistribution(1e-5, 1e-2, log=True)
    assert dists["a"] == FloatDistribution(0.1, 0.9)
    assert dists["b"] == IntDistribution(1, 9)
    assert dists["c"] == CategoricalDistribution([16, 32])
    assert dists["d"] == IntDistribution(1, 4)  # Hydra's range excludes stop, like Python's
    assert dists["e"].step == pytest.approx(0.1) and dists["e"].high == pytest.approx(0.3)
    assert dists["f"] == IntDistribution(16, 256, log=True)
    assert fixed == {"g": "3"} and not grid


def test_comma_lists_are_a_grid_and_bad_ranges_are_one_line():
    dists, _, grid = search_space(["seed=0,1,2", "agent.lr=1e-3,3e-3"])
    assert grid and len(grid_points(dists)) == 6
    with pytest.raises(SweepError, match=r"reversed; write the lower bound first: interval\(0.0001,0.01\)"):
        search_space(["agent.lr=interval(1e-2,1e-4)"])
    with pytest.raises(SweepError, match="is empty"):
        search_space(["x=range(5,1)"])
    with pytest.raises(SweepError, match="above 0"):
        search_space(["x=tag(log,interval(0,1))"])


def _hammer(url: str, study: str, trial_id: int, n: int) -> None:
    storage = make_storage(url)
    trial = optuna.trial.Trial(optuna.load_study(study_name=study, storage=storage), trial_id)
    for step in range(n):
        trial.report(float(step), step)


def test_sqlite_storage_takes_concurrent_writers_without_lock_errors(tmp_path):
    url = f"sqlite:///{tmp_path}/s.db"
    study = optuna.create_study(study_name="s", storage=make_storage(url))
    ids = [study.ask()._trial_id for _ in range(2)]
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_hammer, args=(url, "s", i, 150)) for i in ids]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]  # no "database is locked"
    assert all(len(t.intermediate_values) == 150 for t in optuna.load_study(study_name="s", storage=url).trials)


# ----- real sweeps -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """A 3-trial PPO CartPole sweep, 2 trials at a time."""
    cwd = tmp_path_factory.mktemp("sweep")
    result = rlexp(cwd, "-m", *TINY, "agent.lr=tag(log,interval(1e-4,1e-2))", "hydra.sweeper.n_trials=3")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return cwd, result


@pytest.mark.hydra14
def test_sweep_runs_each_trial_in_its_own_process_and_reports(sweep):
    cwd, result = sweep
    done = trials(cwd)
    assert [t.state for t in done] == [TrialState.COMPLETE] * 3
    assert len({t.user_attrs["pid"] for t in done}) == 3 and os.getpid() not in {t.user_attrs["pid"] for t in done}
    assert len({t.params["agent.lr"] for t in done}) == 3
    assert all(t.intermediate_values for t in done)  # mean return reported to the study while training
    lines = [line for line in result.stdout.splitlines() if line.startswith("trial ")]
    assert len(lines) == 3 and all("COMPLETE" in line and "agent.lr=" in line for line in lines)
    folder = study_folder(cwd)
    for name in ("optimization_results.yaml", "trials.csv", "optimization_history.png", "tuned/best.yaml"):
        assert (folder / name).exists(), name
    for n in range(3):
        assert (folder / f"trial_{n}" / "history.parquet").exists() and (folder / f"trial_{n}" / "main.log").exists()


def test_best_preset_is_loadable(sweep):
    cwd, _ = sweep
    best = max((t for t in trials(cwd)), key=lambda t: t.value)
    folder = study_folder(cwd)
    result = rlexp(cwd, "--config-dir", str(folder), "agent=ppo", "env=cartpole", "tuned=best", "--cfg", "job")
    assert result.returncode == 0, result.stderr
    assert f"lr: {best.params['agent.lr']}" in result.stdout
    assert "n_envs: 4" in result.stdout and "n_steps: 32" in result.stdout  # the sweep's fixed values
    assert "ppo_epochs: 20" in result.stdout  # and the rest of the tuned preset


@pytest.mark.hydra14
def test_same_command_continues_its_study_and_another_sweep_starts_its_own(sweep):
    """n_trials is the study's total: the same command again adds nothing, a larger n_trials adds the difference;
    another search space (or other fixed values) is another study, named by its own hash, and says so."""
    cwd, _ = sweep
    folder = study_folder(cwd)
    again = rlexp(cwd, "-m", *TINY, "agent.lr=tag(log,interval(1e-4,1e-2))", "hydra.sweeper.n_trials=3")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert f"continuing study {folder.name} (3 trials so far: 3 COMPLETE)" in again.stdout
    assert f"study {folder.name} already holds 3 trial(s) (hydra.sweeper.n_trials=3)" in again.stdout
    more = rlexp(cwd, "-m", *TINY, "agent.lr=tag(log,interval(1e-4,1e-2))", "hydra.sweeper.n_trials=4")
    assert more.returncode == 0, more.stdout[-3000:] + more.stderr[-3000:]
    done = trials(cwd)
    assert len(done) == 4 and len({t.params["agent.lr"] for t in done}) == 4  # no replayed draws
    other = rlexp(cwd, "-m", *TINY, "agent.lr=interval(1e-4,1e-2)", "hydra.sweeper.n_trials=1")
    assert other.returncode == 0, other.stdout[-3000:] + other.stderr[-3000:]
    studies = sorted(p.name for p in (cwd / "multirun").iterdir())
    assert len(studies) == 2 and folder.name in studies
    (new,) = set(studies) - {folder.name}
    assert new.startswith("ppo_cartpole_") and f"new study {new} in" in other.stdout
    assert f"other studies of ppo+cartpole here: {folder.name}" in other.stdout
    named = rlexp(cwd, "-m", *TINY, "agent.lr=interval(1e-4,1e-2)", f"hydra.sweeper.study_name={folder.name}")
    assert named.returncode == 2
    out = named.stdout + named.stderr
    assert "another search space" in out and "hydra.sweeper.study_name=" in out and "Traceback" not in out
    scored = rlexp(cwd, "-m", *TINY, "agent.lr=tag(log,interval(1e-4,1e-2))", "hydra.sweeper.seeds_per_trial=2",
                   "hydra.sweeper.aggregate=iqm", f"hydra.sweeper.study_name={folder.name}")
    assert scored.returncode == 2 and len(trials(cwd, folder.name)) == 4  # nothing trained, ranked together
    assert (f"study {folder.name} scored its trials another way (aggregate: mean -> iqm; seeds_per_trial: 1 -> 2)"
            in scored.stdout + scored.stderr) and "Traceback" not in scored.stdout + scored.stderr


def test_a_study_is_named_by_how_it_scores_trials_too():
    """The generated study name hashes the search space, the fixed values and the objective, aggregate and seeds
    per trial: a sweep scored another way starts its own study; the default scoring keeps earlier studies' names."""
    from rlexp.sweep.space import sweep_hash

    space, fixed = {"agent.lr": FloatDistribution(1e-4, 1e-2, log=True)}, {"run.max_steps": "64"}
    default = {"objective": "final_eval", "aggregate": "mean", "seeds_per_trial": 1}
    assert sweep_hash(space, fixed, default) == sweep_hash(space, fixed)
    names = {sweep_hash(space, fixed, {**default, **change}) for change in (
        {}, {"objective": "auc"}, {"aggregate": "iqm"}, {"seeds_per_trial": 3},
        {"objective": "mean_last_evals", "last_evals": 3}, {"objective": "mean_last_evals", "last_evals": 5})}
    assert len(names) == 6


@pytest.mark.hydra14
def test_pruned_and_failed_trials_are_recorded_and_the_sweep_goes_on(tmp_path):
    pruned = rlexp(tmp_path, "-m", "run.max_steps=12000", "run.eval_episodes=2", "agent.lr=3e-3,1e-7",
                   "hydra.sweeper.n_jobs=1", "hydra.sweeper.warmup_trials=1", "hydra.sweeper.study_name=p")
    assert pruned.returncode == 0, pruned.stdout[-3000:] + pruned.stderr[-3000:]
    states = {t.params["agent.lr"]: t.state for t in trials(tmp_path, "p")}
    assert states == {3e-3: TrialState.COMPLETE, 1e-7: TrialState.PRUNED}
    assert "PRUNED" in pruned.stdout and "pruned at step" in pruned.stdout
    assert (tmp_path / "multirun" / "p" / "intermediate_values.png").exists()

    failed = rlexp(tmp_path, "-m", *TINY, "agent.gamma=0.99,1.5", "hydra.sweeper.study_name=f")
    assert failed.returncode == 0, failed.stdout[-3000:] + failed.stderr[-3000:]
    by_gamma = {t.params["agent.gamma"]: t for t in trials(tmp_path, "f")}
    assert by_gamma[0.99].state == TrialState.COMPLETE and by_gamma[1.5].state == TrialState.FAIL
    assert "gamma" in by_gamma[1.5].user_attrs["error"]
    (line,) = [x for x in failed.stdout.splitlines() if x.startswith("trial") and "FAIL" in x]
    assert "agent.gamma=1.5" in line and "gamma" in line.split("|", 1)[1]


def test_killed_sweep_is_continued_and_its_running_trial_marked_failed(tmp_path):
    args = ["-m", "run.target_reward=null", "run.eval_episodes=2", "agent.lr=1e-3,3e-3", "hydra.sweeper.n_jobs=1",
            "hydra.sweeper.heartbeat_interval=1", "hydra.sweeper.grace_period=2", "hydra.sweeper.study_name=k"]
    proc = subprocess.Popen([sys.executable, "-m", "rlexp", *args, "run.max_steps=1e6"], cwd=tmp_path, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    deadline = time.time() + 300  # ~40 s alone; it once took over 120 s in CI
    states = "no study yet"
    while time.time() < deadline:
        try:
            found = trials(tmp_path, "k")
            states = [(t.state.name, len(t.intermediate_values)) for t in found]
            if any(t.state == TrialState.RUNNING and t.intermediate_values for t in found):
                break
        except Exception:  # noqa: BLE001 - the study does not exist yet
            pass
        time.sleep(1)
    else:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(f"the first trial never reported (trials: {states})")
    os.killpg(proc.pid, signal.SIGKILL)  # the sweeper and its trial, at once
    proc.wait()
    time.sleep(4)  # past the grace period
    again = rlexp(tmp_path, *args, "run.max_steps=2048")
    assert "marked 1 trial(s) left running by a stopped sweep FAIL" in again.stdout, again.stdout[-3000:]
    states = sorted(t.state.name for t in trials(tmp_path, "k"))
    assert states == ["COMPLETE", "COMPLETE", "FAIL"]  # the grid's two points, plus the killed trial


def test_slurm_launcher_composes_and_writes_its_job_script(tmp_path):
    """Fake sbatch/srun/sinfo capture the job script the launcher submits (on any machine; the test after it runs
    a real cluster)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "sbatch").write_text(f"#!/bin/sh\ncp \"$1\" {tmp_path}/submitted.sh\necho 'Submitted batch job 4242'\n")
    (bin_dir / "sinfo").write_text("#!/bin/sh\necho 'gpu 8 64000'\n")  # partition, CPUs and MB of its nodes
    for tool in ("srun", "sbatch", "sinfo"):
        (bin_dir / tool).chmod(0o755 | stat.S_IEXEC)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.Popen([sys.executable, "-m", "rlexp", "-m", "hydra/launcher=rlexp_slurm",
                             "hydra.launcher.partition=gpu", "hydra.launcher.gpus_per_task=1", "seed=0"],
                            cwd=tmp_path, env=env, start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    script = tmp_path / "submitted.sh"
    deadline = time.time() + 60
    while not script.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGKILL)
    output = proc.communicate()[0]
    assert script.exists(), output[-3000:]
    text = script.read_text()
    for line in ("#SBATCH --partition=gpu", "#SBATCH --time=1440", "#SBATCH --cpus-per-task=4",
                 "#SBATCH --gpus-per-task=1", "#SBATCH --mem=16GB"):
        assert line in text, text
    assert "submitit" in text and str(study_folder(tmp_path)) in text


def test_seeds_per_trial_are_aggregated_and_the_best_confirmed_on_fresh_seeds(tmp_path):
    result = rlexp(tmp_path, "-m", *TINY, "run.max_steps=1024", "agent.lr=tag(log,interval(1e-4,1e-2))",
                   "hydra.sweeper.n_trials=2", "hydra.sweeper.seeds_per_trial=2", "hydra.sweeper.confirm={top_k:2,seeds:2}",
                   "seed=5")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    folder = study_folder(tmp_path)
    done = trials(tmp_path)
    for trial in done:
        assert trial.value == pytest.approx(sum(trial.user_attrs["seed_values"]) / 2)
        seeds = sorted(yaml.safe_load((d / ".hydra" / "config.yaml").read_text())["seed"]
                       for d in (folder / f"trial_{trial.number}").glob("seed_*"))
        assert seeds == [5, 6]  # the same seeds for every configuration
    study = optuna.load_study(study_name=folder.name, storage=f"sqlite:///{folder}/optuna.db")
    confirmed = {t.number: study.user_attrs[f"confirm_{t.number}"] for t in done}
    assert all(sorted(c) == ["10005", "10006"] for c in confirmed.values())  # fresh seeds, none the search used
    table = pd.read_csv(folder / "confirmation.csv")
    assert sorted(table["trial"]) == [0, 1] and list(table["confirmed_rank"]) == [1, 2]
    for _, row in table.iterrows():
        assert row["confirmed_mean"] == pytest.approx(np.mean(list(confirmed[row["trial"]].values())))
        assert row["ci_low"] <= row["confirmed_mean"] <= row["ci_high"]
    winner = int(table.iloc[0]["trial"])
    assert table["confirmed_mean"].iloc[0] >= table["confirmed_mean"].iloc[1]
    results = yaml.safe_load((folder / "optimization_results.yaml").read_text())
    assert results["best_trial"] == winner and results["seeds_per_trial"] == 2
    best = (folder / "tuned" / "best.yaml").read_text()
    assert f"trial {winner}, confirmed mean" in best and f"lr: {done[winner].params['agent.lr']}" in best
    assert "confirmed best: trial" in result.stdout
    logs = folder / ".launcher"  # each job's console output in its own file: the search's, the confirmation's
    confirmations = [f"trial_{t}_seed_{s}" for t in (0, 1) for s in (10005, 10006)]
    assert sorted(p.stem for p in logs.glob("*.out")) == sorted([f"job_{n}" for n in range(4)]
                                                                + [f"confirm_{name}" for name in confirmations])
    assert all("confirm" not in (logs / f"job_{n}.out").read_text() for n in range(4))
    for name in confirmations:
        assert f"-> {folder}/confirm/{name}\n" in (logs / f"confirm_{name}.out").read_text()


def test_a_trials_seeds_train_as_one_population_in_one_job_and_each_seed_is_scored(tmp_path):
    """hydra.sweeper.population=true: a trial's 3 seeds are one process (run.seeds), whose members' final evaluations
    are the seeds' values; the confirmation trains the winner's fresh seeds as one population too."""
    result = rlexp(tmp_path, "-m", *TINY, "run.max_steps=1024", "agent.lr=tag(log,interval(1e-4,1e-2))",
                   "hydra.sweeper.n_trials=2", "hydra.sweeper.seeds_per_trial=3", "hydra.sweeper.population=true",
                   "hydra.sweeper.confirm={top_k:1,seeds:2}", "seed=5")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    folder = study_folder(tmp_path)
    done = trials(tmp_path)
    assert sorted(p.name for p in (folder / ".launcher").glob("job_*.out")) == ["job_0.out", "job_3.out"]
    for trial in done:
        log = (folder / ".launcher" / f"job_{3 * trial.number}.out").read_text()
        assert "a population of 3 members (seeds 5, 6, 7) in one process" in log
        finals = []
        for seed in (5, 6, 7):
            member = folder / f"trial_{trial.number}" / f"seed_{seed}"
            assert yaml.safe_load((member / ".hydra" / "config.yaml").read_text())["seed"] == seed
            finals.append(json.loads((member / "summary.json").read_text())["final_eval"]["mean_return"])
        assert trial.user_attrs["seed_values"] == pytest.approx(finals)
        assert trial.value == pytest.approx(sum(finals) / 3)
        assert trial.user_attrs["env_steps"] == 3 * 1024
    best = yaml.safe_load((folder / "optimization_results.yaml").read_text())["best_trial"]
    confirmed = optuna.load_study(study_name=folder.name, storage=f"sqlite:///{folder}/optuna.db").user_attrs
    assert sorted(confirmed[f"confirm_{best}"]) == ["10005", "10006"]
    assert sorted(p.name for p in (folder / "confirm" / f"trial_{best}").glob("seed_*")) == ["seed_10005", "seed_10006"]
    assert "run.seeds" not in (folder / "tuned" / "best.yaml").read_text()


def test_trials_per_job_packs_trials_into_one_population_and_each_trial_gets_its_own_value(tmp_path):
    """hydra.sweeper.trials_per_job=3 over 5 trials: two jobs (trials 0-2, then 3-4), each one process training its
    trials as members with their own sampled lr and gamma; each trial's value is its member's final evaluation, its
    folder an ordinary run dir with its own values, and its steps its member's alone."""
    result = rlexp(tmp_path, "-m", *TINY, "run.max_steps=1024", "agent.lr=tag(log,interval(1e-4,1e-2))",
                   "agent.gamma=interval(0.9,0.999)", "hydra.sweeper.n_trials=5", "hydra.sweeper.trials_per_job=3",
                   "hydra.sweeper.n_jobs=1", "seed=2")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    folder = study_folder(tmp_path)
    assert sorted(p.name for p in (folder / ".launcher").glob("job_*.out")) == ["job_0.out", "job_3.out"]
    assert "a population of 3 members (seeds 2, 2, 2) in one process" in (folder / ".launcher" / "job_0.out").read_text()
    assert "a population of 2 members (seeds 2, 2) in one process" in (folder / ".launcher" / "job_3.out").read_text()
    done = trials(tmp_path)
    assert [t.state for t in done] == [TrialState.COMPLETE] * 5
    assert len({t.params["agent.lr"] for t in done}) == 5
    for trial in done:
        run = folder / f"trial_{trial.number}"
        config = yaml.safe_load((run / ".hydra" / "config.yaml").read_text())
        assert (config["seed"], config["run"]["seeds"], config["run"]["members"]) == (2, None, None)
        assert config["agent"]["lr"] == pytest.approx(trial.params["agent.lr"], rel=1e-12)
        assert config["agent"]["gamma"] == pytest.approx(trial.params["agent.gamma"], rel=1e-12)
        summary = json.loads((run / "summary.json").read_text())
        assert trial.value == summary["final_eval"]["mean_return"]
        assert trial.user_attrs["env_steps"] == summary["steps"] == 1024
    assert len({json.loads((folder / f"trial_{n}" / "summary.json").read_text())["episodes"] for n in range(5)}) > 1


def test_trials_per_job_packs_only_consecutive_trials_whose_shapes_match(tmp_path):
    """A searched n_steps changes shapes: a job packs trials claimed one after another with the same n_steps, and a
    trial whose n_steps differs starts the next job (alone where its neighbours differ too)."""
    result = rlexp(tmp_path, "-m", *TINY, "run.max_steps=512", "run.eval_episodes=1",
                   "agent.lr=tag(log,interval(1e-4,1e-2))", "agent.n_steps=choice(16,32)", "hydra.sweeper.n_trials=6",
                   "hydra.sweeper.trials_per_job=6", "hydra.sweeper.n_jobs=1", "hydra/sweeper/sampler=random")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    folder = study_folder(tmp_path)
    done = sorted(trials(tmp_path), key=lambda t: t.number)
    assert [t.state for t in done] == [TrialState.COMPLETE] * 6
    runs = [[done[0]]]  # trials claimed one after another with the same n_steps
    for trial in done[1:]:
        if trial.params["agent.n_steps"] == runs[-1][-1].params["agent.n_steps"]:
            runs[-1].append(trial)
        else:
            runs.append([trial])
    assert 1 < len(runs) < 6, [t.params for t in done]  # (the random sampler's draws for this study name)
    assert sorted(p.name for p in (folder / ".launcher").glob("job_*.out")) == sorted(
        f"job_{run[0].number}.out" for run in runs)
    for run in runs:
        log = (folder / ".launcher" / f"job_{run[0].number}.out").read_text()
        assert ("a population of" in log) == (len(run) > 1)
        for trial in run:
            config = yaml.safe_load((folder / f"trial_{trial.number}" / ".hydra" / "config.yaml").read_text())
            assert config["agent"]["n_steps"] == trial.params["agent.n_steps"]


def test_trials_per_job_where_trials_cant_be_packed_is_refused_in_one_line(tmp_path):
    for args, says in ((["agent.n_steps=choice(16,32)"], "searches none of what packed trials may differ in"),
                       (["agent=naf", "env=pendulum", "agent.lr=interval(1e-4,1e-2)"], "NAF does not train as a")):
        result = rlexp(tmp_path, "-m", *args, "hydra.sweeper.trials_per_job=4")
        assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert f"hydra.sweeper.trials_per_job=4: " in result.stderr and says in result.stderr, result.stderr
    assert not (tmp_path / "multirun").exists()


def test_population_true_where_a_trial_cant_train_as_one_is_refused_in_one_line(tmp_path):
    result = rlexp(tmp_path, "-m", "agent=naf", "env=pendulum", "agent.lr=interval(1e-4,1e-2)",
                   "hydra.sweeper.seeds_per_trial=2", "hydra.sweeper.population=true")
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "hydra.sweeper.population=true: NAF does not train as a population; drop it" in result.stderr
    assert not (tmp_path / "multirun").exists()


def test_a_seed_list_next_to_a_sampled_parameter_is_refused(tmp_path):
    result = rlexp(tmp_path, "-m", "seed=0,1,2", "agent.lr=interval(1e-4,1e-2)")
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "hydra.sweeper.seeds_per_trial=3" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "multirun").exists()
    missing = rlexp(tmp_path, "-m", "hydra.sweeper.objective=mean_last_evals", "agent.lr=interval(1e-4,1e-2)")
    assert missing.returncode == 2 and "run.eval_interval=" in missing.stderr, missing.stderr


def test_auc_objective_and_pruning_on_the_periodic_evaluation(tmp_path):
    from rlexp.sweep import curve_objectives

    result = rlexp(tmp_path, "-m", *TINY, "run.eval_interval=1024", "hydra.sweeper.objective=auc",
                   "agent.lr=1e-3,3e-3", "hydra.sweeper.study_name=auc")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for trial in trials(tmp_path, "auc"):
        evaluations = pd.read_parquet(tmp_path / "multirun" / "auc" / f"trial_{trial.number}" / "evaluations.parquet")
        assert list(evaluations["step"]) == [1024, 2048]
        points = list(zip(evaluations["step"], evaluations["mean_return"]))
        assert trial.value == pytest.approx(curve_objectives(points, 3)["auc"])
        assert trial.intermediate_values == pytest.approx(dict(points))  # the pruner saw the evaluations


def test_two_objectives_give_a_pareto_front_in_a_journal_file_that_optuna_dashboard_reads(tmp_path):
    import io
    import json
    from wsgiref.util import setup_testing_defaults

    import optuna_dashboard
    from optuna.storages.journal import JournalFileBackend, JournalStorage

    journal = tmp_path / "studies" / "mo.log"
    result = rlexp(tmp_path, "-m", *TINY, "run.max_steps=1024", "agent.lr=tag(log,interval(1e-4,1e-2))",
                   "agent.ppo_epochs=choice(1,8)", "hydra.sweeper.n_trials=4", "hydra/sweeper/sampler=nsgaii",
                   "hydra.sweeper.directions=[maximize,minimize]", f"hydra.sweeper.storage=journal:///{journal}",
                   "hydra.sweeper.study_name=mo")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    storage = JournalStorage(JournalFileBackend(str(journal)))
    done = optuna.load_study(study_name="mo", storage=storage).get_trials()
    assert [t.state for t in done] == [TrialState.COMPLETE] * 4
    assert all(t.values[1] == pytest.approx(t.user_attrs["train_seconds"], abs=1e-3) for t in done)

    def dominated(t):
        return any(u.values[0] >= t.values[0] and u.values[1] <= t.values[1] and u.values != t.values for u in done)
    front = pd.read_csv(tmp_path / "multirun" / "mo" / "pareto_front.csv")
    assert sorted(front["trial"]) == sorted(t.number for t in done if not dominated(t))
    assert (tmp_path / "multirun" / "mo" / "pareto_front.png").exists()
    app = optuna_dashboard.wsgi(storage)  # what `optuna-dashboard journal.log` serves
    environ = {"PATH_INFO": "/api/studies", "wsgi.errors": io.StringIO()}
    setup_testing_defaults(environ)
    status = []
    body = json.loads(b"".join(app(environ, lambda s, headers, exc_info=None: status.append(s))))
    assert status == ["200 OK"], environ["wsgi.errors"].getvalue()
    (study,) = body["study_summaries"]
    assert study["study_name"] == "mo" and study["directions"] == ["maximize", "minimize"]


@pytest.mark.parametrize("backend", ["journal", "postgresql"])
@pytest.mark.hydra14
def test_two_workers_on_one_storage_fill_the_study_to_exactly_n_trials(tmp_path, backend):
    """The same command started twice against one storage (a journal file, PostgreSQL): the workers pull trials
    until the study holds n_trials (5 in all, not 5 each), each trial once, numbered 0-4."""
    if backend == "postgresql" and not os.environ.get("RLEXP_TEST_POSTGRES"):
        pytest.skip("needs RLEXP_TEST_POSTGRES (set by .ci/run)")
    url = os.environ["RLEXP_TEST_POSTGRES"] if backend == "postgresql" else f"journal:///{tmp_path}/shared/study.log"
    study = f"w_{os.getpid()}_{int(time.time())}"
    args = [sys.executable, "-m", "rlexp", "-m", *TINY, "run.max_steps=1024", "agent.lr=tag(log,interval(1e-4,1e-2))",
            "hydra.sweeper.n_trials=5", "hydra.sweeper.n_jobs=1", f"hydra.sweeper.storage={url}",
            f"hydra.sweeper.study_name={study}", "hydra.sweeper.pruner=none"]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    procs = [subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for _ in range(2)]
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], "\n".join(o[-2000:] for o in outputs)
    storage = make_storage(url) if backend == "journal" else url
    done = optuna.load_study(study_name=study, storage=storage).get_trials()
    assert sorted(t.number for t in done) == [0, 1, 2, 3, 4] and all(t.state == TrialState.COMPLETE for t in done)
    assert len({t.params["agent.lr"] for t in done}) == 5
    ran = [sum(line.startswith("trial ") for line in o.splitlines()) for o in outputs]
    assert sum(ran) == 5 and min(ran) >= 1, ran  # both workers took trials
    # each worker's final report: the study's best, or (finished first) the trials the other is still training
    best = f"{max(t.value for t in done):.4g}"
    reports = [line for o in outputs for line in o.splitlines() if line.startswith("best: trial ")]
    assert len(reports) == 2 and any(f", objective {best} (" in r for r in reports), (best, reports)
    assert all(f", objective {best} (" in r or "still running on another worker" in r for r in reports), reports
    assert all("FAIL" not in o and "rror" not in o for o in outputs)


@pytest.mark.parametrize("preset,agent", [("ppo", "ppo"), ("dqn", "dqn")])
def test_sweep_presets_compose_and_parse(preset, agent):
    from hydra import compose, initialize_config_module

    with initialize_config_module(config_module="rlexp.conf", version_base="1.3"):
        c = compose(config_name="config", overrides=[f"+sweep={preset}", f"agent={agent}", "env=cartpole"],
                    return_hydra_config=True)
    assert c.run.max_steps == 5e4 and c.hydra.sweeper.n_trials == 40
    params = [f"{k}={v}" for k, v in c.hydra.sweeper.params.items()]
    dists, _, grid = search_space(params)
    assert len(dists) == {"ppo": 13, "dqn": 10}[preset] and not grid
    for key in c.hydra.sweeper.params:  # every searched key exists in the composed config (a group: its options)
        if "." not in key:
            assert set(dists[key].choices) <= {"mlp", "mlp_large"}, key
            continue
        section, name = key.split(".")
        assert name in c[section], key


# ----- settings and the confirmation round without training ----------------------------------------------
@pytest.mark.parametrize("override,message", [
    ("hydra.sweeper.n_trials=0", "hydra.sweeper.n_trials=0: use a whole number of 1 or more"),
    ("hydra.sweeper.n_trials=abc", "hydra.sweeper.n_trials=abc: use a whole number of 1 or more"),
    ("hydra.sweeper.seeds_per_trial=0", "hydra.sweeper.seeds_per_trial=0: use a whole number of 1 or more"),
    ("hydra.sweeper.n_jobs=0", "hydra.sweeper.n_jobs=0: use a whole number of 1 or more"),
    ("hydra.sweeper.warmup_steps=-5", "hydra.sweeper.warmup_steps=-5: use a whole number of 0 or more"),
    ("hydra.sweeper.heartbeat_interval=0", "hydra.sweeper.heartbeat_interval=0: use a whole number of 1 or more"),
    ("hydra.sweeper.confirm=3", "hydra.sweeper.confirm=3: use {top_k: 3, seeds: 5}"),
    ("hydra.sweeper.max_failure_rate=2", "hydra.sweeper.max_failure_rate=2: use a fraction from 0 to 1"),
    ("hydra.sweeper.pruner=foo", "hydra.sweeper.pruner=foo is unknown; use median | none"),
    ("hydra.sweeper.params=5", "hydra.sweeper.params=5: use a mapping of keys to sweeps"),
    ("+hydra.sweeper.sampler.foo=1", "hydra.sweeper.sampler.foo is not an argument of optuna.samplers.TPESampler; "
                                     "use one of consider_prior, "),
    ("hydra.launcher.start_method=fork", "hydra.launcher.start_method=fork: use forkserver or spawn"),
    ("hydra.sweeper.max_env_steps=100", "hydra.sweeper.max_env_steps=100: one trial trains up to 1,000 env steps "
     "(run.max_steps x seeds_per_trial); raise it or shorten the trials"),
])
def test_a_wrong_sweeper_setting_is_one_line_before_anything_is_written(tmp_path, override, message):
    assert_refused(tmp_path, ["agent.lr=1e-3,3e-3", "run.max_steps=1000", override], message)


@pytest.mark.parametrize("overrides,message", [
    (["agent.lr=1e-3,3e-3", "run.eval_episodes=0"], "run.eval_episodes=0: hydra.sweeper.objective=final_eval scores "
     "each trial by its evaluation episodes; set run.eval_episodes to 1 or more (e.g. run.eval_episodes=10)"),
    (["agent.lr=1e-3,3e-3", "run.eval_episodes=0", "run.eval_interval=64", "hydra.sweeper.objective=auc"],
     "run.eval_episodes=0: hydra.sweeper.objective=auc scores each trial by its evaluation episodes"),
    (["agent=ppo,ppp"], "error: agent=ppp: Could not find 'agent/ppp' (no such preset); did you mean agent=ppo? "
     "agent presets: a2c, "),
    (["agent=dqn,ppo", "agent.n_steps=64"], "error: agent=dqn: agent.n_steps: no such setting"),
    (["agent.nosuchkey=choice(1,2)", "agent.lr=interval(1e-4,1e-3)"], "error: agent.nosuchkey: no such setting; "
     "agent's keys are gamma, lr"),
])
def test_a_sweep_with_trials_bound_to_fail_is_one_line_before_anything_is_written(tmp_path, overrides, message):
    """No evaluation episodes to score a trial by, an option of a swept group that its trials can't compose, or a
    searched key the config doesn't have."""
    assert_refused(tmp_path, overrides, message)


def test_hydras_basic_sweeper_given_an_interval_is_one_line(tmp_path):
    """hydra/sweeper=basic runs a grid (comma lists, choice, range); Optuna's interval is refused in one line that
    names the override and the fix, not with Hydra's traceback."""
    assert_refused(tmp_path, ["hydra/sweeper=basic", "agent.lr=tag(log,interval(1e-5,1e-2))", "seed=0,1"],
                   "error: agent.lr=tag(log,interval(1e-5,1e-2)): hydra/sweeper=basic runs a grid of the values "
                   "listed and can't sample an interval; drop hydra/sweeper=basic")


def assert_refused(cwd, overrides, message):
    result = rlexp(cwd, "-m", *overrides, timeout=120)
    assert result.returncode == 2 and result.stdout == "", result.stdout + result.stderr
    assert result.stderr.strip().splitlines() == [result.stderr.strip()] and message in result.stderr, result.stderr
    assert list(cwd.iterdir()) == []  # no multirun/<study>, no optuna.db


SETTINGS = dict(sampler={"_target_": "optuna.samplers.RandomSampler", "seed": 0}, direction="maximize",
                directions=None, objective="final_eval", last_evals=3, seeds_per_trial=1, aggregate="mean",
                confirm=None, storage=None, study_name="s", n_trials=2, n_jobs=2, max_failure_rate=0.5, params=None,
                pruner="median", warmup_trials=5, warmup_steps=0, reports=10, heartbeat_interval=10, grace_period=60,
                baseline=None, max_env_steps=None)


@pytest.mark.parametrize("key,value,message", [
    ("n_trials", -3, "n_trials=-3: use a whole number of 1 or more"),
    ("n_trials", 2.5, "n_trials=2.5: use a whole number of 1 or more"),
    ("seeds_per_trial", -1, "seeds_per_trial=-1: use a whole number of 1 or more"),
    ("last_evals", 0, "last_evals=0: use a whole number of 1 or more"),
    ("reports", 0, "reports=0: use a whole number of 1 or more"),
    ("warmup_trials", -1, "warmup_trials=-1: use a whole number of 0 or more"),
    ("grace_period", 5, "grace_period=5: use more than hydra.sweeper.heartbeat_interval (10), e.g. 60"),
    ("aggregate", "median", "aggregate=median is unknown; use mean | iqm"),
    ("objective", "foo", "objective=foo is unknown; use final_eval | mean_last_evals | auc"),
    ("direction", "up", "direction=up is unknown; use maximize | minimize"),
    ("directions", ["maximize", "maximize"], "directions=['maximize', 'maximize']: use [maximize,minimize]"),
    ("confirm", {"top_k": -1}, "confirm.top_k=-1: use a whole number of 1 or more"),
    ("confirm", {"top": 2}, "confirm={'top': 2}: use {top_k: 3, seeds: 5}"),
    ("max_failure_rate", "abc", "max_failure_rate=abc: use a fraction from 0 to 1"),
    ("storage", "", "storage=: use sqlite:///path/optuna.db"),
    ("study_name", "a/b", "study_name=a/b: use a name without /"),
    ("study_name", "", "study_name=: use a name without /"),
    ("sampler", "foo", "sampler=foo: pick one with hydra/sweeper/sampler=tpe|random|grid|cmaes|nsgaii|nsgaiii|gp|qmc"),
    ("sampler", {"_target_": "optuna.samplers.TPESampler", "seed": "abc"}, "sampler.seed=abc: use a whole number"),
    ("sampler", {"_target_": "optuna.samplers.TPESampler", "n_startup_trials": -1}, "n_startup_trials=-1: use a"),
    ("sampler", {"_target_": "optuna.samplers.TPESampler", "multivariate": "yes"}, "multivariate=yes: use true or"),
    ("sampler", {"_target_": "optuna.samplers.NSGAIISampler", "population_size": 1}, "population_size=1: use a whole"),
    ("sampler", {"_target_": "optuna.samplers.QMCSampler", "qmc_type": "xx"}, "ValueError: The `qmc_type='xx'`"),
    ("baseline", 5, "baseline=5: use a mapping of searched keys to the values the first trial trains"),
    ("enqueue", {"agent.lr": 1e-3}, "enqueue={'agent.lr': 0.001}: use a list of mappings of searched keys to"),
    ("enqueue", [5], "enqueue=[5]: use a list of mappings of searched keys to values, one a trial"),
    ("max_env_steps", 0, "max_env_steps=0: use a whole number of 1 or more"),
    ("max_env_steps", "lots", "max_env_steps=lots: use a whole number of 1 or more"),
    ("bogus", 1, "hydra.sweeper.bogus is not a setting of rlexp's sweeper; use one of aggregate, baseline, confirm,"),
])
@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
def test_every_sweeper_setting_is_checked(key, value, message):
    from rlexp.sweep import check_settings

    with pytest.raises(SweepError) as raised:
        check_settings({**SETTINGS, key: value})
    text = str(raised.value)
    assert text.startswith("hydra.sweeper.") and message in text and len(text.splitlines()) == 1, text


def test_settings_are_normalised():
    from rlexp.sweep import check_settings

    s = check_settings({**SETTINGS, "warmup_steps": 1e4, "pruner": None, "confirm": {"seeds": 2}})
    assert s["warmup_steps"] == 10000 and isinstance(s["warmup_steps"], int) and s["pruner"] == "none"
    assert s["confirm"] == {"top_k": 3, "seeds": 2} and isinstance(s["sampler"], optuna.samplers.RandomSampler)


class ConfirmationLauncher:
    """Stands in for the launcher: each confirmation run's objective from a table, and the job numbers asked for."""

    def __init__(self, values: dict[int, list[float]]) -> None:
        self.values, self.first_jobs = values, []

    def launch(self, job_overrides, initial_job_idx):
        from hydra.core.utils import JobReturn, JobStatus

        self.first_jobs.append(initial_job_idx)
        returns = []
        for overrides in job_overrides:
            subdir = next(o.split("=", 1)[1] for o in overrides if o.startswith("hydra.sweep.subdir="))
            _, trial, _, seed = subdir.split("/")[1].split("_")  # confirm/trial_<t>_seed_<s>
            ret = JobReturn()
            ret.status = JobStatus.COMPLETED
            ret.return_value = {"final_eval": self.values[int(trial)][int(seed) - 10000]}
            returns.append(ret)
        return returns


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
def test_confirmation_ranks_by_the_aggregate_and_numbers_its_jobs_after_the_search(tmp_path):
    """Trial 0 confirms at 0, 10, 10, 100 (mean 30, IQM 10), trial 1 at 20 on every seed: the IQM ranks trial 1
    first. The study's three search trials had jobs 0-2, so the eight confirmation jobs are 3-10, each launched
    alone as a slot frees."""
    from omegaconf import OmegaConf

    from rlexp.sweep import OptunaSweep

    config = OmegaConf.create({"seed": 0, "hydra": {"sweep": {"dir": str(tmp_path)}, "job": {"config_name": "config"},
                                                   "runtime": {"choices": {"agent": "ppo", "env": "cartpole"}}}})
    launcher = ConfirmationLauncher({0: [0.0, 10.0, 10.0, 100.0], 1: [20.0] * 4})
    sweep = OptunaSweep({**SETTINGS, "aggregate": "iqm", "confirm": {"top_k": 2, "seeds": 4}}, config, launcher)
    space = {"agent.lr": FloatDistribution(1e-4, 1e-2, log=True)}
    study = sweep.open_study(space)
    sweep.fixed = {}
    for lr, value in ((1e-3, 30.0), (2e-3, 25.0), (3e-3, 5.0)):
        study.add_trial(optuna.trial.create_trial(params={"agent.lr": lr}, distributions=space, value=value))
    sweep.run_confirmation(study)
    assert sorted(launcher.first_jobs) == list(range(3, 11))
    table = sweep.confirmation_table(study)
    assert [(r["trial"], r["confirmed_iqm"], r["confirmed_rank"]) for r in table] == [(1, 20.0, 1), (0, 10.0, 2)]
    sweep.report(study)
    results = yaml.safe_load((tmp_path / "optimization_results.yaml").read_text())
    assert results["best_trial"] == 1 and results["best_value"] == 20.0 and results["search_best_trial"] == 0
    assert list(pd.read_csv(tmp_path / "confirmation.csv")["trial"]) == [1, 0]


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
def test_report_files_replace_the_old_ones_whole_once_on_disk(tmp_path, monkeypatch):
    """Each report file is a temporary file next to it, flushed to disk, then renamed over it: a sweep killed
    mid-report (or a power cut) leaves the previous file, never a partial one, and no temporary file is left."""
    from pathlib import Path

    from omegaconf import OmegaConf

    from rlexp.sweep import OptunaSweep

    config = OmegaConf.create({"seed": 0, "hydra": {"sweep": {"dir": str(tmp_path)}, "job": {"config_name": "config"},
                                                   "runtime": {"choices": {"agent": "ppo", "env": "cartpole"}}}})
    sweep = OptunaSweep({**SETTINGS, "confirm": {"top_k": 1, "seeds": 1}}, config, ConfirmationLauncher({0: [7.0]}))
    space = {"agent.lr": FloatDistribution(1e-4, 1e-2, log=True)}
    study = sweep.open_study(space)
    sweep.fixed = {}
    for lr, value in ((1e-3, 30.0), (2e-3, 25.0)):
        study.add_trial(optuna.trial.create_trial(params={"agent.lr": lr}, distributions=space, value=value))
    (tmp_path / "trial_0" / ".hydra").mkdir(parents=True)
    (tmp_path / "trial_0" / ".hydra" / "config.yaml").write_text("agent: {lr: 0.001}\nrun: {max_steps: 64}\n")
    sweep.run_confirmation(study)
    synced, renamed = set(), []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        synced.add(os.path.realpath(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    def replace(source, target):
        source, target = os.path.realpath(source), os.path.realpath(target)
        renamed.append((Path(target).relative_to(tmp_path.resolve()).as_posix(), source in synced,
                        Path(source).parent == Path(target).parent))
        real_replace(source, target)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    sweep.report(study)
    report = {"optimization_results.yaml", "trials.csv", "confirmation.csv", "tuned/best.yaml",
              "optimization_history.png"}
    assert report <= {name for name, _, _ in renamed}
    assert [(name, True, True) for name, _, _ in renamed] == renamed  # each flushed, each from its own folder
    assert yaml.safe_load((tmp_path / "tuned" / "best.yaml").read_text()) == {"agent": {"lr": 0.001},
                                                                             "run": {"max_steps": 64}}
    assert [p.name for p in tmp_path.rglob("*.tmp")] == []


def test_an_own_preset_passes_the_check_of_a_swept_group_and_a_typo_is_refused(tmp_path):
    (tmp_path / "myconf" / "env").mkdir(parents=True)
    (tmp_path / "myconf" / "env" / "corridor.yaml").write_text("defaults: [cartpole]\n")
    result = rlexp(tmp_path, "-m", "--config-dir", "myconf", "env=corridor,cartpol", timeout=120)
    assert result.returncode == 2 and result.stdout == "", result.stdout + result.stderr
    assert result.stderr.startswith("error: env=cartpol: Could not find 'env/cartpol' (no such preset); did you mean "
                                    "env=cartpole"), result.stderr  # corridor, the first option, composed
    assert "corridor" in result.stderr and [p.name for p in tmp_path.iterdir()] == ["myconf"]


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
def test_the_commands_and_preset_of_a_swept_env_name_the_best_trials_env(tmp_path):
    from omegaconf import OmegaConf

    from rlexp.sweep import OptunaSweep

    config = OmegaConf.create({"seed": 0, "hydra": {"sweep": {"dir": str(tmp_path)}, "job": {"config_name": "config"},
                                                   "runtime": {"choices": {"agent": "ppo", "env": "cartpole"}}}})
    sweep = OptunaSweep(SETTINGS, config, launcher=None)
    sweep.fixed = {"run.max_steps": "64"}
    best = optuna.trial.create_trial(params={"env": "pendulum", "agent.lr": 0.001}, value=1.0, distributions={
        "env": CategoricalDistribution(["cartpole", "pendulum"]), "agent.lr": FloatDistribution(1e-4, 1e-2)})
    assert sweep.run_command(best) == "python -m rlexp agent=ppo env=pendulum run.max_steps=64 agent.lr=0.001"
    sweep.fixed = {"run.max_steps": 2e4, "agent.gamma": 1.0}  # `run.max_steps=2e4` as Hydra parses it: 20000.0
    assert sweep.run_command(best) == ("python -m rlexp agent=ppo env=pendulum run.max_steps=20000 agent.gamma=1 "
                                       "agent.lr=0.001")
    sweep.fixed = {"run.max_steps": "64"}
    assert sweep.preset_command(best) == f"python -m rlexp --config-dir {tmp_path} agent=ppo env=pendulum tuned=best"
    folder = tmp_path / f"trial_{best.number}" / ".hydra"  # a trial made outside a study: number -1
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text("agent: {lr: 0.001}\n")
    header = sweep.write_best_preset(best, "s", 1.0).read_text()
    assert "as tuned/ppo_pendulum.yaml\n" in header and "agent=ppo env=pendulum tuned=best\n" in header


def test_a_baseline_splits_into_values_inside_the_search_space_and_values_outside_it():
    """Inside: an option of a choice, a value in an interval (log or not, bounds included); outside: anything
    else, which the baseline trial trains with as fixed values; keys that are not searched are dropped."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution

    from rlexp.sweep import baseline_params

    space = {"agent.n_steps": CategoricalDistribution([8, 16, 32]), "agent.lr": FloatDistribution(1e-5, 1e-2, log=True),
             "agent.entropy_coef": FloatDistribution(1e-8, 1e-1, log=True), "agent.lam": FloatDistribution(0.8, 1.0),
             "agent.clip_norm": CategoricalDistribution([0.1, 0.2])}
    baseline = {"agent.n_steps": 5, "agent.lr": 7e-4, "agent.entropy_coef": 0.0, "agent.lam": 1.0,
                "agent.clip_norm": 0.2, "agent.gamma": 0.99}
    inside, outside = baseline_params(baseline, space)
    assert inside == {"agent.lr": 7e-4, "agent.lam": 1.0, "agent.clip_norm": 0.2}
    assert outside == {"agent.n_steps": 5, "agent.entropy_coef": 0.0}


def test_each_study_samples_its_own_values_and_the_same_study_the_same_again(tmp_path):
    """The sampler is reseeded per trial from the study's name, the seed and the trial's number: two studies with
    the default seed draw different first values; the same study (resumed, or on another worker) the same ones."""
    from omegaconf import OmegaConf

    from rlexp.sweep import OptunaSweep

    config = OmegaConf.create({"seed": 0, "hydra": {"sweep": {"dir": str(tmp_path)}, "job": {"config_name": "config"},
                                                   "runtime": {"choices": {"agent": "ppo", "env": "cartpole"}}}})

    def first_values(name):
        sweep = OptunaSweep({**SETTINGS, "sampler": {"_target_": "optuna.samplers.TPESampler", "seed": None}},
                            config, launcher=None)
        sweep.distributions = {"agent.lr": FloatDistribution(1e-5, 1e-2, log=True)}
        study = optuna.create_study(study_name=name, direction="maximize", sampler=sweep.s["sampler"])
        values = []
        for _ in range(4):
            trial = study.ask()
            sweep.suggest(study, trial)
            values.append(trial.params["agent.lr"])
            study.tell(trial, 0.0)
        return values

    first, again, other = first_values("ppo_cartpole_a1b2c3"), first_values("ppo_cartpole_a1b2c3"), \
        first_values("ppo_cartpole_d4e5f6")
    assert first == again and len(set(first)) == 4
    assert not set(first) & set(other)


def test_a_killed_sweepers_trials_are_reclaimed_on_a_journal_file_and_their_steps_count(tmp_path):
    """A journal file keeps no heartbeats: the sweeper writes each running trial's in its `heartbeat` attribute.
    A RUNNING trial whose heartbeat is older than grace_period was left by a killed sweeper: the next claim marks
    it FAIL, to be run again, and the 1,200 env steps its folder shows it trained count against max_env_steps."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from omegaconf import OmegaConf

    from rlexp.sweep import OptunaSweep
    from rlexp.sweep.storage import HEARTBEAT_ATTR, Heartbeat, stale_trial_ids
    from rlexp.sweep.report import STEPS_ATTR
    from rlexp.sweep.trials import INTERRUPTED_ATTR

    storage = make_storage(f"journal:///{tmp_path}/journal.log")
    study = optuna.create_study(study_name="j", storage=storage, direction="maximize")
    killed, alive = study.ask(), study.ask()
    storage.set_trial_user_attr(killed._trial_id, HEARTBEAT_ATTR, time.time() - 120)
    with Heartbeat(storage, 0.05) as beat:
        beat.add(alive._trial_id)
        assert stale_trial_ids(storage, study._study_id, 60) == [killed._trial_id]
    (tmp_path / "trial_0").mkdir()
    pq.write_table(pa.table({"step": [600, 1200]}), tmp_path / "trial_0/history.parquet")
    config = OmegaConf.create({"seed": 0, "hydra": {"sweep": {"dir": str(tmp_path)}, "job": {"config_name": "config"},
                                                   "runtime": {"choices": {"agent": "ppo", "env": "cartpole"}}}})
    sweep = OptunaSweep({**SETTINGS, "grace_period": 60, "max_env_steps": 10_000}, config, launcher=None)
    sweep.storage, sweep.sweep_dir, sweep.cap = storage, tmp_path, 10_000
    assert sweep.reclaim(study) == [killed._trial_id]
    frozen = study.get_trials(deepcopy=False)[0]
    assert frozen.state == TrialState.FAIL and frozen.user_attrs[INTERRUPTED_ATTR]
    assert frozen.user_attrs[STEPS_ATTR] == 1200 and study.get_trials()[1].state == TrialState.RUNNING


def test_an_interrupted_baseline_is_trained_again(tmp_path):
    """The baseline (trial 0) and enqueued trials are a study's first trials; one a stopped sweep left unfinished
    is not counted and is run again before any sampled trial."""
    from omegaconf import OmegaConf

    from rlexp.sweep import OptunaSweep
    from rlexp.sweep.trials import FIRST_ATTR, INTERRUPTED_ATTR, first_key

    config = OmegaConf.create({"seed": 0, "hydra": {"sweep": {"dir": str(tmp_path)}, "job": {"config_name": "config"},
                                                   "runtime": {"choices": {"agent": "ppo", "env": "cartpole"}}}})
    baseline, enqueued = {"agent.lr": 3e-4}, {"agent.lr": 1e-3}
    sweep = OptunaSweep({**SETTINGS, "baseline": baseline, "enqueue": [enqueued]}, config, launcher=None)
    interrupted = optuna.trial.create_trial(state=TrialState.FAIL, user_attrs={
        FIRST_ATTR: first_key(baseline), INTERRUPTED_ATTR: True})
    assert sweep.next_first([interrupted]) == (True, baseline)
    done = optuna.trial.create_trial(value=1.0, user_attrs={FIRST_ATTR: first_key(baseline)})
    assert sweep.next_first([interrupted, done]) == (False, enqueued)


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
@pytest.mark.filterwarnings("ignore:Heartbeat of storage")
def test_an_interrupted_baseline_is_run_again_after_a_sampled_trial_finished(tmp_path):
    """Trial 0 (the baseline) and trial 1 (sampled) run together; trial 1 completes, then a Ctrl-C interrupts trial
    0: the next claim trains the baseline again. A study made before its first trials were marked has had its
    baseline once it holds a trial, and goes on to the enqueued values."""
    from omegaconf import OmegaConf

    from rlexp.sweep import OptunaSweep
    from rlexp.sweep.trials import INTERRUPTED_ATTR, REFERENCE_ATTR

    config = OmegaConf.create({"seed": 0, "hydra": {"sweep": {"dir": str(tmp_path)}, "job": {"config_name": "config"},
                                                   "runtime": {"choices": {"agent": "ppo", "env": "cartpole"}}}})
    baseline, enqueued = {"agent.lr": 3e-4}, {"agent.lr": 1e-3}
    sweep = OptunaSweep({**SETTINGS, "baseline": baseline}, config, launcher=None)
    space = {"agent.lr": FloatDistribution(1e-5, 1e-2, log=True)}
    study = sweep.open_study(space, "s")
    sweep.distributions, sweep.is_grid, sweep.n_trials, sweep.cap, sweep.fixed = space, False, 5, None, {}
    first, second = sweep.claim(study), sweep.claim(study)
    assert first.params == baseline and second.params != baseline
    study.tell(second, 1.0)
    first.set_user_attr(INTERRUPTED_ATTR, True)
    study.tell(first, state=TrialState.FAIL)
    again = sweep.claim(study)
    assert again.params == baseline and again.user_attrs.get(REFERENCE_ATTR) is True
    sweep = OptunaSweep({**SETTINGS, "baseline": baseline, "enqueue": [enqueued]}, config, launcher=None)
    old = optuna.trial.create_trial(value=1.0)  # a trial of a study made before trials were marked
    assert sweep.next_first([old], marked=False) == (False, enqueued)
    assert sweep.next_first([old], marked=True) == (True, baseline)


def worker_with_one_trial_done(tmp_path):
    """A worker's sweep (PPO CartPole over agent.lr) and its SQLite study holding trial 0, complete at 10."""
    from omegaconf import OmegaConf

    from rlexp.sweep import OptunaSweep

    config = OmegaConf.create({"seed": 0, "hydra": {"sweep": {"dir": str(tmp_path)}, "job": {"config_name": "config"},
                                                   "runtime": {"choices": {"agent": "ppo", "env": "cartpole"}}}})
    sweep = OptunaSweep(SETTINGS, config, launcher=None)
    sweep.distributions = {"agent.lr": FloatDistribution(1e-4, 1e-2)}
    sweep.storage_url, sweep.is_grid = f"sqlite:///{tmp_path}/optuna.db", False
    study = optuna.create_study(study_name="s", storage=sweep.storage_url, direction="maximize")
    study.add_trial(optuna.trial.create_trial(value=10.0, params={"agent.lr": 1e-3},
                                              distributions=sweep.distributions))
    return sweep, study


def test_a_workers_final_report_names_the_trials_still_running_elsewhere(tmp_path, caplog):
    """Two workers fill one study: the first to finish reports the best of the finished trials and names the
    trials the other is still training, whose results its report cannot hold."""
    import logging

    sweep, study = worker_with_one_trial_done(tmp_path)
    study.ask(), study.ask()  # trials 1 and 2: another worker's, running
    with caplog.at_level(logging.INFO, logger="rlexp"):
        sweep.report(study)
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("best: ")]
    assert line == ("best: trial 0, objective 10 (1 complete, 0 pruned, 0 failed; so far: trial(s) 1, 2 still running "
                    "on another worker, which reports the study's best when it ends)")


def test_the_reports_pareto_front_is_optunas_of_the_same_trials(tmp_path):
    """Score up, seconds down: the report's front of a snapshot is the one Optuna's best_trials gives."""
    from omegaconf import OmegaConf

    from rlexp.sweep import OptunaSweep

    config = OmegaConf.create({"seed": 0, "hydra": {"sweep": {"dir": str(tmp_path)}, "job": {"config_name": "config"},
                                                   "runtime": {"choices": {"agent": "ppo", "env": "cartpole"}}}})
    sweep = OptunaSweep(SETTINGS, config, launcher=None)
    sweep.directions = ["maximize", "minimize"]
    study = optuna.create_study(directions=sweep.directions)
    space = {"agent.lr": FloatDistribution(1e-4, 1e-2)}
    # (12, 7) lies behind (12, 6) and (8, 8) behind (10, 5); the two (10, 5) tie: both on the front
    values = [(10, 5), (12, 7), (9, 4), (12, 6), (8, 8), (10, 5), (13, 9)]
    for i, v in enumerate(values):
        study.add_trial(optuna.trial.create_trial(values=list(v), params={"agent.lr": 1e-4 * (i + 1)},
                                                  distributions=space))
    front = sorted(t.number for t in sweep.pareto_front(study.get_trials()))
    assert front == sorted(t.number for t in study.best_trials) == [0, 2, 3, 5, 6]


def test_the_final_report_reads_one_snapshot_while_another_worker_finishes_a_trial(tmp_path, caplog):
    """The other worker completes trial 1 (objective 50) while this one writes its report. The report reads the
    study once: trial 1 as it was then (running) is named as still running beside the best then (trial 0, 10),
    never left out as if nothing else were running."""
    import logging

    sweep, study = worker_with_one_trial_done(tmp_path)
    elsewhere = study.ask()  # trial 1, on the other worker
    real_get_trials, reads = study.get_trials, []

    def get_trials(*args, **kwargs):  # the other worker's trial ends right after the report's first read
        reads.append(1)
        if len(reads) == 2:
            study.tell(elsewhere, 50.0)
        return real_get_trials(*args, **kwargs)

    study.get_trials = get_trials
    with caplog.at_level(logging.INFO, logger="rlexp"):
        sweep.report(study)
    assert len(reads) >= 2 and study.trials[1].state == TrialState.COMPLETE  # the race happened
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("best: ")]
    assert line == ("best: trial 0, objective 10 (1 complete, 0 pruned, 0 failed; so far: trial(s) 1 still running "
                    "on another worker, which reports the study's best when it ends)")


@pytest.mark.skipif(not os.environ.get("RLEXP_TEST_SLURM"), reason="needs a Slurm cluster: .ci/run starts one "
                    "(.ci/slurm.sh) and sets RLEXP_TEST_SLURM")
def test_a_sweep_runs_its_trials_as_slurm_jobs_and_a_request_no_node_holds_is_one_line(tmp_path):
    """hydra/launcher=rlexp_slurm on a real (one-node) cluster: each trial a Slurm job, results back through
    submitit; a request bigger than any node of the partition (the launcher's default 4 CPUs on 2) would pend for
    ever: refused before any job, naming the key and what the nodes have (CPUs, and memory); accounting off is
    said once."""
    import subprocess as sp

    cpus = int(sp.run(["sinfo", "-h", "-o", "%c"], capture_output=True, text=True).stdout.split()[0].rstrip("+"))
    too_many = rlexp(tmp_path, "-m", *TINY, "agent.lr=1e-3,2e-3", "hydra/launcher=rlexp_slurm",
                     f"hydra.launcher.cpus_per_task={cpus + 2}", "hydra.launcher.mem_gb=1", timeout=120)
    assert too_many.returncode == 2 and "Traceback" not in too_many.stdout + too_many.stderr
    assert (f"hydra.launcher.cpus_per_task={cpus + 2}: the nodes of partition debug have at most {cpus} CPUs; ask "
            f"for {cpus} or fewer") in too_many.stdout + too_many.stderr
    assert not list((tmp_path / "multirun").glob("*/trial_*"))
    memory_mb = int(sp.run(["sinfo", "-h", "-o", "%m"], capture_output=True, text=True).stdout.split()[0].rstrip("+"))
    too_big = rlexp(tmp_path, "-m", *TINY, "agent.lr=1e-3,2e-3", "hydra/launcher=rlexp_slurm",
                    "hydra.launcher.cpus_per_task=1", f"hydra.launcher.mem_gb={memory_mb // 1024 + 1}", timeout=120)
    assert too_big.returncode == 2 and "Traceback" not in too_big.stdout + too_big.stderr
    assert (f"hydra.launcher.mem_gb={memory_mb // 1024 + 1}: the nodes of partition debug have at most "
            f"{memory_mb // 1024} GB ({memory_mb} MB); ask for {memory_mb // 1024} or less") in too_big.stdout + too_big.stderr
    assert not list((tmp_path / "multirun").glob("*/trial_*"))
    ran = rlexp(tmp_path, "-m", *TINY, "agent.lr=1e-3,2e-3", "hydra/launcher=rlexp_slurm",
                "hydra.launcher.cpus_per_task=1", "hydra.launcher.mem_gb=2", "hydra.launcher.timeout_min=10",
                timeout=900)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    done = trials(tmp_path)
    assert sorted(t.state for t in done) == [TrialState.COMPLETE] * 2
    out = ran.stdout + ran.stderr
    assert out.count("sacct") <= 1 and "Bypassing sacct error" not in out
    jobs = list((tmp_path / "multirun").glob("*/.submitit/*"))
    assert jobs, "no submitit job folders in the study's folder"


# ----- rungs at equal steps whatever each trial's warm-up; the step budget a hard cap ----------------------------
def study_with_reporters(tmp_path, pruner, name="s", max_steps=100_000, eval_interval=1_000, cap=None, seeds=1):
    """A study and a maker of a new trial's reporter (its own warm-up and most steps given), as trial processes
    make them."""
    from rlexp.sweep.pruning import PruningReporter

    url = f"sqlite:///{tmp_path}/optuna.db"
    study = optuna.create_study(study_name=name, storage=url, direction="maximize")

    def reporter(warmup=0, most=None, seed_index=0, trial_id=None):
        trial_id = study.ask()._trial_id if trial_id is None else trial_id
        spec = {"storage": url, "study": name, "trial_id": trial_id, "pruner": pruner, "warmup_trials": 1,
                "warmup_steps": None, "reports": 10, "leader": seed_index == 0, "prune": True,
                "seed_index": seed_index, "seeds": seeds, "max_env_steps": cap}
        return PruningReporter(spec, max_steps, eval_interval, warmup, most), trial_id

    return study, reporter


def test_trials_with_other_warm_ups_are_ranked_at_the_same_rung_steps(tmp_path):
    """Successive halving, 100,000 steps, evaluations every 1,000. Trial 0 learns after 10,000 random steps: the
    study's learning start, so the rungs are 10,000 + 10,000 x 1, 3 (a ninth of the 90,000 steps after it):
    20,000 and 40,000, for every trial. Trial 1 learns only after 20,000 (its own rungs would be 29,000 and 47,000):
    behind trial 0 at 20,000, it stops there."""
    study, reporter = study_with_reporters(tmp_path, "halving")
    first, first_id = reporter(warmup=10_000)
    second, second_id = reporter(warmup=20_000)
    assert study.user_attrs["learning_start"] == 10_000
    first.scalars(20_000, {"eval/mean_return": 100.0})
    with pytest.raises(optuna.TrialPruned, match="pruned at step 20,000"):
        second.scalars(20_000, {"eval/mean_return": 50.0})
    for trial_id in (first_id, second_id):
        rungs = {k for k in study._storage.get_trial(trial_id).user_attrs if k.startswith("rung_")}
        assert rungs == {"rung_20000", "rung_20000_at"}


def test_the_median_pruner_waits_for_the_studys_learning_start_whatever_a_trials_own(tmp_path):
    """Median pruning from a third of the steps after the study's learning start (trial 0's 10,000): 40,000 for
    every trial. A trial whose own warm-up is 40,000 steps is judged there too, on its score at that step."""
    study, reporter = study_with_reporters(tmp_path, "median")
    first, _ = reporter(warmup=10_000)
    for step in range(1_000, 41_000, 1_000):
        first.scalars(step, {"eval/mean_return": 100.0})
    study.tell(study.trials[0].number, 100.0)
    late, _ = reporter(warmup=40_000)
    for step in range(1_000, 40_000, 1_000):
        late.scalars(step, {"eval/mean_return": 0.0})  # before 40,000: recorded, not judged
    with pytest.raises(optuna.TrialPruned, match="pruned at step 40,000"):
        late.scalars(40_000, {"eval/mean_return": 0.0})


def test_hyperbands_brackets_are_optunas_and_rank_trials_at_the_rungs_very_steps(tmp_path):
    """Rungs at 20,000 and 40,000 (as above) make 3 brackets, each trial in the one Optuna's HyperbandPruner with 3
    brackets puts it in. Two trials of bracket 0: the second, measured first at 32,768 (long rollouts), has no
    score at the 20,000 rung and is not ranked there (Optuna's successive halving would rank its score at 33,000
    against the first's at 20,000); behind the first at 40,000, it stops there."""
    from rlexp.sweep.pruning import Hyperband

    names = [f"s{i}" for i in range(40)]
    mine = Hyperband([20_000, 40_000])
    for name in names[:5]:
        reference = optuna.pruners.HyperbandPruner(min_resource=1, max_resource=9, reduction_factor=3)
        study = optuna.create_study(study_name=name, pruner=reference)
        reference._try_initialization(study)
        trials = [optuna.trial.create_trial(value=0.0) for _ in range(30)]
        for number, trial in enumerate(trials):
            trial.number = number
            assert mine.bracket(name, number) == reference._get_bracket_id(study, trial), (name, number)
    name = next(n for n in names if mine.bracket(n, 0) == mine.bracket(n, 1) == 0)
    study, reporter = study_with_reporters(tmp_path, "hyperband", name=name)
    first, _ = reporter(warmup=10_000)
    for step in range(1_000, 41_000, 1_000):
        first.scalars(step, {"eval/mean_return": 100.0})
    second, second_id = reporter(warmup=10_000)
    second.scalars(32_768, {"eval/mean_return": 0.0})
    second.scalars(33_768, {"eval/mean_return": 0.0})  # the 33,000 mark: past the first rung, not ranked there
    with pytest.raises(optuna.TrialPruned, match="pruned at step 40,000"):
        second.scalars(40_768, {"eval/mean_return": 0.0})
    assert "rung_20000" not in study._storage.get_trial(second_id).user_attrs


@pytest.mark.parametrize("agent,most", [
    ({"n_steps": 32, "n_envs": 4, "steps": 0}, 1_024),  # on-policy: whole rollouts of 128 past 1,000
    ({"train_freq": 4, "n_envs": 2}, 1_007),  # off-policy: a last call of one cycle (8 steps) begun at 999
    ({}, 1_000),  # an agent of another kind without most_steps of its own
])
def test_a_trials_most_steps(agent, most):
    from types import SimpleNamespace

    from rlexp.sweep.ledger import most_steps

    assert most_steps(SimpleNamespace(**agent), 1_000) == most


def test_a_trial_holds_its_most_steps_or_is_refused_and_a_failed_one_counts_what_it_trained(tmp_path):
    """max_env_steps=3,050, trials of 1,000 steps on 1 seed. Trial 0 has trained 1,024 and finished; trials 1 and 2
    were claimed at 1,000 each. Trial 1 (PPO's rollouts) declares 1,024 most steps, which replace its claim's
    1,000 (trial 2, claimed after it, decides after it). Trial 2 declares 1,100: 3,148 would pass the cap, so it is
    refused, holds nothing and never trains, and a new trial would be held at 1,100, more than the 1,002 left
    (a refused baseline is not claimed again and again).
    Trial 1 fails after training 1,024 steps, its history's last episode ending at 905: it counts 1,024; had its
    process died instead, it would count its most steps."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from omegaconf import OmegaConf

    from hydra.core.utils import JobReturn, JobStatus

    from rlexp.errors import TrialFailed
    from rlexp.sweep import OptunaSweep
    from rlexp.sweep.report import STEPS_ATTR
    from rlexp.sweep.scheduler import Job
    from rlexp.sweep.trials import RESERVED_ATTR, counted_trials

    study, reporter = study_with_reporters(tmp_path, "none", max_steps=1_000, eval_interval=0, cap=3_050)
    study.add_trial(optuna.trial.create_trial(value=1.0, user_attrs={STEPS_ATTR: 1_024}))
    ids = []
    for _ in range(2):
        trial = study.ask()
        study._storage.set_trial_user_attr(trial._trial_id, RESERVED_ATTR, 1_000)
        ids.append(trial._trial_id)
    second, _ = reporter(most=1_024, trial_id=ids[0])
    with pytest.raises(TrialFailed, match="not started: each of its seeds can train up to 1,100 env steps"):
        reporter(most=1_100, trial_id=ids[1])
    attrs = [study._storage.get_trial(i).user_attrs for i in ids]
    assert attrs[0][RESERVED_ATTR] == 1_024 and attrs[1]["refused"] is True
    assert [t.number for t in counted_trials(study)] == [0, 1]
    config = OmegaConf.create({"seed": 0, "hydra": {"sweep": {"dir": str(tmp_path)}, "job": {"config_name": "config"},
                                                   "runtime": {"choices": {"agent": "ppo", "env": "cartpole"}}}})
    sweep = OptunaSweep({**SETTINGS, "max_env_steps": 3_050}, config, launcher=None)
    sweep.cap, sweep.job_steps, sweep.sweep_dir, sweep.storage = 3_050, 1_000, tmp_path, study._storage
    assert sweep.budget_left(study) == 1_002 and sweep.seed_steps(study.trials) == 1_100
    second.trained(1_024)
    second.close(failed=True)
    (tmp_path / "trial_1").mkdir()
    pq.write_table(pa.table({"step": [500, 905]}), tmp_path / "trial_1/history.parquet")
    failed = JobReturn()
    failed.status, failed._return_value = JobStatus.FAILED, TrialFailed("TrainingDiverged: non-finite loss")
    job = Job([], 1, "trial_1", result=failed)
    assert sweep.job_steps_trained(job, study._storage.get_trial(ids[0]).user_attrs) == 1_024
    died = Job([], 1, "trial_1", result=RuntimeError("the trial's process died"))
    attrs = dict(study._storage.get_trial(ids[0]).user_attrs)
    del attrs["trained_0"]
    assert sweep.job_steps_trained(died, attrs) == 1_024  # at its most steps: its history lags behind


class CtrlCLauncher:
    """Each job ends at once: as a Ctrl-C that reached its process before the sweep ends it (a KeyboardInterrupt,
    as rlexp's launchers return it), or complete after 1,000 steps."""

    def __init__(self, interrupted: bool) -> None:
        self.interrupted, self.subdirs = interrupted, []

    def launch(self, job_overrides, initial_job_idx):
        from hydra.core.utils import JobReturn, JobStatus

        from rlexp.errors import TrialFailed

        (overrides,) = job_overrides
        self.subdirs.append(next(o.split("=", 1)[1] for o in overrides if o.startswith("hydra.sweep.subdir=")))
        ret = JobReturn()
        if self.interrupted:
            ret.status, ret._return_value = JobStatus.FAILED, TrialFailed("KeyboardInterrupt: ")
        else:
            ret.status, ret.return_value = JobStatus.COMPLETED, {"final_eval": 1.0, "steps": 1000}
        return [ret]


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
def test_a_baseline_whose_process_the_ctrl_c_reached_first_is_interrupted_and_run_again(tmp_path):
    """A Ctrl-C reaches the trials' processes and the sweep; the baseline's job ends (KeyboardInterrupt) before the
    sweep sees its own: the sweep is interrupted (exit 130), the baseline marked interrupted, not failed, and the
    same command trains it again first."""
    from omegaconf import OmegaConf

    from rlexp.sweep import OptunaSweep

    config = OmegaConf.create({"seed": 0, "run": {"max_steps": 1000, "eval_episodes": 2}, "env": {"id": "CartPole-v1"},
                               "hydra": {"sweep": {"dir": str(tmp_path / "study")}, "job": {"config_name": "config"},
                                         "runtime": {"choices": {"agent": "ppo", "env": "cartpole"}}}})
    settings = {**SETTINGS, "baseline": {"agent.lr": 3e-4}, "n_jobs": 1, "pruner": "none"}
    with pytest.raises(SystemExit) as stopped:
        OptunaSweep(settings, config, CtrlCLauncher(True)).run(["agent.lr=tag(log,interval(1e-4,1e-2))"])
    assert stopped.value.code == 130
    OptunaSweep(settings, config, CtrlCLauncher(False)).run(["agent.lr=tag(log,interval(1e-4,1e-2))"])
    study = optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path}/study/optuna.db")
    first, *others = sorted(study.trials, key=lambda t: t.number)
    assert first.state == TrialState.FAIL and first.user_attrs["interrupted"] and first.params == {"agent.lr": 3e-4}
    assert others[0].params == {"agent.lr": 3e-4} and others[0].state == TrialState.COMPLETE


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
def test_a_ctrl_c_while_a_finished_trial_is_recorded_counts_what_it_trained(tmp_path):
    """A trial's jobs ended (1,000 steps) and the sweep is recording it when the Ctrl-C comes: the trial is
    recorded interrupted with the 1,000 steps it trained (held against max_env_steps), not left RUNNING."""
    from omegaconf import OmegaConf

    from rlexp.sweep import OptunaSweep

    config = OmegaConf.create({"seed": 0, "run": {"max_steps": 1000, "eval_episodes": 2}, "env": {"id": "CartPole-v1"},
                               "hydra": {"sweep": {"dir": str(tmp_path / "study")}, "job": {"config_name": "config"},
                                         "runtime": {"choices": {"agent": "ppo", "env": "cartpole"}}}})
    sweep = OptunaSweep({**SETTINGS, "n_jobs": 1, "pruner": "none", "max_env_steps": 10_000}, config,
                        CtrlCLauncher(False))
    told = sweep.tell

    def ctrl_c_once(study, trial, state, *args):
        if state == TrialState.COMPLETE:
            sweep.tell = told
            raise KeyboardInterrupt
        told(study, trial, state, *args)

    sweep.tell = ctrl_c_once
    with pytest.raises(SystemExit):
        sweep.run(["agent.lr=tag(log,interval(1e-4,1e-2))"])
    (trial,) = optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path}/study/optuna.db").trials
    assert trial.state == TrialState.FAIL and trial.user_attrs["interrupted"]
    assert trial.user_attrs["env_steps"] == 1000
