"""What a study hands back: tuned/best.yaml and the printed commands train the best trial's whole configuration
again (the fallback preset's values, the budget, an own env preset from --config-dir), and a study of
env=generic is named after the env it ran."""
import os
import shlex
import subprocess
from pathlib import Path

import pytest
from forked_cli import run_cli
import yaml
from conftest import study_folder

pytestmark = pytest.mark.e2e
TESTS = Path(__file__).parent
SECTIONS = ("agent", "env", "model", "buffer", "run")  # the hyperparameters; seed, paths and mode aside
BEACON = "defaults: [generic]\nid: MyEnvs/Corridor-v0\nimports: [my_envs]\nkwargs: {length: 7}\n"


def rlexp(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """The real CLI in a subprocess, with tests/ importable (the own env package my_envs)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3",
               PYTHONPATH=os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    return run_cli(args, cwd, env, timeout=600)


def printed(stdout: str, prefix: str) -> list[str]:
    """The command after `prefix` on the sweep's last lines, as words (its trailing note in brackets dropped)."""
    (line,) = [x for x in stdout.splitlines() if x.startswith(prefix)]
    words = shlex.split(line[len(prefix):].split("   (")[0])
    assert words[:3] == ["python", "-m", "rlexp"], line
    return words[3:]


def hyperparameters(config: dict) -> dict:
    return {k: config.get(k) for k in SECTIONS}


def trained_config(cwd: Path, args: list[str], run_dir: str) -> dict:
    result = rlexp(cwd, *args, f"run_dir={run_dir}")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return yaml.safe_load((cwd / run_dir / ".hydra" / "config.yaml").read_text())


def test_best_preset_and_printed_commands_reproduce_the_best_trial(tmp_path):
    """PPO on an own env preset (env=beacon in a config dir) has no tuned preset: every trial trains with the
    fallback's values (8 envs, 32 minibatches, observation normalisation) under the sweep's own, on the budget
    the sweep set."""
    (tmp_path / "myconf/env").mkdir(parents=True)
    (tmp_path / "myconf/env/beacon.yaml").write_text(BEACON)
    sweep = rlexp(tmp_path, "-m", "--config-dir", "myconf", "env=beacon", "run.max_steps=512", "run.eval_episodes=2",
                  "agent.n_steps=32", "agent.ppo_epochs=2", "agent.lr=tag(log,interval(1e-4,1e-2))",
                  "hydra.sweeper.n_trials=2")
    assert sweep.returncode == 0, sweep.stdout[-3000:] + sweep.stderr[-3000:]
    folder = study_folder(tmp_path, "ppo_beacon")
    best = yaml.safe_load((folder / "optimization_results.yaml").read_text())["best_trial"]
    trial = yaml.safe_load((folder / f"trial_{best}" / ".hydra" / "config.yaml").read_text())
    assert trial["fallback"] == "ppo_discrete_vector" and trial["env"]["n_envs"] == 8  # what must be kept
    assert trial["agent"]["mini_batches"] == 32 and trial["agent"]["normalize_obs"] is True
    assert trial["agent"]["n_steps"] == 32 and trial["run"]["max_steps"] == 512

    run_it, preset = printed(sweep.stdout, "run it: "), printed(sweep.stdout, "or: ")
    config_dir = str(tmp_path / "myconf")
    assert run_it[:2] == ["--config-dir", config_dir] and preset[:2] == ["--config-dir", config_dir]
    assert hyperparameters(trained_config(tmp_path, run_it, "outputs/run_it")) == hyperparameters(trial)
    from_preset = trained_config(tmp_path, preset, "outputs/preset")  # tuned=best: no fallback merged over it
    assert hyperparameters(from_preset) == hyperparameters(trial) and from_preset["fallback"] == "auto"
    (tmp_path / "myconf/tuned").mkdir()  # kept as the pair's tuned preset, as best.yaml's header says
    (tmp_path / "myconf/tuned/ppo_beacon.yaml").write_text((folder / "tuned" / "best.yaml").read_text())
    kept = trained_config(tmp_path, ["--config-dir", "myconf", "env=beacon"], "outputs/kept")
    assert hyperparameters(kept) == hyperparameters(trial) and kept["fallback"] == "auto"


def test_a_generic_env_study_is_named_after_the_env_id(tmp_path):
    result = rlexp(tmp_path, "-m", "agent=dqn", "env=generic", "env.id=MountainCar-v0", "run.max_steps=64",
                   "run.eval_episodes=1", "agent.lr=interval(1e-4,1e-3)", "hydra.sweeper.n_trials=1")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (folder,) = (tmp_path / "multirun").iterdir()
    assert folder == study_folder(tmp_path, "dqn_MountainCar-v0")
    assert f"new study {folder.name} in" in result.stdout
    words = printed(result.stdout, "run it: ")
    assert words[:3] == ["agent=dqn", "env=generic", "env.id=MountainCar-v0"], words
    header = (folder / "tuned/best.yaml").read_text()
    assert "copy this file to your config dir as tuned/dqn_MountainCar-v0.yaml\n" in header
