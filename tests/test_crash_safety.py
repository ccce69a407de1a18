"""What survives a full disk, a damaged checkpoint and a second process on the same run: one line that is true to
what is on disk, +resume that continues from what is there, and one writer per run dir."""
import errno
import logging
import os
import signal
import subprocess
import sys
import time
import zipfile

import numpy as np
import pandas as pd
import pytest

from rlexp.errors import UserError
from rlexp.runs.checkpoints import DamagedCheckpoint
from crashes import Killed, crash_in_the_third_iteration
from test_cli import rlexp as cli
from test_ux import rlexp as cli_limited

TINY_DQN = ["agent=dqn", "run.eval_episodes=1", "run.progress=log", "seed=0"]
TINY_PPO = ["agent.n_steps=32", "env.n_envs=4", "agent.mini_batches=1", "run.eval_episodes=1", "seed=0"]


def ppo():
    from rlexp import PPO, make_envs

    return PPO(make_envs("CartPole-v1", n_envs=2, seed=0), seed=0, n_steps=8, mini_batches=1, quiet=True)


def history_is_consistent(run) -> pd.DataFrame:
    df = pd.read_parquet(run / "history.parquet")
    assert (np.diff(df["step"]) > 0).all() and list(df["episode"]) == list(range(1, len(df) + 1))
    return df


def one_line(result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.stdout + result.stderr, result.stderr[-3000:]
    return lines[0]


# ----- a full disk ----------------------------------------------------------------------------------------
def test_a_write_failure_says_which_checkpoint_resume_will_use(tmp_path):
    from rlexp.runs.checkpoints import write_failure

    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text("seed: 0\n")
    full = OSError(errno.ENOSPC, "No space left on device", str(run / "history.parquet"))
    assert write_failure(full, run) == (
        f"could not write {run}/history.parquet: No space left on device; the run has no checkpoint to resume from "
        f"yet: free space (or fix permissions), then python -m rlexp +resume={run} trains it again from step 0")
    agent = ppo()
    agent.fit(max_steps=48, progress="none")
    agent.save(run / "checkpoints" / "last.ckpt")
    assert write_failure(full, run) == (
        f"could not write {run}/history.parquet: No space left on device; {run}/checkpoints/last.ckpt (step 48) is "
        f"intact: free space (or fix permissions), then continue with python -m rlexp +resume={run}")


@pytest.mark.e2e
def test_a_full_disk_before_the_first_last_checkpoint_then_resume(tmp_path):
    """DQN's last.ckpt (with the replay buffer, ~1.2 MB), written after the first iteration, does not fit under
    the file-size limit: the run ends with one line saying there is no checkpoint to resume from yet, and +resume
    (with space again) trains the run from step 0 in the same dir."""
    args = [*TINY_DQN, "run.max_steps=3000", "run.checkpoint_interval=1000", "run_dir=outputs/full"]
    full = cli_limited(tmp_path, *args, max_file_size=800_000)
    run = tmp_path / "outputs" / "full"
    assert full.returncode == 1, full.stderr[-3000:]
    assert one_line(full) == (
        f"error: could not write {run}/checkpoints/last.ckpt: File too large; the run has no checkpoint to resume "
        f"from yet: free space (or fix permissions), then python -m rlexp +resume={run} trains it again from step 0")
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == []  # no half-written file
    resumed = cli(tmp_path, f"+resume={run}")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"{run} has no checkpoint to resume yet: training it again from step 0 with its config" in resumed.stdout
    from rlexp.agents.base import Agent

    assert Agent.read_state(run / "checkpoints" / "last.ckpt")["steps"] >= 3000
    assert history_is_consistent(run)["step"].max() < 3000 + 200
    assert [p.name for p in (tmp_path / "outputs").iterdir()] == ["full"]


# ----- a crash (kill -9) ----------------------------------------------------------------------------------
def test_a_crash_after_the_first_iterations_leaves_a_checkpoint_to_resume(tmp_path):
    """With an interval far longer than the run, last.ckpt is still written after the first iteration (one fused
    call of rollouts): a crash during the third loses two iterations, not the run. Before, a run killed within its
    first interval (30 s by default) had no last.ckpt at all and +resume trained it again from step 0."""
    from rlexp.runs.checkpoints import resume_checkpoint

    agent = ppo()
    steps = crash_in_the_third_iteration(agent)
    with pytest.raises(Killed):
        agent.fit(max_steps=10_000, run_dir=tmp_path, checkpoint_interval=3600, progress="none")
    assert resume_checkpoint(tmp_path, "+resume=r") == tmp_path / "checkpoints" / "last.ckpt"
    assert 0 < steps[0] < steps[1]
    assert agent.read_state(tmp_path / "checkpoints" / "last.ckpt")["steps"] == steps[0]


def test_a_checkpoint_that_is_slow_to_write_is_written_less_often():
    """run.checkpoint_interval, unless writing one takes more than 2% of it: then 50x its write time."""
    from rlexp.runs.checkpoints import checkpoint_wait

    assert checkpoint_wait(10, 0.03) == 10  # a PPO CartPole checkpoint: ~30 ms
    assert checkpoint_wait(10, 0.2) == 10  # exactly 2%
    assert checkpoint_wait(10, 1.0) == pytest.approx(50.0)  # a replay buffer of ~300 MB: ~1 s
    assert checkpoint_wait(0, 1.0) == 0  # 0: after every iteration, as asked


def test_readme_states_the_default_checkpoint_interval():
    from pathlib import Path

    import yaml

    root = Path(__file__).resolve().parent.parent
    interval = yaml.safe_load((root / "conf" / "config.yaml").read_text())["run"]["checkpoint_interval"]
    assert interval == 10
    assert f"checkpoints after the first iteration, then every {interval} s (`run.checkpoint_interval`" in (
        root / "README.md").read_text()
    assert f"every `run.checkpoint_interval` seconds (default {interval};" in (root / "docs" / "safety.md").read_text()


# ----- a damaged checkpoint -------------------------------------------------------------------------------
def test_a_truncated_or_corrupted_checkpoint_is_one_line_naming_it(tmp_path):
    agent = ppo()
    agent.save(tmp_path / "last.ckpt")
    whole = (tmp_path / "last.ckpt").read_bytes()
    (tmp_path / "last.ckpt").write_bytes(whole[: len(whole) // 2])
    with pytest.raises(DamagedCheckpoint) as error:
        agent.read_state(tmp_path / "last.ckpt")
    assert str(error.value) == (f"checkpoint {tmp_path}/last.ckpt is not a readable rlexp checkpoint: damaged or "
                                "truncated (BadZipFile: File is not a zip file); no complete checkpoint of this run "
                                "is left: train it again")
    (tmp_path / "whole.ckpt").write_bytes(whole)
    with zipfile.ZipFile(tmp_path / "whole.ckpt") as original:  # the last byte of a weight array (stored as is)
        member = next(info for info in original.infolist() if info.filename.startswith("model/"))
        offset = member.header_offset + 30 + len(member.filename) + len(member.extra) + member.file_size - 1
    flipped = bytearray(whole)
    flipped[offset] ^= 0xFF
    (tmp_path / "flipped.ckpt").write_bytes(bytes(flipped))
    agent.read_state(tmp_path / "flipped.ckpt")  # the state member is intact
    with pytest.raises(DamagedCheckpoint, match=r"flipped.ckpt is not a readable rlexp checkpoint: damaged or "
                                                r"truncated \(BadZipFile: Bad CRC-32"):
        agent.load(tmp_path / "flipped.ckpt")


def test_resume_falls_back_to_the_kept_previous_checkpoint(tmp_path, caplog):
    from rlexp.runs.checkpoints import resume_checkpoint

    folder = tmp_path / "checkpoints"
    agent = ppo()
    agent.fit(max_steps=32, progress="none")
    agent.save(folder / "last.ckpt", keep_previous=True)
    agent.fit(max_steps=64, progress="none")
    agent.save(folder / "last.ckpt", keep_previous=True)
    assert agent.read_state(folder / "previous.ckpt")["steps"] == 32
    assert agent.read_state(folder / "last.ckpt")["steps"] == 64
    assert resume_checkpoint(tmp_path, "+resume=r") == folder / "last.ckpt"
    (folder / "last.ckpt").write_bytes((folder / "last.ckpt").read_bytes()[:1000])
    with caplog.at_level(logging.WARNING, logger="rlexp"):
        assert resume_checkpoint(tmp_path, "+resume=r") == folder / "previous.ckpt"
    ours = [r.getMessage() for r in caplog.records if r.name.startswith("rlexp")]  # not TensorFlow's retrace notes
    assert ours[0] == (f"warning: {folder}/last.ckpt is damaged (kept as last.ckpt.damaged): "
                       f"resuming from {folder}/previous.ckpt (step 32)")
    assert sorted(p.name for p in folder.iterdir()) == ["last.ckpt.damaged", "previous.ckpt"]
    (folder / "previous.ckpt").write_bytes(b"")
    (folder / "last.ckpt.damaged").rename(folder / "last.ckpt")
    with pytest.raises(DamagedCheckpoint, match=r"^\+resume=r: checkpoint .*/last.ckpt is not a readable rlexp "
                                                r"checkpoint: damaged or truncated \(BadZipFile"):
        resume_checkpoint(tmp_path, "+resume=r")


@pytest.mark.e2e
def test_resume_play_eval_and_init_from_with_a_truncated_checkpoint(tmp_path):
    run = tmp_path / "outputs" / "t"
    trained = cli(tmp_path, *TINY_PPO, "run.max_steps=512", "run.checkpoint_interval=0", "run_dir=outputs/t")
    assert trained.returncode == 0, trained.stderr[-2000:]
    from rlexp.agents.base import Agent

    previous_steps = Agent.read_state(run / "checkpoints" / "previous.ckpt")["steps"]
    last = run / "checkpoints" / "last.ckpt"
    last.write_bytes(last.read_bytes()[:5000])
    for args in (["mode=eval", f"+checkpoint={run}"], ["mode=play", f"+checkpoint={run}"],
                 [f"+init_from={run}", *TINY_PPO, "run.max_steps=64"]):
        refused = cli(tmp_path, *args)
        key = next(arg for arg in args if arg.startswith(("+checkpoint=", "+init_from=")))
        assert refused.returncode == 2 and one_line(refused) == (
            f"error: {key}: checkpoint {last} is not a readable rlexp checkpoint: damaged or truncated (BadZipFile: "
            f"File is not a zip file); {run}/checkpoints/previous.ckpt (step {previous_steps}) is complete: pass "
            "that file instead (+resume falls back to it)"), args
    resumed = cli(tmp_path, f"+resume={run}", "run.max_steps=1024")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert (f"warning: {last} is damaged (kept as last.ckpt.damaged): resuming from "
            f"{run}/checkpoints/previous.ckpt (step {previous_steps})") in resumed.stdout + resumed.stderr
    assert f"resumed {run} at step {previous_steps}" in resumed.stdout
    assert Agent.read_state(last)["steps"] >= 1024
    history_is_consistent(run)


# ----- one writer per run dir -----------------------------------------------------------------------------
def test_a_run_dir_lock_names_its_holder_and_a_dead_holder_does_not_block(tmp_path):
    from rlexp.runs.lock import RunLock

    held = RunLock(tmp_path).acquire("run_dir=r")
    with pytest.raises(UserError) as error:
        RunLock(tmp_path).acquire("+resume=r")
    assert str(error.value).startswith(f"+resume=r: process {os.getpid()} (")
    assert str(error.value).endswith(f") is training this run; wait for it to end, or stop it (kill {os.getpid()}) "
                                     "and resume then")
    held.release()
    RunLock(tmp_path).acquire("+resume=r").release()
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from pathlib import Path; "
                               "from rlexp.runs.lock import RunLock; lock = RunLock(Path(sys.argv[1])).acquire('k'); "
                               "print('locked', flush=True); time.sleep(60)", str(tmp_path)],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline() == "locked\n"
    with pytest.raises(UserError, match=rf"^\+resume=r: process {holder.pid} "):
        RunLock(tmp_path).acquire("+resume=r")
    holder.send_signal(signal.SIGKILL)  # kill -9: the OS drops its lock, its pid stays in the file
    holder.wait()
    assert (tmp_path / ".train.lock").read_text().startswith(f"{holder.pid}\n")
    RunLock(tmp_path).acquire("+resume=r").release()


@pytest.mark.e2e
def test_two_resumes_started_together_one_trains_the_other_exits_at_once(tmp_path):
    run = tmp_path / "outputs" / "two"
    first = cli(tmp_path, *TINY_DQN, "run.max_steps=1000", "run.checkpoint_interval=0", "run_dir=outputs/two")
    assert first.returncode == 0, first.stderr[-2000:]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    resumes = [subprocess.Popen([sys.executable, "-m", "rlexp", f"+resume={run}", "run.max_steps=12000"],
                                cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for _ in range(2)]
    ended = None
    while ended is None:
        ended = next((p for p in resumes if p.poll() is not None), None)
        time.sleep(0.05)
    other = resumes[1 - resumes.index(ended)]
    assert ended.returncode == 2 and other.poll() is None  # refused while the other still trains
    stderr = ended.stderr.read()
    assert stderr.strip().splitlines() == [f"error: +resume={run}: process {other.pid} (python -m rlexp "
                                           f"+resume={run} run.max_steps=12000) is training this run; wait for it "
                                           f"to end, or stop it (kill {other.pid}) and resume then"]
    out, err = other.communicate(timeout=300)
    assert other.returncode == 0, err[-2000:]
    from rlexp.agents.base import Agent

    assert Agent.read_state(run / "checkpoints" / "last.ckpt")["steps"] >= 12000
    df = history_is_consistent(run)
    assert df["episode"].is_unique and df["step"].max() < 12000 + 500


def test_divergence_names_the_last_good_checkpoint_or_says_there_is_none(tmp_path):
    from rlexp.runs.checkpoints import diverged

    error = RuntimeError("non-finite loss at step 96")
    assert diverged(error, tmp_path) == ("training diverged: non-finite loss at step 96; no checkpoint was written "
                                         "before it")
    agent = ppo()
    agent.fit(max_steps=48, progress="none")
    agent.save(tmp_path / "checkpoints" / "last.ckpt")
    assert diverged(error, tmp_path) == (f"training diverged: non-finite loss at step 96; {tmp_path}/checkpoints/"
                                         "last.ckpt (step 48) holds the last good weights")


def test_a_process_refused_before_the_holder_wrote_its_pid_waits_for_it(tmp_path):
    """The holder writes its pid and command just after taking the lock: a process refused in that moment
    reads them once they are there, not an empty file."""
    import fcntl
    import threading

    from rlexp.runs.lock import LOCK_NAME, RunLock

    holder = open(tmp_path / LOCK_NAME, "a+")
    fcntl.flock(holder.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)  # locked, nothing written yet

    def write_later():
        time.sleep(0.3)
        holder.write("4242\npython -m rlexp +resume=r\n")
        holder.flush()

    writer = threading.Thread(target=write_later)
    writer.start()
    with pytest.raises(UserError, match=r"^\+resume=r: process 4242 \(python -m rlexp \+resume=r\) is training"):
        RunLock(tmp_path).acquire("+resume=r")
    writer.join()
    holder.close()


SLEEPER = '''
import os, sys, time
from pathlib import Path
from rlexp.runtime.launch import run_jobs

def job(pid_file):
    Path(pid_file).write_text(str(os.getpid()))
    time.sleep(120)

if __name__ == "__main__":
    run_jobs(job, [(sys.argv[1],)], Path(sys.argv[2]), start_method=sys.argv[3])
'''


@pytest.mark.parametrize("start_method", ["forkserver", "spawn"])
def test_a_trial_ends_when_its_sweep_is_killed(tmp_path, start_method):
    """A sweep killed with SIGKILL (no `finally` runs) leaves no orphaned trial training on: the trial's process,
    a child of the forkserver rather than of the sweep, ends within seconds (before: it trained to its end)."""
    from pathlib import Path

    script, pid_file = tmp_path / "sweep.py", tmp_path / "trial.pid"
    script.write_text(SLEEPER)
    sweep = subprocess.Popen([sys.executable, str(script), str(pid_file), str(tmp_path / "logs"), start_method])
    deadline = time.monotonic() + 120
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline and sweep.poll() is None, "the trial never started"
        time.sleep(0.2)
    trial = int(pid_file.read_text())
    os.kill(trial, 0)  # running
    sweep.send_signal(signal.SIGKILL)
    sweep.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(trial, 0)
        except ProcessLookupError:
            return
        if Path(f"/proc/{trial}/stat").exists() and Path(f"/proc/{trial}/stat").read_text().split()[2] == "Z":
            return  # ended, not yet reaped by its parent
        time.sleep(0.2)
    os.kill(trial, signal.SIGKILL)
    raise AssertionError("the trial kept running after its sweep was killed")


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_stopped_run_saves_and_exits_with_the_signals_code(tmp_path, sig, code):
    """Ctrl-C or SIGTERM: the run ends at the next iteration with its checkpoint and history saved, says
    `done (interrupted)`, and exits 128 + the signal (130, 143), so scripts tell it from a finished run. Its
    main.log starts with the line that names the preset it trains."""
    proc = subprocess.Popen([sys.executable, "-m", "rlexp", "run.max_steps=1e8", "run.target_reward=null",
                             "run.progress=log", "agent.log_frequency=1", "run_dir=outputs/stopped"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    lines = []
    for line in proc.stdout:  # the first progress line: training has started
        lines.append(line)
        if line.startswith("step "):
            break
    proc.send_signal(sig)
    output = "".join(lines) + proc.communicate(timeout=120)[0]
    assert proc.returncode == code, output[-2000:]
    assert "done (interrupted)" in output and (tmp_path / "outputs/stopped/checkpoints/last.ckpt").exists()
    log_lines = (tmp_path / "outputs/stopped/main.log").read_text().splitlines()
    assert log_lines[0].endswith("RL Zoo's row for ppo+cartpole: ppo.yml CartPole-v1 (rl-baselines3-zoo 2.9.0a2), "
                                 "with tuned/ppo_cartpole.yaml (shipped with rlexp) over it"), log_lines[:2]
