"""Hydra's other launchers under rlexp's sweeper, with the stand-in agent (tests/standin): joblib's keeps the
console to one line per trial and its n_jobs is pointed to the sweeper's; submitit's local launcher writes into
the study's own folder."""
import os
import subprocess
import sys
from pathlib import Path

import yaml

STANDIN = Path(__file__).parent / "standin"
SWEEP = ["agent=standin", "env=cartpole", "run.max_steps=300", "run.eval_episodes=2",
         "agent.lr=tag(log,interval(1e-5,1e-1))", "hydra.sweeper.n_trials=3"]


def standin(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, RLEXP_STANDIN="1", TF_CPP_MIN_LOG_LEVEL="3",
               PYTHONPATH=os.pathsep.join([str(STANDIN), *filter(None, [os.environ.get("PYTHONPATH")])]))
    return subprocess.run([sys.executable, "-m", "rlexp", "--config-dir", str(STANDIN / "conf"), "-m", *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_joblibs_launcher_prints_one_line_per_trial(tmp_path):
    """hydra/launcher=joblib: the sweep's own lines only (the study, one line per trial, the best and its
    commands): neither joblib's per-job lines with the trial's internal spec nor each trial's training lines,
    which are in its main.log."""
    result = standin(tmp_path, *SWEEP, "hydra/launcher=joblib", "hydra.sweeper.study_name=j")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["new", "sweep", "trial", "trial", "trial", "best:", "run", "or:"]
    assert "RLEXP_OPTUNA_TRIAL" not in result.stdout + result.stderr
    assert "training StandIn" in (tmp_path / "multirun/j/trial_0/main.log").read_text()


def test_joblibs_n_jobs_is_pointed_to_the_sweepers(tmp_path):
    result = standin(tmp_path, *SWEEP, "hydra/launcher=joblib", "hydra.launcher.n_jobs=3")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: hydra.launcher.n_jobs=3: rlexp's sweeper runs hydra.sweeper.n_jobs trials at once (now 2), handing "
        "the launcher one at a time; set hydra.sweeper.n_jobs=3 instead"]
    assert not (tmp_path / "multirun").exists()


def test_submitits_local_launcher_writes_into_the_studys_folder(tmp_path):
    """The default folder ${hydra.sweep.dir}/.submitit/%j is the study's, which the sweeper names after the
    launcher was made (it was multirun/None/.submitit for every study)."""
    result = standin(tmp_path, *SWEEP[:-1], "hydra.sweeper.n_trials=1", "hydra/launcher=submitit_local")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (study,) = (tmp_path / "multirun").iterdir()
    assert study.name.startswith("standin_cartpole_") and (study / ".submitit").is_dir()
    assert yaml.safe_load((study / "optimization_results.yaml").read_text())
