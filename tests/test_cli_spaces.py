"""End to end through the real CLI: VPG, recurrent policies, mixed precision and the new spaces."""
import os
from pathlib import Path

import numpy as np
import pytest

from test_cli import rlexp, run_dirs

pytestmark = pytest.mark.e2e
TESTS = Path(__file__).parent
SPACE_ENV = ["env=generic", "env.imports=[space_envs]", "env.n_envs=2"]
AGENT_ARGS = {"ppo": ["agent.n_steps=32", "agent.mini_batches=2"], "a2c": [], "vpg": ["agent.n_steps=32"]}


@pytest.fixture(autouse=True)
def space_envs_importable(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))


CASES = [("vpg", ["env=cartpole"]), ("vpg", ["env=pendulum"]), ("vpg", ["env=cartpole", "agent.baseline=none"])]
CASES += [(agent, [*SPACE_ENV, f"env.id=Spaces-{action}-{obs}-v0"])
          for agent in ("ppo", "a2c", "vpg")
          for action, obs in (("multi_discrete", "box"), ("multi_binary", "box"), ("discrete", "dict"),
                              ("multi_discrete", "tuple"))]


@pytest.mark.parametrize("agent, args", CASES, ids=[f"{a}-{'-'.join(x[-1].split('-')[1:3]) if 'Spaces' in x[-1] else x[-1]}"
                                                     for a, x in CASES])
def test_new_agents_and_spaces_train_and_play(tmp_path, agent, args):
    common = [f"agent={agent}", *args, *AGENT_ARGS[agent]]
    result = rlexp(tmp_path, *common, "run.max_steps=640", "run.eval_episodes=1")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "eval" in result.stdout
    play = rlexp(tmp_path, *common, "mode=play")
    assert play.returncode == 0 and "episode 1: return" in play.stdout, play.stderr[-2000:]


@pytest.mark.parametrize("agent", ["ppo", "a2c", "vpg"])
def test_lstm_model_trains_with_each_on_policy_agent(tmp_path, agent):
    args = [f"agent={agent}", "env=cartpole_novel", "model=lstm", "env.n_envs=2", *AGENT_ARGS[agent]]
    result = rlexp(tmp_path, *args, "run.max_steps=512", "run.eval_episodes=1")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]


def test_lstm_run_resumes_with_fresh_hidden_states_and_plays_to_mp4(tmp_path):
    args = ["agent=ppo", "env=cartpole_novel", "model=lstm", "env.n_envs=2", "agent.n_steps=32", "agent.mini_batches=2"]
    first = rlexp(tmp_path, *args, "run.max_steps=256", "run.eval_episodes=1")
    assert first.returncode == 0, first.stderr[-2000:]
    (run,) = run_dirs(tmp_path)
    with np.load(run / "checkpoints" / "last.ckpt") as data:
        assert not [k for k in data.files if "rnn_state" in k or "episode_starts" in k]  # resume resets the envs

    from rlexp.agents import PPO
    from rlexp.envs.make import make_envs

    agent = PPO(make_envs("CartPole-v1", 2, seed=0, wrappers=[{"_target_": "rlexp.envs.wrappers.MaskVelocity"}]),
                model="lstm", n_steps=32, mini_batches=2, seed=5)
    agent.load(run / "checkpoints" / "last.ckpt")
    for i in range(4):
        np.testing.assert_array_equal(agent.rnn_states[i].numpy(), np.zeros((2, 64)))
    np.testing.assert_array_equal(agent.episode_starts.numpy(), np.ones(2))

    resumed = rlexp(tmp_path, f"+resume={run}", "run.max_steps=512")
    assert resumed.returncode == 0 and "resumed" in resumed.stdout, resumed.stderr[-2000:]
    play = rlexp(tmp_path, *args, "mode=play", "+video_dir=videos")
    assert play.returncode == 0, play.stderr[-2000:]
    (video,) = (tmp_path / "videos").glob("*.mp4")
    assert video.stat().st_size > 0


def test_mixed_precision_run_and_a_refusal(tmp_path):
    result = rlexp(tmp_path, "run.mixed_precision=true", "run.max_steps=1024", "run.eval_episodes=1",
                   "agent.n_steps=32", "env.n_envs=4")
    assert result.returncode == 0, result.stderr[-2000:]
    refused = rlexp(tmp_path, "agent=trpo", "run.mixed_precision=true", "run.max_steps=100")
    assert refused.returncode == 2 and "mixed_precision is supported by PPO, A2C, VPG and the off-policy agents" in refused.stdout + refused.stderr
    bad = rlexp(tmp_path, "env=cartpole", "env.wrappers=[{_target_: os.system}]", "run.max_steps=100")
    assert bad.returncode == 2 and "must be a gymnasium.wrappers or rlexp.envs.wrappers class" in bad.stdout + bad.stderr


def test_auto_precision_is_bfloat16_only_for_image_models_on_a_bfloat16_cpu(tmp_path, monkeypatch):
    import tensorflow as tf

    from rlexp import build
    from rlexp.agents import DQN, PPO

    monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind=None: [])  # as on a CPU-only machine
    flags = tmp_path / "cpuinfo"
    flags.write_text("processor\t: 0\nflags\t\t: fpu sse avx512f avx512_bf16 avx_vnni\n")
    assert build.cpu_has_bfloat16(str(flags))
    flags.write_text("processor\t: 0\nflags\t\t: fpu sse avx512f avx512_vnni\n")
    assert not build.cpu_has_bfloat16(str(flags))
    assert not build.cpu_has_bfloat16(str(tmp_path / "missing"))
    for bf16_cpu in (True, False):
        monkeypatch.setattr(build, "cpu_has_bfloat16", lambda: bf16_cpu)
        assert build.resolve_precision("auto", PPO, image_obs=True) == ("bfloat16" if bf16_cpu else False)
        assert build.resolve_precision("auto", PPO, image_obs=False) is False
        assert build.resolve_precision("auto", PPO, image_obs=True, recurrent=True) is False
        assert build.resolve_precision("auto", DQN, image_obs=True) is False  # not shown to learn in bfloat16
        assert build.resolve_precision(False, PPO, image_obs=True) is False
        assert build.resolve_precision("float16", PPO, image_obs=False) == "float16"


def test_auto_precision_of_a_sac_run_is_recorded_and_kept_on_resume(tmp_path):
    """agent=sac (256-256 MLP) computes in bfloat16 under run.mixed_precision=auto on a bfloat16 CPU; the run
    config records it and a resume keeps it; float16 is refused in one line."""
    from omegaconf import OmegaConf

    from rlexp.build import cpu_has_bfloat16

    import tensorflow as tf

    args = ["agent=sac", "env=pendulum", "buffer.initial_size=100", "run.eval_episodes=0", "run.progress=log"]
    first = rlexp(tmp_path, *args, "run.max_steps=300")
    assert first.returncode == 0, first.stderr[-2000:]
    (run,) = run_dirs(tmp_path)
    bf16 = cpu_has_bfloat16() and not tf.config.list_physical_devices("GPU")
    assert OmegaConf.load(run / ".hydra" / "config.yaml").run.mixed_precision == ("bfloat16" if bf16 else False)
    assert ("bfloat16 compute" in first.stdout + first.stderr) == bf16
    resumed = rlexp(tmp_path, f"+resume={run}", "run.max_steps=400")
    assert resumed.returncode == 0 and ("bfloat16 compute" in resumed.stdout + resumed.stderr) == bf16
    refused = rlexp(tmp_path, *args, "run.mixed_precision=float16", "run.max_steps=300")
    assert refused.returncode == 2 and "needs loss scaling, which SAC does not do" in refused.stdout + refused.stderr
    assert len(run_dirs(tmp_path)) == 1
