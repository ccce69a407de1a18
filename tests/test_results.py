"""What a run reports and keeps: best.ckpt, the final line's totals, the plot's scores, TensorBoard after a
kill, and a quiet wandb."""
import collections
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pytest
from test_cli import TINY_PPO, rlexp, run_dirs

from rlexp.agents import PPO
from rlexp.envs.make import make_envs

FINAL = re.compile(r"^(done|already finished) \((\w+)\): ([\d,]+) steps in ([\d.]+) s \(([\d,]+) steps/s\) \| "
                   r"eval (-?[\d.]+) ± [\d.]+ over (\d+) episodes", re.M)


def final_line(stdout: str) -> tuple[str, str, int, float, int, float]:
    """(status, reason, steps, seconds, steps/s, eval mean) of a run's final line."""
    match = FINAL.search(stdout)
    assert match, stdout[-2000:]
    status, reason, steps, seconds, rate, mean, _ = match.groups()
    return status, reason, int(steps.replace(",", "")), float(seconds), int(rate.replace(",", "")), float(mean)


def test_best_needs_a_full_window_of_episodes():
    """A window of 3: the means after episodes 1-5 are 100, 50, 33.3, 16.7, 50; a best exists from the third
    episode on (33.3), and 50 beats it at the fifth."""
    agent = PPO(make_envs("CartPole-v1", n_envs=2, seed=0), seed=0, n_steps=8, mini_batches=1, reward_buffer_size=3)
    agent._finished = [(1, 100.0), (2, 0.0)]
    assert not agent._record_episodes(0.0) and agent.best_reward == -np.inf
    agent._finished = [(3, 0.0), (4, 50.0), (5, 100.0)]
    assert agent._record_episodes(0.0)
    assert list(agent.history.rows["mean_reward"]) == pytest.approx([100, 50, 100 / 3, 50 / 3, 50])
    assert list(agent.history.rows["best_reward"]) == pytest.approx([-np.inf, -np.inf, 100 / 3, 100 / 3, 50])


def test_the_python_api_docs_name_every_key_of_fits_summary():
    from pathlib import Path

    docs = (Path(__file__).parents[1] / "docs" / "python_api.md").read_text()
    (row,) = [line for line in docs.splitlines() if line.startswith("| `agent.fit(")]
    agent = PPO(make_envs("CartPole-v1", n_envs=2, seed=0), seed=0, n_steps=8, mini_batches=1)
    summary = agent.fit(max_steps=16, progress="none")
    assert [key for key in summary if f"`{key}`" not in row] == []


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two tiny PPO CartPole runs (about 50 episodes each, fewer than agent.reward_buffer_size=100); the second
    with logger=wandb, offline, no network, no account."""
    cwd = tmp_path_factory.mktemp("results")
    plain = rlexp(cwd, *TINY_PPO, "seed=1")
    assert plain.returncode == 0, plain.stdout[-2000:] + plain.stderr[-2000:]
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(WANDB_BASE_URL="http://127.0.0.1:9", HOME=str(cwd), TF_CPP_MIN_LOG_LEVEL="3")
    logged = subprocess.run([sys.executable, "-m", "rlexp", *TINY_PPO, "seed=2", "logger=wandb",
                             "logger.project=rlexp-test"], cwd=cwd, capture_output=True, text=True, timeout=300,
                            env=env)
    assert logged.returncode == 0, logged.stdout[-2000:] + logged.stderr[-2000:]
    return cwd, [plain, logged]


def test_without_a_full_window_there_is_no_best_and_eval_uses_last(runs):
    cwd, (result, _) = runs
    run = run_dirs(cwd)[0]
    assert len(pd.read_parquet(run / "history.parquet")) < 100
    assert not (run / "checkpoints" / "best.ckpt").exists()
    assert "no checkpoints/best.ckpt" in result.stdout
    best = rlexp(cwd, "mode=eval", f"+checkpoint={run / 'checkpoints' / 'best.ckpt'}", "run.eval_episodes=2")
    assert best.returncode == 0, best.stdout[-2000:] + best.stderr[-2000:]
    assert f"using {run / 'checkpoints' / 'last.ckpt'}" in best.stdout
    assert "reward_buffer_size=100" in best.stdout
    assert f"loaded {run / 'checkpoints' / 'last.ckpt'}" in best.stdout
    assert f"eval: {final_line(result.stdout)[5]:.2f} ±" in best.stdout  # the final weights, evaluated alike


def test_plot_scores_runs_by_their_final_evaluation(runs):
    cwd, results = runs
    finals = [final_line(r.stdout)[5] for r in results]
    plot = rlexp(cwd, "mode=plot", "+runs=outputs/*/*", "+output=cmp.png")
    assert plot.returncode == 0, plot.stdout[-2000:] + plot.stderr[-2000:]
    (row,) = pd.read_csv(cwd / "cmp.csv").to_dict("records")
    assert row["runs"] == 2 and row["score"] == "final evaluation, 2 episodes"
    assert row["iqm"] == pytest.approx(np.mean(finals), abs=0.01)  # the IQM of two scores is their mean
    assert "| final evaluation, 2 episodes |" in (cwd / "cmp.md").read_text()
    assert f"IQM {row['iqm']:.4g}" in plot.stdout and "(final evaluation, 2 episodes)" in plot.stdout


def test_a_final_evaluation_before_the_last_episodes_is_not_the_score(tmp_path):
    """A run resumed after its final evaluation and stopped: its last training mean is newer."""
    import json

    from test_seed_statistics import fake_run

    from rlexp.analysis.plots import load_run

    run = fake_run(tmp_path, "a", 1e-3, 0, [100, 2000, 3000], [10.0, 20.0, 30.0])
    (run / "summary.json").write_text(json.dumps({"final_eval": {"step": 2000, "mean_return": 99.0, "episodes": 5}}))
    assert load_run(run).score == (30.0, "last training mean, 3 episodes")
    (run / "summary.json").write_text(json.dumps({"final_eval": {"step": 3000, "mean_return": 99.0, "episodes": 5}}))
    assert load_run(run).score == (99.0, "final evaluation, 5 episodes")


def test_resume_reports_the_whole_runs_steps_and_training_time(runs, tmp_path):
    cwd, _ = runs
    run = tmp_path / "run"
    shutil.copytree(run_dirs(cwd)[0], run)
    longer = rlexp(tmp_path, f"+resume={run}", "run.max_steps=4096")
    assert longer.returncode == 0, longer.stdout[-2000:] + longer.stderr[-2000:]
    status, reason, steps, seconds, rate, _ = final_line(longer.stdout)
    history_seconds = pd.read_parquet(run / "history.parquet")["time"].iloc[-1]
    assert (status, reason, steps) == ("done", "max_steps", 4096)
    assert history_seconds - 0.05 <= seconds <= history_seconds + 1.0  # all sessions, as the history counts them
    # the line prints seconds to 0.1 s and the rate from the unrounded seconds, to the nearest step
    assert 4096 / (seconds + 0.05) - 0.5 <= rate <= 4096 / (seconds - 0.05) + 0.5
    again = rlexp(tmp_path, f"+resume={run}", "run.max_steps=4096")
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert "had already finished (max_steps): nothing to train" in again.stdout
    assert final_line(again.stdout)[:4] == ("already finished", "max_steps", 4096, seconds)


def test_tensorboard_holds_every_history_episode_once_after_kill_and_resume(tmp_path):
    """Killed between checkpoints (the history and TensorBoard flushed more often than the checkpoint) in a run
    far too long to end first, then resumed to a nearer run.max_steps: each episode of the history has its
    scalars exactly once."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from rlexp.agents.base import Agent

    args = [*TINY_PPO, "run.max_steps=1e9", "run.checkpoint_interval=1", "run.history_interval=0.1",
            "run.eval_episodes=0"]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.Popen([sys.executable, "-m", "rlexp", *args], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 240
        while time.time() < deadline and proc.poll() is None:
            found = run_dirs(tmp_path)
            if found and Agent.read_state(found[0] / "checkpoints" / "last.ckpt")["steps"] >= 1024:
                break
            time.sleep(0.1)
        time.sleep(0.5)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run ended before the kill"
    (run,) = run_dirs(tmp_path)
    steps = Agent.read_state(run / "checkpoints" / "last.ckpt")["steps"]
    assert steps >= 1024
    resumed = rlexp(tmp_path, f"+resume={run}", f"run.max_steps={steps + 1024}")
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    history = pd.read_parquet(run / "history.parquet")
    events = EventAccumulator(str(run / "tb"), size_guidance={"scalars": 0}, purge_orphaned_data=False)
    events.Reload()
    for tag, column in (("episode/return", "episode_reward"), ("episode/mean_return", "mean_reward")):
        scalars = events.Scalars(tag)
        assert collections.Counter(s.step for s in scalars) == collections.Counter(history["step"].tolist())
        by_step = {s.step: s.value for s in scalars}
        assert [by_step[s] for s in history["step"]] == pytest.approx(history[column].tolist(), rel=1e-6)


def test_tensorboard_rewrite_drops_later_scalars_duplicates_and_a_torn_record(tmp_path):
    """Event files as two killed sessions may leave them: the second repeats the first's scalars, the first ends
    in half a record. Resuming at step 4 keeps each scalar up to step 4 once and the history's episodes."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from rlexp.runs.history import History
    from rlexp.runs.tracking import TensorBoard

    for _ in range(2):
        tb = TensorBoard(tmp_path)
        for step in range(1, 7):
            tb.scalars(step, {"episode/return": step, "episode/mean_return": step / 2})
        tb.scalars(3, {"train/loss": 0.5})
        tb.scalars(6, {"train/loss": 0.25})
        tb.close()
    first = sorted(tmp_path.iterdir())[0]
    first.write_bytes(first.read_bytes() + b"\x10\x00\x00")  # a record cut short by a kill
    history = History()
    for step in range(1, 5):
        history.append(step, step, 0.0, 10.0 * step, 5.0 * step, 0.0)
    TensorBoard(tmp_path, resume=(history.rows, 4)).close()
    events = EventAccumulator(str(tmp_path), size_guidance={"scalars": 0}, purge_orphaned_data=False)
    events.Reload()
    assert [(s.step, s.value) for s in events.Scalars("episode/return")] == [(1, 10), (2, 20), (3, 30), (4, 40)]
    assert [(s.step, s.value) for s in events.Scalars("episode/mean_return")] == [(1, 5), (2, 10), (3, 15), (4, 20)]
    assert [(s.step, s.value) for s in events.Scalars("train/loss")] == [(3, 0.5)]


def test_tensorboard_rewrite_sorts_before_the_file_the_resumed_writer_opens(tmp_path, monkeypatch):
    """An empty tb/ on resume (a run killed before its first flush), within one second, on a host whose name
    sorts before "rlexp": TensorBoard reads the rewritten history first and the new writer's scalars after it."""
    import socket

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from rlexp.runs.history import History
    from rlexp.runs.tracking import TensorBoard

    now = 1_700_000_000.25
    monkeypatch.setattr(time, "time", lambda: now)
    monkeypatch.setattr(socket, "gethostname", lambda: "a-host")
    history = History()
    for step in range(1, 4):
        history.append(step, step, 0.0, 10.0 * step, 5.0 * step, 0.0)
    tb = TensorBoard(tmp_path, resume=(history.rows, 3))
    tb.scalars(4, {"episode/return": 40, "episode/mean_return": 20})
    tb.close()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names[0] == "events.out.tfevents.1699999999.rlexp.0" and len(names) == 2
    assert names[1].startswith(f"events.out.tfevents.1700000000.a-host.{os.getpid()}.")
    events = EventAccumulator(str(tmp_path), size_guidance={"scalars": 0})
    events.Reload()
    assert [(s.step, s.value) for s in events.Scalars("episode/return")] == [(1, 10), (2, 20), (3, 30), (4, 40)]


def test_wandb_prints_one_line_saying_where_the_offline_run_is(runs):
    cwd, (_, result) = runs
    lines = [line for line in (result.stdout + result.stderr).splitlines() if "wandb" in line.lower()]
    (offline,) = (run_dirs(cwd)[1] / "wandb").glob("offline-run-*")
    assert lines == [f"wandb: offline run {run_dirs(cwd)[1].name}; upload it later with: wandb sync {offline}"]
    assert "wandb" not in result.stderr.lower()
