"""A user's own experiment through the real CLI, from a temporary directory: own presets (--config-dir wins
over the shipped ones), own env package and wrapper, evaluation during training, fine-tuning, a clean
console and outputs/ dir, and every input checked before work starts."""
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from test_cli import rlexp

pytestmark = pytest.mark.e2e
TESTS = Path(__file__).parent
TINY = ["run.max_steps=1024", "run.eval_episodes=2", "agent.n_steps=32", "env.n_envs=4"]
CORRIDOR = """defaults: [generic]
id: MyEnvs/Corridor-v0
n_envs: 2
imports: [my_envs]
kwargs: {length: 7}
wrappers:
  - {_target_: my_envs.wrappers.ScaleReward, scale: 2.0}
"""


@pytest.fixture(autouse=True)
def my_envs_importable(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))


def all_files(cwd: Path) -> set[Path]:
    return {p.relative_to(cwd) for p in cwd.rglob("*")}


def saved_config(run_dir: Path) -> dict:
    return yaml.safe_load((run_dir / ".hydra" / "config.yaml").read_text())


def returns_in(stdout: str) -> list[float]:
    return [float(line.rsplit("return", 1)[1].split()[0]) for line in stdout.splitlines() if "episode" in line
            and "return" in line]


def test_init_copies_presets_and_a_same_named_preset_in_the_config_dir_wins(tmp_path):
    result = rlexp(tmp_path, "mode=init", "+dir=myconf")
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert (tmp_path / "myconf/agent/ppo.yaml").exists() and (tmp_path / "myconf/agent_base.yaml").exists()
    assert not (tmp_path / "outputs").exists()
    again = rlexp(tmp_path, "mode=init", "+dir=myconf")
    assert "0 presets copied" in again.stdout and "existing files kept" in again.stdout
    mlp = tmp_path / "myconf/model/mlp.yaml"
    mlp.write_text(mlp.read_text().replace("units: 64", "units: 128"))
    shown = rlexp(tmp_path, "--config-dir", "myconf", "--cfg", "job")
    assert shown.stdout.count("units: 128") == 2 and "units: 64" not in shown.stdout
    trained = rlexp(tmp_path, "--config-dir", "myconf", *TINY, "run_dir=outputs/mine")
    assert trained.returncode == 0, trained.stderr
    assert [layer.get("units") for layer in saved_config(tmp_path / "outputs/mine")["model"]["layers"]] == [128, 128, None]


def test_incomplete_or_misspelt_env_preset_names_the_file_and_the_fix(tmp_path):
    (tmp_path / "myconf/env").mkdir(parents=True)
    preset = tmp_path / "myconf/env/acrobot.yaml"
    preset.write_text("id: Acrobot-v1\nn_envs: 2\n")
    result = rlexp(tmp_path, "--config-dir", "myconf", "env=acrobot")
    assert result.returncode == 2 and result.stdout == ""
    assert str(preset) in result.stderr and "defaults: [generic]" in result.stderr
    preset.write_text("defaults: [generic]\nid: Acrobot-v1\nn_env: 2\n")
    result = rlexp(tmp_path, "--config-dir", "myconf", "env=acrobot")
    assert result.returncode == 2 and "unknown key 'n_env'" in result.stderr
    assert not (tmp_path / "outputs").exists()


def test_own_env_package_and_wrapper_apply_in_train_play_and_eval(tmp_path):
    (tmp_path / "myconf/env").mkdir(parents=True)
    (tmp_path / "myconf/env/corridor.yaml").write_text(CORRIDOR)
    result = rlexp(tmp_path, "--config-dir", "myconf", "env=corridor", *TINY, "env.n_envs=2", "run_dir=outputs/c")
    assert result.returncode == 0, result.stderr
    assert "eval 14.00 ± 0.00 over 2 episodes" in result.stdout  # 7 steps of reward 1, scaled by 2
    history = pd.read_parquet(tmp_path / "outputs/c/history.parquet")
    assert set(history["episode_reward"]) == {14.0}
    play = rlexp(tmp_path, "--config-dir", "myconf", "mode=play", "+checkpoint=outputs/c", "play.episodes=2")
    assert play.returncode == 0 and returns_in(play.stdout) == [14.0, 14.0], play.stdout + play.stderr
    evaluated = rlexp(tmp_path, "mode=eval", "+checkpoint=outputs/c")  # the run's stored config holds the preset
    assert "eval: 14.00 ± 0.00 over 2 episodes" in evaluated.stdout, evaluated.stderr
    longer = rlexp(tmp_path, "--config-dir", "myconf", "env=corridor", *TINY, "env.kwargs.length=3",
                   "run_dir=outputs/c3")
    assert "eval 6.00 ± 0.00" in longer.stdout, longer.stderr


def test_a_wrapper_outside_gymnasium_rlexp_and_env_imports_is_one_line(tmp_path):
    (tmp_path / "myconf/env").mkdir(parents=True)
    (tmp_path / "myconf/env/corridor.yaml").write_text(CORRIDOR.replace("my_envs.wrappers.ScaleReward", "os.system"))
    result = rlexp(tmp_path, "--config-dir", "myconf", "env=corridor", *TINY)
    assert result.returncode == 2 and result.stdout == "" and len(result.stderr.strip().splitlines()) == 1
    assert "'os.system'" in result.stderr and "env.imports" in result.stderr
    assert not (tmp_path / "outputs").exists()


def test_sweep_over_an_env_kwarg_of_an_own_env(tmp_path):
    (tmp_path / "myconf/env").mkdir(parents=True)
    (tmp_path / "myconf/env/corridor.yaml").write_text(CORRIDOR)
    result = rlexp(tmp_path, "--config-dir", "myconf", "-m", "env=corridor", *TINY, "env.n_envs=2",
                   "env.kwargs.length=3,5", "hydra.sweeper.study_name=corridor", timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    values = sorted(saved_config(d)["env"]["kwargs"]["length"] for d in (tmp_path / "multirun/corridor").glob("trial_*"))
    assert values == [3, 5]
    objectives = sorted(float(v) for v in pd.read_csv(tmp_path / "multirun/corridor/trials.csv")["value"])
    assert objectives == [6.0, 10.0]


def test_a_sampled_env_kwarg_is_added_with_plus(tmp_path):
    (tmp_path / "myconf/env").mkdir(parents=True)
    (tmp_path / "myconf/env/corridor.yaml").write_text(CORRIDOR.replace("kwargs: {length: 7}", "kwargs: {}"))
    result = rlexp(tmp_path, "--config-dir", "myconf", "-m", "env=corridor", *TINY, "env.n_envs=2",
                   "+env.kwargs.length=int(interval(3,9))", "hydra.sweeper.n_trials=2",
                   "hydra.sweeper.study_name=corridor", timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    frame = pd.read_csv(tmp_path / "multirun/corridor/trials.csv")
    assert len(frame) == 2 and frame["params_+env.kwargs.length"].between(3, 9).all()
    assert (frame["value"] == 2.0 * frame["params_+env.kwargs.length"]).all()  # the wrapper doubles the length


def test_evaluation_during_training_keeps_the_best_evaluation_and_a_series(tmp_path):
    result = rlexp(tmp_path, "run.max_steps=8192", "run.eval_interval=2048", "run.eval_episodes=3",
                   "run.keep_checkpoints=2", "agent.n_steps=64", "run.target_reward=null", "run_dir=outputs/e",
                   "run.eval_deterministic=false")
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("over 3 stochastic episodes") == 5, result.stdout  # 4 during training, 1 final
    run = tmp_path / "outputs/e"
    evaluations = pd.read_parquet(run / "evaluations.parquet")
    assert list(evaluations["step"]) == [2048, 4096, 6144, 8192] and set(evaluations["episodes"]) == {3}
    assert sorted(p.name for p in (run / "checkpoints").glob("step_*.ckpt")) == ["step_6144.ckpt", "step_8192.ckpt"]
    assert b"eval/mean_return" in b"".join(p.read_bytes() for p in (run / "tb").iterdir())
    best = rlexp(tmp_path, "mode=eval", f"+checkpoint={run / 'checkpoints/best.ckpt'}", "run.eval_episodes=3")
    # the run's choice is kept, and the evaluation generator restarts: the best evaluation, exactly
    assert f"eval: {evaluations['mean_return'].max():.2f} ±" in best.stdout, best.stdout + best.stderr
    assert "over 3 stochastic episodes" in best.stdout


def test_init_from_starts_a_new_run_from_a_runs_weights(tmp_path):
    first = rlexp(tmp_path, *TINY, "run_dir=outputs/a")
    assert first.returncode == 0, first.stderr
    evaluated = rlexp(tmp_path, "mode=eval", "+checkpoint=outputs/a")
    frozen = rlexp(tmp_path, *TINY, "+init_from=outputs/a", "agent.lr=1e-12", "run_dir=outputs/b")
    assert frozen.returncode == 0, frozen.stderr
    mean = evaluated.stdout.split("eval: ")[1].split(" over")[0]
    assert f"eval {mean} over 2 episodes" in frozen.stdout  # steps far below float32 resolution: the loaded weights
    assert saved_config(tmp_path / "outputs/b")["init_from"] == "outputs/a"
    mismatch = rlexp(tmp_path, *TINY, "+init_from=outputs/a", "model=mlp_large", "run_dir=outputs/c")
    assert mismatch.returncode == 2 and "+init_from=outputs/a: its model does not fit" in mismatch.stderr
    assert not (tmp_path / "outputs/c").exists()


def test_play_eval_plot_and_failed_starts_leave_no_run_dir_and_resume_keeps_its_own(tmp_path):
    first = rlexp(tmp_path, *TINY)
    assert first.returncode == 0 and first.stderr == "", first.stderr  # no TensorFlow/absl/CUDA lines
    before = all_files(tmp_path)
    (run,) = [p.parent.parent for p in tmp_path.glob("outputs/*/*/checkpoints/last.ckpt")]
    for args in (["mode=play"], ["mode=eval"], ["mode=plot", f"+runs=[{run}]", "+output=runs.png"],
                 ["env=acrobot_typo"], ["agent.lr=abc"], ["env.id=NoSuchEnv-v0"]):
        rlexp(tmp_path, *args)
    assert all_files(tmp_path) - before == {Path("runs.png"), Path("runs.md"), Path("runs.csv")}  # the plot, its table
    log_lines = len((run / "main.log").read_text().splitlines())
    resumed = rlexp(tmp_path, *TINY, "run.max_steps=2048", f"+resume={run}")
    assert resumed.returncode == 0, resumed.stderr
    assert all_files(tmp_path) - before == ({Path("runs.png"), Path("runs.md"), Path("runs.csv")}
                                            | {p.relative_to(tmp_path) for p in run.rglob("*")} - before)
    assert len((run / "main.log").read_text().splitlines()) > log_lines and f"resumed {run}" in (run / "main.log").read_text()


def test_resume_accepts_the_training_command_and_refuses_changed_values(tmp_path):
    rlexp(tmp_path, "agent=dqn", "run.max_steps=600", "run.eval_episodes=1", "buffer.initial_size=200",
          "run_dir=outputs/d")
    same = rlexp(tmp_path, "agent=dqn", "buffer.initial_size=200", "run.max_steps=900", "run.eval_episodes=1",
                 "+resume=outputs/d")
    assert same.returncode == 0, same.stderr
    changed = rlexp(tmp_path, "agent=dqn", "agent.lr=0.5", "+resume=outputs/d")
    assert changed.returncode == 2 and "agent.lr (run: " in changed.stderr and "here: 0.5" in changed.stderr


BAD_INPUT = [("run.max_steps=abc", "run.max_steps='abc' must be a number"),
             ("seed=notanint", "seed='notanint' must be an integer"),
             ("run.max_steps=-5", "run.max_steps=-5 must be a number > 0"),
             ("run.eval_episodes=-1", "run.eval_episodes=-1 must be an integer >= 0"),
             ("run.eval_interval=1.5", "run.eval_interval=1.5 must be an integer"),
             ("run.keep_checkpoints=3", "set run.eval_interval too"),
             ("play.episodes=0", "play.episodes=0 must be an integer >= 1"),
             ("run.progress=fancy", "run.progress='fancy' must be one of"),
             ("agent=base", "Could not find 'agent/base'")]


@pytest.mark.parametrize("arg, message", BAD_INPUT, ids=[a for a, _ in BAD_INPUT])
def test_bad_input_is_one_line_on_stderr_before_any_work(tmp_path, arg, message):
    result = rlexp(tmp_path, arg)
    assert result.returncode == 2 and result.stdout == ""
    assert message in result.stderr and "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_help_does_not_offer_the_shared_agent_options_as_a_preset(tmp_path):
    groups = rlexp(tmp_path, "--help").stdout.split("Config groups")[1].split("Every key")[0]
    agents = next(line for line in groups.splitlines() if line.strip().startswith("agent:"))
    assert "base" not in agents and "ppo" in agents


def test_a_run_that_ends_before_its_first_gradient_step_warns(tmp_path):
    result = rlexp(tmp_path, "agent=td3", "env=pendulum", "run.max_steps=300", "run.eval_episodes=1")
    assert result.returncode == 0
    assert "ends before the first gradient step" in result.stderr and "nothing will be learned" in result.stderr


def test_model_auto_shows_its_layers_and_they_can_be_overridden(tmp_path):
    td3 = rlexp(tmp_path, "agent=td3", "env=pendulum", "--cfg", "job").stdout
    assert "name: mlp_400_300" in td3 and "units: 400" in td3
    assert "name: nature_cnn" in rlexp(tmp_path, "env=pong", "--cfg", "job").stdout
    assert "name: mlp_large" in rlexp(tmp_path, "agent=dqn", "model=auto", "--cfg", "job").stdout
    result = rlexp(tmp_path, *TINY, "model.layers.0.units=16", "run_dir=outputs/m")
    assert result.returncode == 0, result.stderr
    assert saved_config(tmp_path / "outputs/m")["model"]["layers"][0]["units"] == 16


def test_python_api_prints_no_tensorflow_noise(tmp_path):
    code = ("from rlexp import PPO, make_envs\n"
            "agent = PPO(make_envs('CartPole-v1', n_envs=2, seed=0), n_steps=16, mini_batches=1, quiet=True)\n"
            "agent.fit(64)\n"
            "agent.play(make_envs('CartPole-v1', render_mode='rgb_array'), video_dir='videos')\n")
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", "SDL_VIDEODRIVER")}
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, env=env,
                            timeout=300)
    assert result.returncode == 0 and result.stderr == "", result.stderr
