"""What is checked before a run starts: every key's type and range (command line and Python API), the memory the
run will take against what the machine has, and that its output folders can be written."""
import logging
from importlib import resources
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from omegaconf import OmegaConf

from rlexp.checks import memory
from rlexp.envs import copies
from rlexp.errors import UserError

CARTPOLE_OBS = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
PONG_OBS = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)


def config_with_env(**env):
    cfg = OmegaConf.load(str(resources.files("rlexp.conf").joinpath("config.yaml")))
    cfg.env = OmegaConf.load(str(resources.files("rlexp.conf").joinpath("env/generic.yaml")))
    for key, value in env.items():
        cfg.env[key] = value
    return cfg


# ----- keys -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("key, value, message", [
    ("n_envs", "abc", "env.n_envs='abc' must be an integer"),
    ("n_envs", 0, "env.n_envs=0 must be at least 1"),
    ("n_envs", 2.5, "env.n_envs=2.5 must be an integer"),
    ("frame_stack", "x", "env.frame_stack='x' must be an integer"),
    ("noop_max", -1, "env.noop_max=-1 must be at least 0"),
    ("max_episode_steps", 0, "env.max_episode_steps=0 must be at least 1"),
    ("preprocess", "yes", "env.preprocess='yes' must be true or false"),
    ("clip_rewards", 1, "env.clip_rewards=1 must be true or false"),
    ("vectorization", "fast", "env.vectorization='fast' must be one of auto, sync, async, vector, graph, envpool"),
])
def test_env_settings_are_refused_by_name(key, value, message):
    from rlexp.checks.values import check_settings

    with pytest.raises(UserError) as error:
        check_settings(config_with_env(**{key: value}))
    assert str(error.value) == message


@pytest.mark.parametrize("seed, message", [
    (99999999999999999999999, "seed=99999999999999999999999 is outside NumPy's seed range; use an integer from 0 to "
                              "4294967295"),
    (2**32, "seed=4294967296 is outside NumPy's seed range; use an integer from 0 to 4294967295"),
    (-1, "seed=-1 is outside NumPy's seed range; use an integer from 0 to 4294967295"),
    (1.5, "seed=1.5 must be an integer"),
])
def test_seeds_outside_numpys_range_are_refused(seed, message):
    from rlexp.checks.values import check_settings

    cfg = config_with_env()
    cfg.seed = seed
    with pytest.raises(UserError) as error:
        check_settings(cfg)
    assert str(error.value) == message


def test_valid_env_settings_and_the_largest_seed_pass():
    from rlexp.checks.values import check_seed, check_settings

    check_settings(config_with_env(n_envs=16, max_episode_steps=None, preprocess=True))
    assert check_seed(2**32 - 1) == 4294967295 and check_seed("12") == 12 and check_seed(None) is None


def test_the_python_api_checks_the_arguments_that_mirror_cli_keys():
    from rlexp import PPO, make_envs

    with pytest.raises(UserError, match=r"^env.n_envs='abc' must be an integer$"):
        make_envs("CartPole-v1", n_envs="abc")
    with pytest.raises(UserError, match=r"^seed=4294967296 is outside NumPy's seed range"):
        make_envs("CartPole-v1", seed=2**32)
    envs = make_envs("CartPole-v1", n_envs=2, seed=0)
    with pytest.raises(UserError, match=r"^seed=4294967296 is outside NumPy's seed range"):
        PPO(envs, seed=2**32, n_steps=8, mini_batches=1)
    agent = PPO(envs, seed=0, n_steps=8, mini_batches=1, quiet=True)
    with pytest.raises(UserError, match=r"^run.max_steps='abc' must be a number$"):
        agent.fit(max_steps="abc")
    with pytest.raises(UserError, match=r"^run.checkpoint_interval=-1 must be a number >= 0$"):
        agent.fit(max_steps=100, checkpoint_interval=-1)
    assert agent.steps == 0


# ----- memory ---------------------------------------------------------------------------------------------
def test_available_memory_is_meminfos_within_the_cgroup_limit(tmp_path, monkeypatch):
    (tmp_path / "meminfo").write_text("MemTotal:  8000000 kB\nMemFree:  1000 kB\nMemAvailable:  2048 kB\n")
    monkeypatch.setattr(memory, "MEMINFO", str(tmp_path / "meminfo"))
    monkeypatch.setattr(memory, "CGROUP_LIMITS", ())
    assert memory.available_memory() == 2048 * 1024
    (tmp_path / "max").write_text("1048576\n")
    (tmp_path / "current").write_text("524288\n")
    monkeypatch.setattr(memory, "CGROUP_LIMITS", ((str(tmp_path / "max"), str(tmp_path / "current")),))
    assert memory.available_memory() == 524288  # the cgroup's room is smaller
    (tmp_path / "max").write_text("max\n")
    assert memory.available_memory() == 2048 * 1024


def test_activations_count_each_layer_output_once_per_head():
    from rlexp.agents.base import load_model_preset

    # Nature CNN on 4 stacked 84x84 frames: the scaled input 28,224, conv 20x20x32, 9x9x64, 7x7x64, dense 512
    assert memory.activation_floats(load_model_preset("nature_cnn"), (4, 84, 84), heads=2, image=True) == \
        28224 + 12800 + 5184 + 3136 + 512
    # the MLP's two 64-unit layers are built once per head (policy and value towers)
    assert memory.activation_floats(load_model_preset("mlp"), (4,), heads=2) == 256


def test_a_rollout_too_large_for_the_memory_is_one_line(monkeypatch):
    from rlexp import PPO
    from rlexp.agents.base import load_model_preset

    needs = PPO.memory_needs(CARTPOLE_OBS, gym.spaces.Discrete(2), 10**6, {"n_steps": 32, "mini_batches": 1}, None,
                             load_model_preset("mlp"))
    # a transition: observation and next observation 2 x 16 bytes, an int64 action, five floats -> 60 bytes;
    # a row of activations: 256 floats -> 1,024 bytes
    assert [(n.what, n.nbytes) for n in needs] == [("rollout storage", 32 * 10**6 * 60),
                                                   ("the update's activations", 32 * 10**6 * 1024)]
    with pytest.raises(UserError) as error:
        memory.check_fits(needs, available=10 << 30)
    assert str(error.value) == (
        "agent.n_steps=32 x env.n_envs=1000000: the run needs about 32.3 GiB of memory (rollout storage 1.8 GiB: "
        "32,000,000 transitions x 60 bytes; the update's activations 30.5 GiB: 32,000,000 rows x 1,024 bytes), "
        "more than the 10.0 GiB available; lower agent.n_steps or env.n_envs (or raise agent.mini_batches)")
    memory.check_fits(needs, available=33 << 30)


def test_the_python_api_refuses_a_rollout_before_allocating_it(monkeypatch):
    from rlexp import PPO, make_envs

    monkeypatch.setattr(memory, "available_memory", lambda: 16 << 30)
    with pytest.raises(UserError, match=r"^agent.n_steps=1000000000 x env.n_envs=8: the run needs about 7.9 TiB .*"
                                        r"more than the 16.0 GiB available"):
        PPO(make_envs("CartPole-v1", n_envs=8), n_steps=10**9, mini_batches=1)


def test_replay_storage_is_estimated_per_buffer_with_frames_stored_once():
    from rlexp.buffers import FrameBuffer, PrioritizedReplayBuffer, ReplayBuffer

    def transition(env_obs, action):  # one env's step as the agents store it (the env's dtypes)
        obs = np.zeros((1, *env_obs.shape), env_obs.dtype)
        return obs, np.zeros(1, action), np.zeros(1), obs.copy(), np.zeros(1)

    def allocated(buffer):  # what the buffer holds once it has stored a transition
        arrays = list(buffer.data.values()) + ([buffer._tree.sums, buffer._tree.mins] if hasattr(buffer, "_tree")
                                               else [])
        return sum(a.nbytes for a in arrays)

    replay = ReplayBuffer(1000)
    replay.add(*transition(CARTPOLE_OBS, np.int64))
    assert replay.memory_need(CARTPOLE_OBS, gym.spaces.Discrete(2), 1).nbytes == allocated(replay) == 1000 * 48
    need = ReplayBuffer(10**12).memory_need(CARTPOLE_OBS, gym.spaces.Discrete(2), 1)
    assert need.nbytes == 10**12 * allocated(replay) // 1000
    with pytest.raises(UserError) as error:
        memory.check_fits([need], available=16 << 30)
    assert str(error.value) == ("buffer.max_size=1000000000000: the run needs about 43.7 TiB of memory (replay storage "
                                "43.7 TiB: 1,000,000,000,000 transitions x 48 bytes), more than the 16.0 GiB "
                                "available; lower buffer.max_size")
    prioritized = PrioritizedReplayBuffer(1000)
    prioritized.add(*transition(CARTPOLE_OBS, np.int64))
    assert prioritized.memory_need(CARTPOLE_OBS, gym.spaces.Discrete(2), 1).nbytes == allocated(prioritized)
    frames = FrameBuffer(64, batch_size=8)
    need = frames.memory_need(PONG_OBS, gym.spaces.Discrete(6), 2)
    assert need.nbytes == 2 * 33 * (84 * 84 + 8 + 17)  # 33 entries an env: one 84x84 frame each, not 4
    frames.add(np.zeros((2, 4, 84, 84), np.uint8), np.zeros(2, np.int64), np.zeros(2), np.zeros((2, 4, 84, 84),
               np.uint8), np.zeros(2))
    allocated = sum(getattr(frames, k).nbytes for k in ("frames", "actions", "rewards", "terminated", "valid",
                                                        "episode_start"))
    assert allocated == need.nbytes
    with pytest.raises(UserError, match=r"^buffer.max_size=10 holds fewer transitions than one step of "
                                        r"env.n_envs=16 envs stores"):
        ReplayBuffer(10, batch_size=4).memory_need(CARTPOLE_OBS, gym.spaces.Discrete(2), 16)


def test_env_copies_beyond_memory_are_refused_and_far_beyond_the_cpus_warned(monkeypatch, caplog):
    monkeypatch.setattr(memory, "available_memory", lambda: 1 << 30)
    monkeypatch.setattr(copies, "cpu_count", lambda: 2)
    with pytest.raises(UserError) as error:
        copies.check_env_copies("Acrobot-v1", 10**6, "sync")
    assert str(error.value) == ("env.n_envs=1000000: the run needs about 3.8 GiB of memory (env copies 3.8 GiB: "
                                "1,000,000 x 4.0 KiB), more than the 1.0 GiB available; lower env.n_envs")
    copies.check_env_copies("CartPole-v1", 10**6, "graph")  # one batched env: no copies
    with caplog.at_level(logging.WARNING, logger="rlexp"):
        copies.check_env_copies("Acrobot-v1", 128, "sync")
        assert not caplog.records  # 64 a CPU
        copies.check_env_copies("Acrobot-v1", 130, "sync")
        copies.check_env_copies("Acrobot-v1", 9, "async")
    first, second = (r.getMessage() for r in caplog.records)
    assert first.startswith("warning: env.n_envs=130 env copies for 2 CPUs (65 a CPU) are made and stepped one "
                            "after another")
    assert second.startswith("warning: env.n_envs=9 worker processes (env.vectorization=async) take turns on 2 CPUs")


def rlexp_within(cwd, *args, data_limit=4 << 30):
    """The real CLI in a subprocess whose data-size limit (ulimit -d) caps the memory it may take, so that what
    is refused does not depend on the machine's memory."""
    import os
    import resource
    import subprocess
    import sys

    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", SDL_VIDEODRIVER="dummy")
    return subprocess.run([sys.executable, "-m", "rlexp", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env=env,
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_DATA, (data_limit, data_limit)))


@pytest.mark.e2e
@pytest.mark.parametrize("args, line", [
    (["agent.n_steps=1000000000"], "error: agent.n_steps=1000000000 x env.n_envs=8: the run needs about 7.9 TiB of "
                                   "memory (rollout storage 447.0 GiB: 8,000,000,000 transitions x 60 bytes; the "
                                   "update's activations 7.5 TiB: 8,000,000,000 rows x 1,024 bytes), more than the "),
    (["agent=dqn", "buffer.max_size=1e12"], "error: buffer.max_size=1000000000000: the run needs about 43.7 TiB of "
                                            "memory (replay storage 43.7 TiB: 1,000,000,000,000 transitions x 48 "
                                            "bytes), more than the "),
    (["env.n_envs=1000000"], "error: agent.n_steps=32 x env.n_envs=1000000: the run needs about 32.3 GiB of memory "
                             "(rollout storage 1.8 GiB: 32,000,000 transitions x 60 bytes; the update's activations "
                             "30.5 GiB: 32,000,000 rows x 1,024 bytes), more than the "),
], ids=["rollout", "replay", "env-count"])
def test_runs_too_large_for_the_memory_are_refused_before_they_start(tmp_path, args, line):
    result = rlexp_within(tmp_path, *args, "run.max_steps=100")
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and result.stdout == "", result.stdout + result.stderr[-2000:]
    assert lines[0].startswith(line) and " available; lower " in lines[0], lines[0]
    assert list(tmp_path.iterdir()) == []  # no run dir


# ----- output folders -------------------------------------------------------------------------------------
def test_output_folders_that_permission_bits_call_writable_are_tried():
    """/proc passes os.access for root, but nothing can be made in it: the check makes (and removes) a folder."""
    from rlexp.envs.playback import check_writable_dir
    from rlexp.runs.files import check_writable

    with pytest.raises(UserError, match=r"^run_dir=/proc/r: /proc (is not writable|can't hold a new directory \()"):
        check_writable(Path("/proc/r"), "run_dir=/proc/r")
    with pytest.raises(UserError, match=r"^\+video_dir=/proc/v: /proc (is not writable|can't hold a new directory \()"):
        check_writable_dir("/proc/v", "video_dir")


def test_a_run_dir_that_cannot_be_written_is_refused_before_the_run(tmp_path):
    from rlexp.runs.files import check_writable

    check_writable(tmp_path / "outputs" / "r", "run_dir=outputs/r")
    assert list(tmp_path.iterdir()) == []  # the trial folder is gone again


def test_the_python_api_checks_buffer_sizes_rollouts_and_episode_counts():
    from rlexp import PPO, ReplayBuffer, RolloutBuffer, make_envs

    with pytest.raises(UserError, match=r"^buffer.max_size='big' must be an integer$"):
        ReplayBuffer(max_size="big")
    assert ReplayBuffer(max_size="1e4", initial_size=1e3).max_size == 10_000
    with pytest.raises(UserError, match=r"^buffer.initial_size=-1 must be at least 0$"):
        RolloutBuffer(initial_size=-1)
    envs = make_envs("CartPole-v1", n_envs=2, seed=0)
    with pytest.raises(UserError, match=r"^agent.n_steps=0 must be at least 1$"):
        PPO(envs, n_steps=0, mini_batches=1)
    agent = PPO(envs, seed=0, n_steps=8, mini_batches=1, quiet=True)
    with pytest.raises(UserError, match=r"^run.eval_episodes=-1 must be at least 0$"):
        agent.evaluate(envs, episodes=-1)
    with pytest.raises(UserError, match=r"^play.episodes=0 must be at least 1$"):
        agent.play(make_envs("CartPole-v1"), episodes=0)


def test_fit_checks_its_run_dir_before_training():
    from rlexp import PPO, make_envs

    agent = PPO(make_envs("CartPole-v1", n_envs=2, seed=0), seed=0, n_steps=8, mini_batches=1, quiet=True)
    with pytest.raises(UserError, match=r"^run_dir=/proc/rlexp-run: /proc (is not writable|can't hold a new dir)"):
        agent.fit(max_steps=64, run_dir="/proc/rlexp-run")
    assert agent.steps == 0


def test_the_checks_before_a_run_share_one_probe_env(monkeypatch):
    """The fallback's env kind and the memory check of a run of many env copies (Acrobot: no tuned preset, so
    the fallback's kind is asked for; 65 copies: memory is checked before they are made) make one env between
    them, and the number of copies does not make another."""
    from rlexp.build import check_memory_first
    from rlexp.envs import make
    from rlexp.presets.fallbacks import env_kind

    made = []
    real = make.env_from_config
    monkeypatch.setattr(make, "_PROBED", {})
    monkeypatch.setattr(make, "_SPARE", {})
    monkeypatch.setattr(make, "env_from_config", lambda cfg, seed, **kw: made.append(kw) or real(cfg, seed, **kw))
    env = OmegaConf.create({"id": "Acrobot-v1", "n_envs": 65})
    assert env_kind(env, 0) == "discrete_vector"
    assert env_kind(OmegaConf.merge(env, {"n_envs": 8}), 0) == "discrete_vector"
    from rlexp.agents import PPO

    cfg = OmegaConf.create({"env": env, "seed": 0, "agent": {"n_steps": 16}})
    check_memory_first(cfg, PPO, None, {"layers": [{"type": "dense", "units": 64}]})
    assert made == [{"n_envs": 1, "vectorization": "sync"}]
