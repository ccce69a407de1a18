"""Configs written for Hydra's own Optuna sweeper (hydra-optuna-sweeper 1.4) run unchanged on rlexp's: the
lightning-hydra-template `hparams_search/` pattern, multi-objective `direction` lists, the grid sampler,
`custom_search_space`, every sampler preset with its Optuna arguments; and the commands a sweep prints train once."""
import os
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import optuna
import pytest
from forked_cli import run_cli
import yaml
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState

from rlexp.sweep import search_space

# the tests of what Hydra itself does (its sweepers, launchers, folders, override grammar, plugin lookup) run again
# on hydra-core 1.4 (`-m hydra14`, .ci/run); those of rlexp's own options over Optuna run once
TINY = ["run.max_steps=1024", "run.eval_episodes=2", "agent.n_steps=32", "env.n_envs=4", "agent.ppo_epochs=2"]
HPARAMS_SEARCH = """\
# @package _global_
# as lightning-hydra-template's configs/hparams_search/mnist_optuna.yaml
defaults:
  - override /hydra/sweeper: optuna

optimized_metric: "eval/mean_return"

run:
  max_steps: 1024
  eval_episodes: 2

hydra:
  mode: "MULTIRUN"
  sweeper:
    _target_: hydra_plugins.hydra_optuna_sweeper.optuna_sweeper.OptunaSweeper
    storage: null
    study_name: null
    n_jobs: 2
    direction: maximize
    n_trials: 2
    sampler:
      _target_: optuna.samplers.TPESampler
      seed: 1234
      n_startup_trials: 10
      consider_endpoints: true
      n_ei_candidates: 12
    params:
      agent.lr: interval(0.0001, 0.01)
      agent.n_steps: choice(16, 32)
"""
CUSTOM_SPACE = """\
def space(cfg, trial):
    \"\"\"lr only when the optimizer is adam: a conditional parameter.\"\"\"
    optimizer = trial.suggest_categorical("agent.optimizer", ["adam", "rmsprop"])
    if optimizer == "adam":
        trial.suggest_float("agent.beta1", 0.8, 0.95)
"""


def rlexp(cwd, *args, timeout=600, env=None):
    return run_cli(args, cwd, dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **(env or {})), timeout)


def only_study(cwd: Path) -> tuple[Path, list[optuna.trial.FrozenTrial]]:
    (folder,) = [p for p in (cwd / "multirun").iterdir() if p.is_dir()]
    trials = optuna.load_study(study_name=folder.name, storage=f"sqlite:///{folder}/optuna.db").get_trials()
    return folder, trials


def printed(stdout: str, prefix: str) -> list[str]:
    """The words after `python -m rlexp` of the line starting with `prefix`."""
    (line,) = [line for line in stdout.splitlines() if line.startswith(prefix)]
    return shlex.split(line[len(prefix):].split("   (preset")[0])[3:]


def test_a_lightning_style_hparams_search_group_runs_and_its_command_trains_once(tmp_path):
    """`+hparams_search=ppo_optuna` (a group that sets hydra.mode: MULTIRUN, the upstream sweeper class,
    study_name: null, storage: null, a TPE sampler with its own knobs, params) is a 2-trial study; the printed
    command trains the best configuration once instead of sweeping again."""
    import hydra

    hydra_14 = tuple(int(p) for p in hydra.__version__.split(".")[:2]) >= (1, 4)
    (tmp_path / "myconf" / "hparams_search").mkdir(parents=True)
    # Hydra 1.4 refuses hydra.mode in a config group ("set it directly in the primary config or on the command
    # line"): there the group leaves it out and the command says -m
    text = HPARAMS_SEARCH.replace('  mode: "MULTIRUN"\n', "") if hydra_14 else HPARAMS_SEARCH
    (tmp_path / "myconf" / "hparams_search" / "ppo_optuna.yaml").write_text(text)
    result = rlexp(tmp_path, *(["-m"] if hydra_14 else []), "--config-dir", "myconf", "+hparams_search=ppo_optuna",
                   "env.n_envs=4", "agent.ppo_epochs=2")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    folder, trials = only_study(tmp_path)
    assert folder.name.startswith("ppo_cartpole_") and len(trials) == 2
    assert all(t.state == TrialState.COMPLETE and set(t.params) == {"agent.lr", "agent.n_steps"} for t in trials)
    words = printed(result.stdout, "run it: ")
    assert "+hparams_search=ppo_optuna" in words and (words[-1] == "hydra.mode=RUN") != hydra_14
    again = rlexp(tmp_path, *words)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "trial " not in again.stdout and "done (max_steps): 1,024 steps" in again.stdout
    assert sorted(p.name for p in (tmp_path / "multirun").iterdir()) == [folder.name]  # no second study


def test_direction_as_a_list_is_two_objectives(tmp_path):
    result = rlexp(tmp_path, "-m", *TINY, "agent.lr=tag(log,interval(1e-4,1e-2))", "hydra.sweeper.n_trials=2",
                   "hydra.sweeper.direction=[maximize,minimize]", "hydra/sweeper/sampler=nsgaii",
                   "hydra.sweeper.sampler.population_size=2")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    folder, trials = only_study(tmp_path)
    assert all(len(t.values) == 2 for t in trials) and (folder / "pareto_front.csv").exists()


@pytest.mark.hydra14
def test_the_grid_sampler_runs_every_point_once(tmp_path):
    """hydra/sweeper/sampler=grid walks choice and range sweeps (range's stop excluded): 2 x 2 points."""
    result = rlexp(tmp_path, "-m", *TINY, "agent.n_steps=choice(16,32)", "agent.ppo_epochs=range(1,3)",
                   "hydra/sweeper/sampler=grid", "hydra.sweeper.n_trials=10")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    _, trials = only_study(tmp_path)
    points = sorted((t.params["agent.n_steps"], t.params["agent.ppo_epochs"]) for t in trials)
    assert points == [(16, 1), (16, 2), (32, 1), (32, 2)]


def test_a_custom_search_space_adds_conditional_parameters(tmp_path):
    (tmp_path / "my_search.py").write_text(CUSTOM_SPACE)
    result = rlexp(tmp_path, "-m", *TINY, "agent.lr=tag(log,interval(1e-4,1e-2))", "hydra.sweeper.n_trials=4",
                   "hydra.sweeper.custom_search_space=my_search.space", "hydra/sweeper/sampler=random",
                   env={"PYTHONPATH": str(tmp_path)})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    folder, trials = only_study(tmp_path)
    assert len(trials) == 4
    for trial in trials:
        assert ("agent.beta1" in trial.params) == (trial.params["agent.optimizer"] == "adam")
        trained = yaml.safe_load((folder / f"trial_{trial.number}" / ".hydra" / "config.yaml").read_text())["agent"]
        assert trained["optimizer"] == trial.params["agent.optimizer"]
        if "agent.beta1" in trial.params:
            assert trained["beta1"] == pytest.approx(trial.params["agent.beta1"])


@pytest.mark.hydra14
@pytest.mark.parametrize("preset,argument", [("tpe", "consider_endpoints=true"), ("gp", "deterministic_objective=true"),
                                             ("cmaes", "sigma0=0.5"), ("qmc", "scramble=true"),
                                             ("nsgaiii", "dividing_parameter=2")])
def test_every_sampler_preset_takes_its_optuna_arguments(preset, argument):
    from hydra import compose, initialize_config_module

    from rlexp.sweep import check_settings

    with initialize_config_module(config_module="rlexp.conf", version_base="1.3"):
        c = compose(config_name="config", overrides=[f"hydra/sweeper/sampler={preset}",
                                                     f"hydra.sweeper.sampler.{argument}"], return_hydra_config=True)
    from omegaconf import OmegaConf

    sweeper = OmegaConf.to_container(c.hydra.sweeper, resolve=True)
    settings = check_settings({k: v for k, v in sweeper.items() if not k.startswith("_")})  # as Hydra passes them
    sampler = settings["sampler"]
    assert type(sampler).__name__ == c.hydra.sweeper.sampler._target_.rsplit(".", 1)[-1]
    key, value = argument.split("=")
    stored = {"consider_endpoints": "_parzen_estimator_parameters", "deterministic_objective": "_deterministic",
              "sigma0": "_sigma0", "scramble": "_scramble", "dividing_parameter": "_dividing_parameter"}[key]
    found = getattr(sampler, stored, None)
    if key == "consider_endpoints":
        found = found.consider_endpoints
    if key == "dividing_parameter":  # NSGA-III keeps it in its elite population selection
        found = sampler._elite_population_selection_strategy._dividing_parameter
    assert str(found).lower() == value


@pytest.mark.hydra14
@pytest.mark.parametrize("args,message", [
    (["+hydra.sweeper.sampler.consider_endpoint=true"],
     "error: hydra.sweeper.sampler.consider_endpoint is not an argument of optuna.samplers.TPESampler; use one of "),
    (["hydra/sweeper/sampler=motpe"], "error: hydra/sweeper/sampler=motpe: Optuna 4 removed MOTPESampler"),
    (["hydra.sweeper.custom_search_space=nowhere.space"], "error: hydra.sweeper.custom_search_space=nowhere.space: "),
])
def test_a_wrong_sampler_argument_or_function_is_one_line(tmp_path, args, message):
    result = rlexp(tmp_path, "-m", *TINY, "agent.lr=interval(1e-4,1e-2)", *args, timeout=120)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert result.stderr.startswith(message), result.stderr
    assert not (tmp_path / "multirun").exists()


# hydra-optuna-sweeper's override cases (its tests' test_create_optuna_distribution_from_override and
# test_create_params_from_overrides), as its 1.4 code maps them: Hydra's range excludes its stop, Optuna's bounds
# include theirs, so range(1,3) is the ints 1 and 2.
@pytest.mark.hydra14
@pytest.mark.parametrize("override,expected", [
    ("key=choice(1,2)", CategoricalDistribution([1, 2])),
    ("key=choice(true, false)", CategoricalDistribution([True, False])),
    ("key=choice('hello', 'world')", CategoricalDistribution(["hello", "world"])),
    ("key=shuffle(range(1,3))", CategoricalDistribution([1, 2])),
    ("key=range(1,3)", IntDistribution(1, 2)),
    ("key=interval(1, 5)", FloatDistribution(1, 5)),
    ("key=int(interval(1, 5))", IntDistribution(1, 5)),
    ("key=tag(log, interval(1, 5))", FloatDistribution(1, 5, log=True)),
    ("key=tag(log, int(interval(1, 5)))", IntDistribution(1, 5, log=True)),
    ("key=range(0.5, 5.5, step=1)", FloatDistribution(0.5, 4.5, step=1)),
])
def test_hydra_optuna_sweepers_override_cases(override, expected):
    (dist,) = search_space([override])[0].values()
    if isinstance(expected, CategoricalDistribution):
        assert isinstance(dist, CategoricalDistribution) and set(dist.choices) == set(expected.choices)
    else:
        assert dist == expected


@pytest.mark.hydra14
@pytest.mark.parametrize("overrides,distributions,fixed", [
    (["key=choice(1,2)"], {"key": CategoricalDistribution([1, 2])}, {}),
    (["key=5"], {}, {"key": "5"}),
    (["key1=choice(1,2)", "key2=5"], {"key1": CategoricalDistribution([1, 2])}, {"key2": "5"}),
    (["key1=choice(1,2)", "key2=5", "key3=range(1,3)"],
     {"key1": CategoricalDistribution([1, 2]), "key3": IntDistribution(1, 2)}, {"key2": "5"}),
])
def test_hydra_optuna_sweepers_params_cases(overrides, distributions, fixed):
    found, found_fixed, _ = search_space(overrides)
    assert found == distributions and found_fixed == fixed


def test_docs_say_what_carries_over_from_hydra_optuna_sweeper():
    text = (Path(__file__).parents[1] / "docs" / "tuning.md").read_text()
    assert "## Coming from hydra-optuna-sweeper" in text
    section = text.split("## Coming from hydra-optuna-sweeper", 1)[1].split("\n## ", 1)[0]
    for word in ("custom_search_space", "study_name: null", "hydra/sweeper/sampler=grid", "n_trials",
                 "hydra.mode=RUN", "pruning", "conf/hydra/sweeper/optuna.yaml"):
        assert word in section, word
    # every `hydra.sweeper.<key>` the section names is a setting of rlexp's sweeper
    import dataclasses
    import re

    from hydra_plugins.rlexp_sweeper import RlexpSweeperConf

    settings = {f.name for f in dataclasses.fields(RlexpSweeperConf)}
    named = set(re.findall(r"hydra\.sweeper\.([a-z_]+)", section))
    assert named and named <= settings, named - settings


@pytest.mark.hydra14
def test_hydra_run_dir_and_sweep_dir_are_the_folders_they_name(tmp_path):
    """hydra.run.dir=mydir: the run writes there, nothing under outputs/; a command that writes nothing (eval)
    leaves no empty folder; hydra.sweep.dir=mysweep holds the study."""
    run = rlexp(tmp_path, "hydra.run.dir=mydir", *TINY)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert (tmp_path / "mydir" / "summary.json").exists() and (tmp_path / "mydir" / ".hydra" / "config.yaml").exists()
    assert not (tmp_path / "outputs").exists()
    again = rlexp(tmp_path, "hydra.run.dir=mydir", *TINY)
    assert again.returncode == 2 and again.stderr.startswith("error: hydra.run.dir=mydir: ")
    evaluated = rlexp(tmp_path, "mode=eval", "+checkpoint=mydir", "run.eval_episodes=1", "hydra.run.dir=evaldir")
    assert evaluated.returncode == 0, evaluated.stderr[-2000:]
    assert not (tmp_path / "evaldir").exists()
    sweep = rlexp(tmp_path, "-m", *TINY, "agent.lr=1e-3,2e-3", "hydra.sweep.dir=mysweep")
    assert sweep.returncode == 0, sweep.stdout[-2000:] + sweep.stderr[-2000:]
    assert (tmp_path / "mysweep" / "optuna.db").exists() and (tmp_path / "mysweep" / "trial_1" / "summary.json").exists()
    assert not (tmp_path / "multirun").exists()


@pytest.mark.hydra14
def test_another_hydra_app_keeps_its_own_optuna_sweeper(tmp_path):
    """rlexp's `optuna` sweeper name serves rlexp's config only: a plain Hydra app in the same environment that asks
    for hydra/sweeper=optuna does not run rlexp's sweeper (without hydra-optuna-sweeper, Hydra says it has no such
    sweeper), and its own sweeper choices are Hydra's."""
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf/config.yaml").write_text("defaults:\n  - override hydra/sweeper: optuna\n  - _self_\nx: 0\n")
    (tmp_path / "app.py").write_text(textwrap.dedent("""\
        import hydra

        @hydra.main(config_path="conf", config_name="config", version_base="1.3")
        def main(cfg):
            print("x =", cfg.x)

        main()
        """))
    result = subprocess.run([sys.executable, "app.py", "-m", "x=1,2"], cwd=tmp_path, capture_output=True, text=True,
                            timeout=300)
    out = result.stdout + result.stderr
    upstream = bool(__import__("importlib").util.find_spec("hydra_plugins.hydra_optuna_sweeper"))
    assert "study" not in out and "run it: python -m rlexp" not in out, out  # not rlexp's sweeper
    if not upstream:
        assert result.returncode != 0 and "Could not find 'hydra/sweeper/optuna'" in out, out
    plain = subprocess.run([sys.executable, "app.py", "-m", "x=1,2", "hydra/sweeper=basic"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=300)
    assert plain.returncode == 0 and "x = 1" in plain.stdout and "x = 2" in plain.stdout, plain.stderr


class AnyDone(str):
    """Equal to any run's last line ("done (max_steps): ...")."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and other.startswith("done (max_steps): ")

    __hash__ = str.__hash__


@pytest.mark.hydra14
def test_hydras_basic_sweeper_and_launcher_run_rlexps_trials(tmp_path):
    """hydra/sweeper=basic: Hydra's plain grid, each point a run in its own folder; hydra/launcher=basic under
    rlexp's sweeper: trials one at a time inside the sweep's process, each recorded in the study."""
    tiny = ["run.max_steps=64", "run.eval_episodes=1", "agent.n_steps=16", "env.n_envs=2", "agent.ppo_epochs=1"]
    (tmp_path / "grid").mkdir()
    grid = rlexp(tmp_path / "grid", "-m", "hydra/sweeper=basic", "seed=0,1", "agent.lr=0.0003,-1", *tiny)
    # Hydra's basic launcher's lines, each job's output as it ends, one at a time; a failed job fails the sweep
    # (exit 1: jobs ran) in one last line, after the others ran
    assert grid.returncode == 1, grid.stdout[-3000:] + grid.stderr[-3000:]
    points = [f"seed={seed} agent.lr={lr} {' '.join(tiny)}" for seed in (0, 1) for lr in ("0.0003", "-1")]
    assert re.findall(r"^Launching.*|^\t#.*|^done \(.*", grid.stdout, re.M) == [
        "Launching 4 jobs locally, one at a time, each in its own process",
        f"\t#0 : {points[0]}", AnyDone(), f"\t#1 : {points[1]}", f"\t#2 : {points[2]}", AnyDone(),
        f"\t#3 : {points[3]}"]
    assert grid.stderr.splitlines()[-1] == "error: a job of the sweep failed: agent.lr=-1 must be in (0, 1]"
    (day,) = (tmp_path / "grid/multirun").iterdir()  # Hydra's own multirun/<date>/<time>/ without a study name
    (folder,) = day.iterdir()
    summaries = sorted(folder.glob("trial_*/summary.json"))
    assert [p.parent.name for p in summaries] == ["trial_0", "trial_2"]
    assert sorted(p.name for p in folder.glob("trial_*")) == ["trial_0", "trial_2"]
    assert sorted(yaml.safe_load((p.parent / ".hydra/config.yaml").read_text())["seed"] for p in summaries) == [0, 1]
    first, second = ((folder / t / "main.log").read_text().splitlines() for t in ("trial_0", "trial_2"))
    assert first[-1][:24] <= second[0][:24]  # one at a time: the second started after the first ended
    (tmp_path / "launcher").mkdir()
    inline = rlexp(tmp_path / "launcher", "-m", "hydra/launcher=basic", "agent.lr=choice(1e-3,3e-4)",
                   "hydra.sweeper.n_trials=2", "hydra.sweeper.n_jobs=2", *tiny)
    assert inline.returncode == 0, inline.stdout[-3000:] + inline.stderr[-3000:]
    assert "1 job at a time (hydra/launcher=basic trains each inside this process)" in inline.stdout
    _, trials = only_study(tmp_path / "launcher")
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 2
