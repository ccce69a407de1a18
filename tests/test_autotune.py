"""mode=autotune through the CLI: a budgeted study whose best trial becomes the pair's tuned preset in the config
dir (with an env preset for env=generic), then training with it; bad input as one line; the first log line of a
run names its preset; successive halving and the shipped search spaces."""
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from forked_cli import run_cli
import yaml
from optuna.trial import TrialState

from rlexp.sweep import make_pruner, search_space

# at most 3 trials in 6,144 env steps, halving at 2 lengths L and 3L: trial 0 trains 3L, each other trial L and a
# third of them 2L more (5L/3), and the 2 trials running at once (2 job slots, 1 seed) each hold 3L - 5L/3 more
# while they run: 6,144 = 3L + 2 x 5L/3 + 2 x 4L/3 = 9L gives L = 682 and trials of 2,046
BUDGET = ["run.max_steps=6144", "autotune.budget=1", "autotune.trials=3", "autotune.seeds=1", "autotune.rungs=2",
          "autotune.eval_episodes=2", "autotune.portfolio=0"]  # trials 1 and 2 sample (the portfolio: its own test)
TUNED = "tuned/ppo_CartPole-v1.yaml"


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "rlexp", *args]


def rlexp(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return run_cli(args, cwd, dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"), timeout=600)


def started(cwd: Path, *args: str, merged: bool = True) -> subprocess.Popen:
    """The CLI in the background; `merged`: stdout and stderr in one stream (to read the first line of either)."""
    cwd.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(command(*args), cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT if merged else subprocess.PIPE, text=True,
                            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))


def saved(run_dir: Path) -> dict:
    return yaml.safe_load((run_dir / ".hydra" / "config.yaml").read_text())


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """PPO on env=generic env.id=CartPole-v1 (no tuned preset: the fallback's values), without --config-dir."""
    cwd = tmp_path_factory.mktemp("autotune")
    result = rlexp(cwd, "mode=autotune", "env=generic", "env.id=CartPole-v1", "zoo.rows=false",
                   "agent.n_steps=64", "env.n_envs=8",
                   "model=mlp", "run.eval_episodes=2", *BUDGET)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (study,) = (cwd / "multirun").iterdir()
    return cwd, result, study


@pytest.mark.e2e
def test_autotune_writes_the_best_trial_as_the_pairs_tuned_preset_and_trains_with_it(tuned):
    cwd, result, study = tuned
    lines = result.stdout.splitlines()
    assert lines[0].startswith("no --config-dir: the tuned preset goes into rlexp_conf/ (made now)")
    assert lines[-1] == ("reproduce this training: python -m rlexp --config-dir rlexp_conf agent=ppo "
                         "env=CartPole-v1 model=mlp zoo.rows=false run.eval_episodes=2")  # a group's choice too
    conf = cwd / "rlexp_conf"
    assert sorted(str(p.relative_to(conf)) for p in conf.rglob("*.yaml")) == ["env/CartPole-v1.yaml", TUNED]
    assert yaml.safe_load((conf / "env/CartPole-v1.yaml").read_text()) == {"defaults": ["generic"],
                                                                            "id": "CartPole-v1"}
    text = (conf / TUNED).read_text()
    assert text.startswith("# @package _global_\n# PPO on CartPole-v1, written by `python -m rlexp mode=autotune` on ")
    assert f"# study {study.name} ({study}):" in text
    preset = yaml.safe_load(text)
    assert preset["run"] == {"max_steps": 6144, "target_reward": None}  # the pair's budget, not a trial's

    trials = optuna.load_study(study_name=study.name, storage=f"sqlite:///{study}/optuna.db").get_trials()
    for trial in trials:  # evaluated at the first rung's length, with actions drawn from the policy; scored by
        # a final evaluation as the pair's training scores (CartPole: the deterministic policy)
        run = saved(study / f"trial_{trial.number}")["run"]
        assert (run["max_steps"], run["eval_interval"], run["eval_episodes"]) == (2046, 682, 2)
        assert run["eval_deterministic"] is False and run["final_eval_deterministic"] is True
    summary = json.loads((study / "trial_0" / "summary.json").read_text())
    assert summary["final_eval"]["deterministic"] is True and summary["final_eval"]["episodes"] == 2
    # trial 0 ends on whole rollouts of 8 envs x 64 steps: 4 of them, 2,048 steps; the others train at least to their
    # first evaluation (1,024); three trials held at 2,046 each fit in the 6,144
    assert [t.user_attrs["env_steps"] for t in trials][0] == 2048 and len(trials) == 3
    assert all(1024 <= t.user_attrs["env_steps"] <= 2048 for t in trials)
    assert "run it:" not in result.stdout and "or: " not in result.stdout  # the study's own commands: not printed
    results = yaml.safe_load((study / "optimization_results.yaml").read_text())
    assert results["env_steps"] == sum(t.user_attrs["env_steps"] for t in trials) <= 6144
    # trial 0 trains the values the pair takes untuned (conf/fallbacks/ppo_discrete_vector.yaml's, normalize_reward
    # the agent's own false) for the searched keys the command line leaves to the search, and its entropy
    # coefficient 0 (outside the space's log interval: a fixed value, not an Optuna parameter); the rest sample
    zero, *rest = sorted(trials, key=lambda t: t.number)
    assert zero.params == {"agent.lr": 3e-4, "agent.mini_batches": 32, "agent.ppo_epochs": 10, "agent.gamma": 0.99,
                           "agent.lam": 0.95, "agent.clip_norm": 0.2, "agent.grad_norm": 0.5,
                           "agent.normalize_obs": True, "agent.normalize_reward": False}
    assert zero.user_attrs["baseline_values"] == {"agent.entropy_coef": 0.0}
    first = saved(study / "trial_0")["agent"]
    assert (first["lr"], first["clip_norm"], first["entropy_coef"], first["n_steps"]) == (3e-4, 0.2, 0.0, 64)
    assert all("agent.entropy_coef" in t.params and "baseline_values" not in t.user_attrs for t in rest)
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    best_value = max(t.value for t in complete)
    (number,) = re.findall(r"best: trial (\d+), score", text)
    best = next(t for t in complete if t.number == int(number))
    assert best.value == best_value
    (run_dir,) = [Path(line.rsplit("run dir: ", 1)[1]) for line in lines if "| run dir: " in line]
    config = saved(run_dir)
    # sampled (or the baseline's): written where they differ from the presets under it, and trained either way
    for key, value in {**best.params, **best.user_attrs.get("baseline_values", {})}.items():
        section, name = key.split(".")
        assert config[section][name] == value and (name not in preset.get(section, {})
                                                   or preset[section][name] == value), key
    assert run_dir.name.endswith("_ppo_CartPole-v1") and config["run"]["max_steps"] == 6144
    assert all(config[key.split(".")[0]][key.split(".")[1]] == value for key, value in best.params.items())
    assert config["agent"]["n_steps"] == 64  # the command line's value, kept in the preset
    assert config["agent"]["value_loss_coef"] == 1.0  # the fallback's unsearched value, kept too
    assert config["env"]["n_envs"] == 8  # the command line's
    assert config["fallback"] == "auto"  # the pair is tuned now: no fallback merged over the preset


@pytest.mark.e2e
def test_the_portfolio_trains_the_agents_tuned_values_for_other_envs_of_the_kind_first(tmp_path):
    """A2C on MountainCar-v0 (discrete actions, vector observations): after trial 0 (the fallback's values), trials
    1 and 2 train shipped A2C presets of other discrete vector envs, the one tuned for the training length nearest
    the pair's first (tuned/a2c_lunarlander.yaml, 2e5 steps, then a2c_acrobot.yaml, 5e5, by name before
    a2c_cartpole.yaml: its values are the fallback's, so it is no trial of its own), each with its own values of
    unsearched keys too (lr_schedule); image presets (Pong) and the pair's own env are no candidates."""
    result = rlexp(tmp_path, "mode=autotune", "agent=a2c", "env=generic", "env.id=MountainCar-v0", "zoo.rows=false",
                   "run.max_steps=6144", "autotune.budget=2.5", "autotune.trials=3", "autotune.seeds=1",
                   "autotune.rungs=2", "autotune.eval_episodes=2", "autotune.portfolio=2")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert ("trials 1-2 start from the values tuned for other envs: tuned/a2c_lunarlander.yaml, tuned/a2c_acrobot.yaml "
            "(autotune.portfolio)" in result.stdout)
    (study,) = (tmp_path / "multirun").iterdir()
    agents = [saved(study / f"trial_{n}")["agent"] for n in range(3)]
    envs = [saved(study / f"trial_{n}")["env"] for n in range(3)]
    # trial 0: conf/fallbacks/a2c_discrete_vector.yaml
    assert (agents[0]["gamma"], agents[0]["normalize_obs"], envs[0]["n_envs"]) == (0.99, False, 8)
    # trial 1: RL Zoo's LunarLander row (conf/tuned/a2c_lunarlander.yaml)
    assert (agents[1]["gamma"], agents[1]["lr"], agents[1]["lr_schedule"], agents[1]["entropy_coef"],
            envs[1]["n_envs"]) == (0.995, 8.3e-4, "linear", 1e-5, 8)
    # trial 2: RL Zoo's Acrobot row (conf/tuned/a2c_acrobot.yaml)
    assert (agents[2]["normalize_obs"], agents[2]["normalize_reward"], agents[2]["gamma"], envs[2]["n_envs"]) == (
        True, True, 0.99, 16)
    assert all(env["id"] == "MountainCar-v0" for env in envs)


@pytest.mark.e2e
def test_the_portfolio_tries_the_same_task_with_the_other_kind_of_actions_first(tmp_path):
    """PPO on LunarLanderContinuous-v3 (continuous actions): trial 1 trains the shipped PPO preset of LunarLander-v3
    (discrete actions, RL Zoo's row, which RL Zoo also gives LunarLanderContinuous), before the continuous presets
    (MuJoCo's, of the pair's training length)."""
    result = rlexp(tmp_path, "mode=autotune", "agent=ppo", "env=generic", "env.id=LunarLanderContinuous-v3",
                   "zoo.rows=false",
                   *[a for a in BUDGET if not a.startswith(("autotune.trials", "autotune.portfolio"))],
                   "autotune.trials=2", "autotune.portfolio=1")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert ("trials 1-1 start from the values tuned for other envs: tuned/ppo_lunarlander.yaml (autotune.portfolio)"
            in result.stdout)
    (study,) = (tmp_path / "multirun").iterdir()
    trial = saved(study / "trial_1")
    # conf/tuned/ppo_lunarlander.yaml's values on the pair's env
    assert (trial["agent"]["n_steps"], trial["agent"]["gamma"], trial["agent"]["lam"], trial["agent"]["ppo_epochs"],
            trial["env"]["n_envs"], trial["env"]["id"]) == (1024, 0.999, 0.98, 4, 16, "LunarLanderContinuous-v3")


@pytest.mark.e2e
def test_a_later_plain_run_takes_the_tuned_preset_and_says_so_first(tuned):
    cwd, result, _ = tuned
    words = shlex.split(result.stdout.splitlines()[-1].split(": ", 1)[1])
    final = saved(Path(re.search(r"\| run dir: (\S+)", result.stdout).group(1)))
    plain = rlexp(cwd, *words[3:], "run.max_steps=256", "run_dir=outputs/plain")
    assert plain.returncode == 0, plain.stdout[-2000:] + plain.stderr[-2000:]
    assert plain.stdout.splitlines()[0] == (f"tuned preset for ppo+CartPole-v1: {TUNED} (your own: "
                                            f"{cwd / 'rlexp_conf' / TUNED})")
    config = saved(cwd / "outputs/plain")
    assert {k: config[k] for k in ("agent", "env", "model")} == {k: final[k] for k in ("agent", "env", "model")}
    # the command the user typed finds it too: env=generic env.id=CartPole-v1
    typed = rlexp(cwd, "--config-dir", "rlexp_conf", "env=generic", "env.id=CartPole-v1", "run.eval_episodes=2",
                  "zoo.rows=false", "run.max_steps=256", "run_dir=outputs/typed")
    assert typed.returncode == 0, typed.stdout[-2000:] + typed.stderr[-2000:]
    assert typed.stdout.splitlines()[0] == (f"tuned preset for ppo+CartPole-v1: {TUNED} (your own: "
                                            f"{cwd / 'rlexp_conf' / TUNED})")
    config = saved(cwd / "outputs/typed")
    assert config["agent"] == final["agent"] and config["model"] == final["model"]


@pytest.mark.e2e
def test_bad_input_is_one_line_and_writes_nothing(tmp_path):
    cases = {  # the command line, a part of the error line
        "no search space": (["agent=vpg"], "agent=vpg has no search space (conf/sweep/vpg.yaml)"),
        "config dir": (["--config-dir", "conf"], f"--config-dir conf: {tmp_path / 'config dir/conf/tuned'} is a file"),
        "budget": (["autotune.budget=0"], "autotune.budget=0 must be a number > 0"),
        "trials": (["autotune.trials=2.5"], "autotune.trials=2.5 must be an integer"),
        "portfolio": (["autotune.portfolio=-1"], "autotune.portfolio=-1 must be an integer >= 0"),
        # 4 trials x 2 seeds at 3 lengths: 2 x (9 + 3 x 7/3) = 32 first-rung lengths in 20 steps
        "too small": (["run.max_steps=20", "autotune.budget=1", "autotune.trials=4"], "autotune.rungs=3 leaves trials no env steps; "
                      "raise autotune.budget or run.max_steps"),
        "eval actions": (["autotune.eval_deterministic=maybe"], "autotune.eval_deterministic='maybe' must be auto, "
                         "true or false"),
        "generic": (["env=generic", "env.id=pendulum"], "env/pendulum.yaml is one of rlexp's env presets; run it "
                    "as env=pendulum"),
        "sweeper setting": (["hydra.sweeper.pruner=foo"], "hydra.sweeper.pruner=foo is unknown"),
        "bad value": (["agent.lr=abc"], "agent.lr='abc' must be"),
        "env id": (["env=generic", "env.id=NoSuchEnv-v0"], "NoSuchEnv-v0"),
        "tuned": (["tuned=ppo_cartpole"], "mode=autotune writes the pair's tuned preset itself"),
        # TD3 Pendulum: 20,000 steps for 10 trials x 2 seeds at 3 lengths, 2 x (9 + 9 x 7/3) = 60 first-rung
        # lengths of 333 steps: trials of up to 2,997, all random warm-up (10,000 random steps)
        # 20,000 / 2 seeds = 10,000 per seed, all of it the 10 trials' warm-ups of 10,000 random steps each
        "warm-up": (["agent=td3", "env=pendulum", "autotune.budget=1"], "autotune.budget=1: 1 x run.max_steps=20,000 over autotune.trials=10 "
                    "x autotune.seeds=2 with autotune.rungs=3 leaves trials no env steps past each trial's "
                    "buffer.initial_size=10,000 random steps"),
        # SAC's search space searches buffer.initial_size, here fixed at 10,000: trial 0's warm-up, which every
        # trial's rungs count from, as TD3's above
        "searched warm-up": (["agent=sac", "env=pendulum", "buffer.initial_size=10000", "autotune.budget=1"],
                             "leaves trials no env steps past each trial's buffer.initial_size=10,000 random steps"),
        # +sweep=td3 sets run.max_steps=5e4 (a plain sweep's trial length): the budget stays the pair's 20,000
        "sweep budget": (["agent=td3", "env=pendulum", "+sweep=td3", "autotune.budget=1"], "1 x run.max_steps=20,000 over autotune.trials"),
    }
    (tmp_path / "config dir/conf").mkdir(parents=True)
    (tmp_path / "config dir/conf/tuned").write_text("")  # where the tuned presets would go
    runs = {name: started(tmp_path / name, "mode=autotune", *args, merged=False) for name, (args, _) in cases.items()}
    for name, process in runs.items():
        output, errors = process.communicate(timeout=300)
        assert process.returncode == 2, (name, output, errors)
        (line,) = errors.strip().splitlines()
        assert line.startswith("error: ") and cases[name][1] in line, (name, errors)
        left = sorted(str(p.relative_to(tmp_path / name)) for p in (tmp_path / name).rglob("*"))
        assert left == (["conf", "conf/tuned"] if name == "config dir" else []), (name, left)


@pytest.mark.e2e
def test_the_first_log_line_names_the_preset_the_run_uses(tmp_path):
    tiny = ["run.max_steps=64", "run.eval_episodes=1", "agent.n_steps=8"]
    runs = {
        "RL Zoo's row for ppo+cartpole: ppo.yml CartPole-v1 (rl-baselines3-zoo 2.9.0a2), with tuned/ppo_cartpole.yaml "
        "(shipped with rlexp) over it":
            started(tmp_path / "a", "env=cartpole", *tiny),
        "RL Zoo's row for ppo+Acrobot-v1: ppo.yml Acrobot-v1 (rl-baselines3-zoo 2.9.0a2)":
            started(tmp_path / "b", "env=generic", "env.id=Acrobot-v1", *tiny),
        "no tuned preset for ppo+Acrobot-v1: using fallbacks/ppo_discrete_vector.yaml (SB3's defaults and RL Zoo's "
        "values for that kind of env; fallback=none keeps the agent's own); tune it: python -m rlexp mode=autotune "
        "agent=ppo env=generic env.id=Acrobot-v1":
            started(tmp_path / "d", "env=generic", "env.id=Acrobot-v1", "zoo.rows=false", *tiny),
        "no tuned preset for ppo+Acrobot-v1: fallback=none, so the agent preset's own values; tune it: python -m "
        "rlexp mode=autotune agent=ppo env=generic env.id=Acrobot-v1":
            started(tmp_path / "c", "env=generic", "env.id=Acrobot-v1", "fallback=none", *tiny),
    }
    for line, process in runs.items():
        output, _ = process.communicate(timeout=300)
        assert process.returncode == 0 and output.splitlines()[0] == line, output


# ----- without training --------------------------------------------------------------------------------------
def test_successive_halving_prunes_a_trial_behind_at_a_rung_once_warmup_trials_reached_it():
    def study(warmup_trials):
        s = optuna.create_study(direction="maximize",
                                pruner=make_pruner("halving", warmup_trials, 100, max_steps=1000))  # rungs 100, 300
        first = s.ask()
        first.report(10.0, 100)
        assert not first.should_prune()  # the first at a rung goes on
        return s

    def pruned(s, value, step):
        trial = s.ask()
        trial.report(value, step)
        return trial.should_prune()

    s = study(warmup_trials=1)
    assert not pruned(s, 1.0, 50)  # before the first rung
    assert pruned(s, 5.0, 100)  # at the rung, behind the only other trial there: not in the best third
    assert not pruned(s, 20.0, 100)  # ahead of both
    assert pruned(study(warmup_trials=2), 5.0, 100)  # two trials at the rung: compared
    assert not pruned(study(warmup_trials=3), 5.0, 100)  # two of the three it waits for: goes on


@pytest.mark.parametrize("settings,max_steps,lengths", [
    # budget 1 on A2C LunarLander's 200,000: 2 seeds x (9 + 9 x 7/3 + 1 x (9 - 7/3)) = 73.3 first-rung lengths
    # of 2,727 (one trial running at a time: 1 job slot here, 2 seeds)
    ({"budget": 1}, 200_000, (2_727, 24_543)),
    # without halving (1 rung): the budget split evenly, 100,000 / (5 trials x 1 seed)
    ({"rungs": 1, "trials": 5, "seeds": 1, "budget": 1}, 50_000, (10_000, 10_000)),
    # 4 rungs, 2 trials, budget 2: 27 + 1 x (1 + 3 x 2/3) + 1 x (27 - 3) = 54 lengths of 2 x 90,000 / 54 = 3,333
    ({"rungs": 4, "trials": 2, "seeds": 1, "budget": 2}, 90_000, (3_333, 89_991)),
    # budget 10: 2,000,000 / 73.3 = 27,272 would make the longest trial 245,448 steps, past the training's
    # 200,000: capped at 200,000 // 9 = 22,222
    ({"budget": 10}, 200_000, (22_222, 199_998)),
])
def test_the_budget_sets_the_first_rung_so_that_the_expected_study_fits(settings, max_steps, lengths):
    from omegaconf import OmegaConf

    from rlexp.commands.autotune.budget import check_budget

    defaults = OmegaConf.load(Path(__file__).parents[1] / "conf" / "config.yaml").autotune
    budget = check_budget(OmegaConf.create({"autotune": {**defaults, **settings}}), max_steps)
    assert (budget.eval_interval, budget.trial_steps) == lengths
    assert budget.env_steps == int(settings.get("budget", defaults.budget) * max_steps)
    assert budget.eval_deterministic is False


@pytest.mark.parametrize("space,agent,env", [("a2c", "a2c", "pendulum"), ("trpo", "trpo", "pendulum"),
                                             ("td3", "td3", "pendulum"), ("ddpg", "ddpg", "pendulum"),
                                             ("sac", "sac", "pendulum"), ("a2c", "a2c", "cartpole"),
                                             ("a2c_continuous", "a2c", "pendulum"), ("dqn", "dqn", "cartpole"),
                                             ("ppo", "ppo", "cartpole"), ("ppo_continuous", "ppo", "pendulum"),
                                             ("trpo_continuous", "trpo", "pendulum")])
def test_the_search_spaces_compose_and_search_settings_the_agent_has(space, agent, env):
    from hydra import compose, initialize_config_module

    with initialize_config_module(config_module="rlexp.conf", version_base="1.3"):
        c = compose(config_name="config", overrides=[f"+sweep={space}", f"agent={agent}", f"env={env}"],
                    return_hydra_config=True)
        assert c.run.max_steps == 5e4 and c.hydra.sweeper.n_trials == 40
        dists, fixed, grid = search_space([f"{k}={v}" for k, v in c.hydra.sweeper.params.items()])
        assert len(dists) >= 5 and not grid
        assert "agent.lr" in dists and dists["agent.lr"].log
        for key in c.hydra.sweeper.params:
            if "." not in key:  # a config group: each option composes
                for option in dists[key].choices:
                    compose(config_name="config", overrides=[f"agent={agent}", f"env={env}", f"{key}={option}"])
                continue
            section, name = key.split(".")
            assert name in c[section], key
    if space in ("a2c_continuous", "ppo_continuous", "trpo_continuous"):  # the discrete space and gSDE
        assert {"agent.normalize_obs", "env.n_envs", "model", "agent.use_sde", "agent.sde_sample_freq"} <= set(dists)
