"""End to end: the real CLI in a subprocess, from a directory outside the repository."""
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from forked_cli import run_cli

pytestmark = pytest.mark.e2e
TINY_PPO = ["run.max_steps=2048", "run.eval_episodes=2", "agent.n_steps=32", "env.n_envs=4"]


def rlexp(cwd, *args, timeout=300, env=None):
    """`python -m rlexp *args` in `cwd` (forked from a process that has loaded TensorFlow: forked_cli)."""
    return run_cli(args, cwd, dict(env or os.environ, TF_CPP_MIN_LOG_LEVEL="3", SDL_VIDEODRIVER="dummy"), timeout)


def run_dirs(cwd):
    return sorted(p.parent.parent for p in Path(cwd).glob("outputs/*/*/checkpoints/last.ckpt"))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One tiny PPO CartPole run shared by the play / eval tests."""
    cwd = tmp_path_factory.mktemp("work")
    result = rlexp(cwd, *TINY_PPO, "seed=1")
    assert result.returncode == 0, result.stdout + result.stderr
    return cwd, result


def test_train_writes_history_checkpoints_and_summary(trained):
    cwd, result = trained
    assert "done (max_steps)" in result.stdout and "eval" in result.stdout and "run dir:" in result.stdout
    (run,) = run_dirs(cwd)
    assert run.name.endswith("_ppo_cartpole")
    df = pd.read_parquet(run / "history.parquet")
    assert {"mean_reward", "best_reward", "episode_reward", "step", "time", "episode"} <= set(df.columns)
    assert (np.diff(df["step"]) > 0).all()
    assert (run / "history.png").exists() and (run / "summary.json").exists()
    assert not (run / "checkpoints" / "best.ckpt").exists()  # fewer episodes than one agent.reward_buffer_size


def video_frames(path):
    """How many frames ffmpeg decodes from a video."""
    import imageio_ffmpeg

    reader = imageio_ffmpeg.read_frames(str(path))
    next(reader)  # the video's metadata
    return sum(1 for _ in reader)


def returns_of(stdout):
    return [float(line.rsplit(" ", 1)[1]) for line in stdout.splitlines() if line.startswith("episode ")]


@pytest.mark.newest_python
def test_play_writes_a_video_with_a_frame_per_step_and_frames(trained):
    cwd, _ = trained
    result = rlexp(cwd, "mode=play", "play.episodes=3", "+video_dir=videos", "+frame_dir=frames",
                   "play.frame_frequency=5")
    assert result.returncode == 0, result.stderr
    assert "loaded" in result.stdout and "episode 3: return" in result.stdout
    (video,) = (cwd / "videos").glob("*.mp4")
    steps = int(sum(returns_of(result.stdout)))  # CartPole: reward 1 a step, so the returns add up to the steps
    assert f"({steps} frames)" in result.stdout and video_frames(video) == steps
    frames = sorted(int(f.stem.split("_")[-1]) for f in (cwd / "frames").glob("*.jpg"))
    assert frames == list(range(0, steps, 5))


def test_play_records_demonstrations_that_dqfd_trains_from_and_plays(trained, tmp_path):
    cwd, _ = trained
    demos = tmp_path / "demos"
    record = rlexp(cwd, "mode=play", f"+checkpoint={run_dirs(cwd)[0]}", "play.episodes=3", f"+demo_dir={demos}")
    assert record.returncode == 0 and "3 episodes, Minari format" in record.stdout, record.stderr[-2000:]
    (said,) = [line for line in record.stdout.splitlines() if "load them with Minari: " in line]
    command = said.split("load them with Minari: ", 1)[1]  # the call it prints works as it stands
    loaded = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=120)
    assert loaded.returncode == 0 and "MinariDataset" in loaded.stdout, loaded.stderr[-2000:]
    again = rlexp(cwd, "mode=play", f"+checkpoint={run_dirs(cwd)[0]}", f"+demo_dir={demos}")
    assert again.returncode == 2 and "holds demonstrations already" in again.stdout + again.stderr
    args = ["agent=dqfd", f"agent.demos={demos}", "agent.pretrain_steps=50", "run.max_steps=600",
            "buffer.initial_size=200", "run.eval_episodes=1"]
    result = rlexp(tmp_path, *args)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    play = rlexp(tmp_path, "agent=dqfd", "mode=play")
    assert play.returncode == 0 and "episode 1: return" in play.stdout, play.stderr[-2000:]
    wrong = rlexp(tmp_path, "agent=dqfd", "env=generic", "env.id=Acrobot-v1", f"agent.demos={demos}")
    assert wrong.returncode == 2 and "was recorded on CartPole-v1, not Acrobot-v1" in wrong.stdout + wrong.stderr


def test_eval_prints_mean_and_std(trained):
    cwd, _ = trained
    result = rlexp(cwd, "mode=eval", "run.eval_episodes=3", f"+checkpoint={run_dirs(cwd)[0]}")
    assert result.returncode == 0, result.stderr
    assert "eval:" in result.stdout and "± " in result.stdout and "over 3 episodes" in result.stdout


@pytest.mark.parametrize("args", [TINY_PPO, ["agent=td3", "env=pendulum", "run.max_steps=1400", "buffer.initial_size=200"]],
                         ids=["ppo", "td3"])
def test_same_seed_gives_identical_history(tmp_path, args):
    """Also with TD3's fused loop, whose env step and buffer sample run on two inter-op threads."""
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        assert rlexp(tmp_path / name, *args, "seed=7", "run.eval_episodes=0").returncode == 0
    a, b = (pd.read_parquet(run_dirs(tmp_path / n)[0] / "history.parquet") for n in ("a", "b"))
    pd.testing.assert_frame_equal(a.drop(columns="time"), b.drop(columns="time"))


def test_default_command_solves_cartpole_and_plays_a_whole_episode_to_video(tmp_path):
    result = rlexp(tmp_path, timeout=600)
    assert result.returncode == 0, result.stderr
    assert "done (target_reward)" in result.stdout, result.stdout[-2000:]
    play = rlexp(tmp_path, "mode=play", "+video_dir=videos")
    assert play.returncode == 0, play.stderr
    (steps,) = map(int, returns_of(play.stdout))  # CartPole: reward 1 a step; 500 when it lasts the time limit
    (video,) = (tmp_path / "videos").glob("*.mp4")
    assert f"({steps} frames)" in play.stdout and video_frames(video) == steps


@pytest.mark.parametrize("args", [
    ["agent=dqn", "env=cartpole", "run.max_steps=1500", "buffer.initial_size=200", "agent.train_freq=64",
     "agent.gradient_steps=8"],
    ["agent=dqn", "agent.double=true", "run.max_steps=1500", "buffer.initial_size=200"],
    ["agent=ppo", "env=pendulum", "run.max_steps=2048", "agent.n_steps=64", "agent.mini_batches=4"],
    ["agent=ppo", "env=pong", "run.max_steps=512", "env.n_envs=2", "agent.n_steps=32", "env.max_episode_steps=300"],
    ["agent=dqn", "env=pong", "run.max_steps=400", "buffer.initial_size=100", "buffer.max_size=1000",
     "env.max_episode_steps=300"],
    ["agent=a2c", "env=cartpole", "run.max_steps=2000"],
    ["agent=a2c", "env=pendulum", "run.max_steps=2000"],
    ["agent=acer", "env=cartpole", "run.max_steps=2000", "buffer.max_size=1000"],
    ["agent=ddpg", "env=pendulum", "run.max_steps=1000", "buffer.initial_size=300"],
    ["agent=td3", "env=pendulum", "run.max_steps=1000", "buffer.initial_size=300"],
    ["agent=trpo", "env=cartpole", "run.max_steps=2048"],
    ["agent=trpo", "env=pendulum", "run.max_steps=2048", "agent.n_steps=512"],
    ["agent=sac", "env=pendulum", "run.max_steps=600", "buffer.initial_size=300"],
    ["agent=sac", "env=pendulum", "run.max_steps=600", "buffer.initial_size=300", "agent.use_sde=true"],
    ["agent=naf", "env=pendulum", "run.max_steps=600", "buffer.initial_size=300"],
], ids=["dqn", "ddqn", "ppo-continuous", "ppo-atari", "dqn-atari", "a2c-discrete", "a2c-continuous", "acer-discrete",
        "ddpg-continuous", "td3-continuous", "trpo-discrete", "trpo-continuous", "sac-continuous", "sac-gsde", "naf-continuous"])
def test_agents_train_checkpoint_and_play(tmp_path, args):
    result = rlexp(tmp_path, *args, "run.eval_episodes=1")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    play = rlexp(tmp_path, *args[:2], "mode=play")
    assert play.returncode == 0 and "episode 1: return" in play.stdout, play.stderr[-2000:]


def test_kill_then_resume_continues_the_history(tmp_path):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    args = ["agent=dqn", "run.max_steps=6000", "run.checkpoint_interval=0", "run.eval_episodes=1",
            "agent.train_freq=64", "agent.gradient_steps=16", "buffer.initial_size=500"]
    proc = subprocess.Popen([sys.executable, "-m", "rlexp", *args], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while not run_dirs(tmp_path) and time.time() < deadline:
        time.sleep(0.2)
    time.sleep(1.5)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    (run,) = run_dirs(tmp_path)
    result = rlexp(tmp_path, f"+resume={run}", "run.max_steps=6000")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "resumed" in result.stdout
    df = pd.read_parquet(run / "history.parquet")
    assert (np.diff(df["step"]) > 0).all() and (np.diff(df["episode"]) == 1).all()
    from rlexp.agents.base import Agent

    assert Agent.read_state(run / "checkpoints" / "last.ckpt")["steps"] >= 6000


@pytest.mark.parametrize("args, message", [
    (["agent=dqn", "env=pendulum"], "agent=dqn does not support continuous actions"),
    (["agent=td3", "env=cartpole"], "agent=td3 does not support discrete actions"),
    (["agent=sac", "env=cartpole"], "agent=sac does not support discrete actions"),
    (["agent=naf", "env=cartpole"], "agent=naf does not support discrete actions"),
    (["agent=dqfd", "env=pendulum"], "agent=dqfd does not support continuous actions"),
    (["agent=dqfd"], "agent.demos is not set"),
    (["env.id=NoSuchEnv-v0"], "env.id='NoSuchEnv-v0' is not a registered gymnasium id"),
    (["mode=play"], "train first"),
    (["mode=play", "+checkpoint=no/such/run"], "does not exist"),
    (["+resume=no/such/run"], "+resume=no/such/run: no such run dir "),
    (["buffer.initial_size=500", "buffer.max_size=100", "agent=dqn"], "initial_size=500 is greater"),
    (["model=nature_cnn"], "conv layers but the observations are vectors"),
    (["agent=nosuch"], "agent presets: a2c, acer, ars, crossq, ddpg"),
    (["agent.lr=abc"], "agent.lr='abc' must be a number"),
    (["agent=dqn", "buffer.max_size=big"], "buffer.max_size='big' must be an integer"),
    (["env.n_envs=0"], "env.n_envs=0 must be at least 1"),
    (["agent.gamma=1.5"], "agent.gamma=1.5 must be in (0, 1]"),
    (["agent.schedule_steps=0"], "agent.schedule_steps=0 must be at least 1"),
    (["run.eval_deterministic=maybe"], "run.eval_deterministic='maybe' must be auto, true or false"),
    (["env.life_loss_terminal=true"], "env.life_loss_terminal=true flags lost lives of Atari games"),
    (["+oops=[1,2"], "error: can't read an override: "),  # Hydra 1.3 and 1.4 word the parse error apart
], ids=["action-space", "td3-discrete", "sac-discrete", "naf-discrete", "dqfd-continuous", "dqfd-no-demos", "env-id", "play-no-run", "missing-checkpoint", "missing-resume", "buffer-sizes",
        "cnn-on-vector", "unknown-group-option", "lr-type", "buffer-type", "n-envs", "gamma-range", "schedule-steps", "eval-deterministic", "life-loss",
        "override-syntax"])
@pytest.mark.newest_python
def test_bad_input_is_one_clear_line(tmp_path, args, message):
    result = rlexp(tmp_path, *args, "run.max_steps=100")
    assert result.returncode == 2
    assert message in result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert not run_dirs(tmp_path)


def test_tensorboard_scalars_and_offline_wandb_run(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(WANDB_BASE_URL="http://127.0.0.1:9", HOME=str(tmp_path))  # no network, no account
    result = subprocess.run([sys.executable, "-m", "rlexp", *TINY_PPO, "logger=wandb", "run.eval_episodes=2",
                             "logger.project=rlexp-test"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                            env=dict(env, TF_CPP_MIN_LOG_LEVEL="3"))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "wandb: offline run" in result.stdout + result.stderr
    (run,) = run_dirs(tmp_path)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run / "tb"), size_guidance={"scalars": 0})
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"episode/return", "episode/mean_return", "train/policy_loss", "train/value_loss", "train/entropy",
            "train/approx_kl", "train/learning_rate", "train/steps_per_s", "eval/mean_return"} <= tags
    (offline,) = list((run / "wandb").glob("offline-run-*"))
    assert list(offline.glob("*.wandb"))
    log_text = (next((run / "wandb").glob("offline-run-*")) / "logs" / "debug.log").read_text()
    assert "finish" in log_text.lower()
    assert "python -m rlexp +resume=" in result.stdout + result.stderr


def test_plot_mode_overlays_runs(trained):
    cwd, _ = trained
    result = rlexp(cwd, "mode=plot", "+runs=outputs/*/*_ppo_cartpole", "+output=compare.png")
    assert result.returncode == 0, result.stderr[-2000:]
    assert (cwd / "compare.png").stat().st_size > 1000 and "1 runs" in result.stdout
    missing = rlexp(cwd, "mode=plot", "+runs=[no/such/dir]")
    assert missing.returncode == 2 and "no run dir" in missing.stdout + missing.stderr


@pytest.mark.newest_python
def test_help_lists_groups_modes_and_examples(tmp_path):
    result = rlexp(tmp_path, "--help")
    assert result.returncode == 0
    for text in ("Config groups", "agent: a2c, acer, ars, crossq, ddpg, dqfd, dqn, naf, ppo, qrdqn, sac, td3, tqc, trpo, vpg", "Modes (mode=...)",
                 "python -m rlexp agent=td3 env=pendulum", "logger: none, wandb"):
        assert text in result.stdout, text
    groups = result.stdout.split("Config groups (pick one option each")[1].split("\n\n")[0]
    assert [line.split(":")[0] for line in groups.splitlines()[1:]] == ["agent", "buffer", "env", "logger", "model",
                                                                       "tuned"]
    by_key = result.stdout.split("Preset folders applied through a key (not group=option):\n")[1].split("\n\n")[0]
    assert [line.split(" (")[0] for line in by_key.splitlines()] == ["fallback=auto|none: fallbacks/",
                                                                    "+sweep=<name>: sweep/"]
    assert "sweep/ (a search space for -m or mode=autotune): a2c, a2c_continuous, ars, crossq, ddpg, dqn, ppo, ppo_continuous, qrdqn, sac, td3, tqc, trpo, trpo_continuous" in by_key


def test_final_evaluation_at_an_evaluation_step_is_one_tensorboard_point(tmp_path):
    """2048 steps (16 iterations of 4 x 32) with evaluations every 1024: at 1024 and 2048, where the final
    evaluation is the one during training (the same weights and episodes), written once."""
    import json

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    result = rlexp(tmp_path, *TINY_PPO, "run.eval_interval=1024", "run_dir=outputs/r")
    assert result.returncode == 0, result.stderr[-2000:]
    run = tmp_path / "outputs" / "r"
    events = EventAccumulator(str(run / "tb"), size_guidance={"scalars": 0})
    events.Reload()
    assert [e.step for e in events.Scalars("eval/mean_return")] == [1024, 2048]
    assert [e.step for e in events.Scalars("eval/std_return")] == [1024, 2048]
    evaluations = pd.read_parquet(run / "evaluations.parquet")
    final = json.loads((run / "summary.json").read_text())["final_eval"]
    assert list(evaluations["step"]) == [1024, 2048] and final["step"] == 2048 and final["episodes"] == 2
    assert final["mean_return"] == evaluations["mean_return"].iloc[-1] == events.Scalars("eval/mean_return")[-1].value
    assert "final evaluation:" not in result.stdout  # 2 CartPole episodes: nothing long to announce


def test_fault_injection_kill_nine_ten_times_then_finish(tmp_path):
    """kill -9 at random moments (10 times), +resume each time: the history stays consistent, the run
    finishes at run.max_steps and every checkpoint on disk loads."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    args = ["agent=dqn", "run.max_steps=8192", "run.checkpoint_interval=0", "run.eval_episodes=1",
            "agent.train_freq=64", "agent.gradient_steps=4", "buffer.initial_size=256"]
    rng = np.random.default_rng(0)
    run = None
    for kill in range(10):
        extra = [f"+resume={run}"] if run else []
        proc = subprocess.Popen([sys.executable, "-m", "rlexp", *args, *extra], cwd=tmp_path, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 120
        while not run_dirs(tmp_path) and time.time() < deadline:
            time.sleep(0.1)
        (run,) = run_dirs(tmp_path)
        time.sleep(rng.uniform(0.2, 2.5))  # somewhere in start-up, training or a checkpoint write
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    result = rlexp(tmp_path, f"+resume={run}")
    assert result.returncode == 0, result.stderr[-2000:]
    from rlexp.agents.base import Agent

    for ckpt in (run / "checkpoints").glob("*.ckpt"):
        Agent.read_state(ckpt)  # loadable
    assert Agent.read_state(run / "checkpoints" / "last.ckpt")["steps"] == 8192
    assert not list((run / "checkpoints").glob(".*.tmp"))  # no leftovers from killed writes survive a resume
    df = pd.read_parquet(run / "history.parquet")
    assert (np.diff(df["step"]) > 0).all() and (np.diff(df["episode"]) == 1).all()
    assert (np.diff(df["step"]) <= 500).all()  # no gap longer than one CartPole episode


def test_multirun_wandb_runs_are_separate_and_grouped_by_sweep(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(WANDB_BASE_URL="http://127.0.0.1:9", HOME=str(tmp_path), TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run([sys.executable, "-m", "rlexp", "-m", "seed=0,1", "logger=wandb", *TINY_PPO,
                             "run.max_steps=512", "run.eval_episodes=1"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    # a grid of seeds is one configuration: its points are the study, its report the seeds' results, not a best
    assert "the grid's 2 point(s)" in result.stdout and "best: trial" not in result.stdout
    (seeds,) = [line for line in result.stdout.splitlines() if line.startswith("seeds: final_eval ")]
    assert " over 2 seed(s) (seed 0: " in seeds and ", seed 1: " in seeds
    runs = sorted(tmp_path.glob("multirun/*/*/wandb/offline-run-*"))
    assert len(runs) == 2 and runs[0].name != runs[1].name  # one wandb run per trial, not a reused one
    sweep = runs[0].parents[2].name
    assert re.fullmatch(r"ppo_cartpole_[0-9a-f]{6}", sweep), sweep
    for run in runs:
        debug = (run / "logs" / "debug.log").read_text()
        assert "finish" in debug.lower() and sweep in debug  # finished, grouped under the sweep's name


def test_corrupt_checkpoint_and_unwritable_video_dir_are_one_line(trained, tmp_path):
    import shutil

    cwd, _ = trained
    run = tmp_path / "outputs" / "broken_ppo_cartpole"
    shutil.copytree(run_dirs(cwd)[0], run)
    for name in ("last.ckpt", "previous.ckpt"):  # resume falls back to previous.ckpt: both damaged
        (run / "checkpoints" / name).write_bytes(b"not a checkpoint")
    corrupt = rlexp(tmp_path, "mode=eval", f"+checkpoint={run}")
    assert corrupt.returncode == 2 and "is not a readable rlexp checkpoint" in corrupt.stdout + corrupt.stderr
    resume = rlexp(tmp_path, f"+resume={run}")
    assert resume.returncode == 2 and "Traceback" not in resume.stdout + resume.stderr
    blocker = tmp_path / "file"
    blocker.write_text("x")
    video = rlexp(cwd, "mode=play", f"+video_dir={blocker}/videos")
    assert video.returncode == 2 and (f"+video_dir={blocker}/videos: {blocker} is a file, so {blocker}/videos can't be "
                                      "made; pass a directory") in video.stdout + video.stderr


def test_atari_run_records_its_precision_and_resumes_on_envpool(tmp_path):
    """An Atari PPO run steps EnvPool (auto), stores what run.mixed_precision=auto and
    run.eval_deterministic=auto chose, and resumes: the
    resumed envs are seeded from the run's seed and step (a uint32, beyond EnvPool's int32 seeds)."""
    from omegaconf import OmegaConf

    from rlexp.build import cpu_has_bfloat16

    args = ["agent=ppo", "env=pong", "env.n_envs=2", "agent.n_steps=32", "run.checkpoint_interval=0",
            "run.eval_episodes=0", "run.progress=log", "run.mixed_precision=auto"]
    first = rlexp(tmp_path, *args, "run.max_steps=128")
    assert first.returncode == 0, first.stderr[-2000:]
    (run,) = run_dirs(tmp_path)
    bf16 = cpu_has_bfloat16()
    stored = OmegaConf.load(run / ".hydra" / "config.yaml").run
    assert stored.mixed_precision == ("bfloat16" if bf16 else False)
    assert stored.eval_deterministic is False  # auto: Atari is scored with actions drawn from the policy
    assert ("bfloat16 compute" in first.stdout + first.stderr) == bf16
    resumed = rlexp(tmp_path, f"+resume={run}", "run.max_steps=256")
    assert resumed.returncode == 0 and "resumed" in resumed.stdout, resumed.stderr[-2000:]
    from rlexp.agents.base import Agent

    assert Agent.read_state(run / "checkpoints" / "last.ckpt")["steps"] == 256


def test_a_run_dir_from_before_the_envs_package_evaluates_plays_and_resumes(tmp_path):
    """Run dirs trained when env wrappers were rlexp.wrappers.X (before rlexp.envs became a package) name that
    path in their stored config (.hydra/config.yaml, each checkpoint's state): eval, play and +resume read it as
    rlexp.envs.wrappers.X."""
    import json

    result = rlexp(tmp_path, "env=cartpole_novel", "model=mlp", *TINY_PPO, "run.max_steps=256")
    assert result.returncode == 0, result.stdout + result.stderr
    (run,) = run_dirs(tmp_path)
    old, new = "rlexp.wrappers.MaskVelocity", "rlexp.envs.wrappers.MaskVelocity"
    config = run / ".hydra" / "config.yaml"
    assert new in config.read_text()
    config.write_text(config.read_text().replace(new, old))
    for ckpt in (run / "checkpoints").glob("*.ckpt"):
        with np.load(ckpt) as data:
            arrays = {name: data[name] for name in data.files}
        state = json.loads(bytes(arrays["state"]).decode())
        assert state["config"]["env"]["wrappers"] == [{"_target_": new}]
        state["config"]["env"]["wrappers"] = [{"_target_": old}]
        arrays["state"] = np.frombuffer(json.dumps(state).encode(), np.uint8)
        with open(ckpt, "wb") as f:
            np.savez(f, **arrays)
    result = rlexp(tmp_path, "mode=eval", "run.eval_episodes=2", f"+checkpoint={run}")
    assert result.returncode == 0 and "eval:" in result.stdout, result.stdout + result.stderr
    result = rlexp(tmp_path, "mode=play", "play.episodes=1", f"+checkpoint={run}", "+video_dir=videos")
    assert result.returncode == 0, result.stdout + result.stderr
    result = rlexp(tmp_path, f"+resume={run}", "run.max_steps=512")
    assert result.returncode == 0 and "resumed" in result.stdout, result.stdout + result.stderr
    from rlexp.agents.base import Agent

    state = Agent.read_state(run / "checkpoints" / "last.ckpt")
    assert state["steps"] >= 512 and state["config"]["env"]["wrappers"] == [{"_target_": new}]
