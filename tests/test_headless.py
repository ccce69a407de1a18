"""On a server as on a laptop: MuJoCo and Atari videos recorded without a display (one video frame per env step),
the OpenGL backend picked before MuJoCo loads, TensorFlow's symbols kept away from Mesa's, and no third-party
noise on stderr."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rlexp.envs import rendering
from rlexp.errors import UserError

HEADLESS = ("DISPLAY", "WAYLAND_DISPLAY", "MUJOCO_GL", "PYOPENGL_PLATFORM")


def rlexp(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    """The CLI without a display and without a user's GL settings (plus `env`)."""
    base = {k: v for k, v in os.environ.items() if k not in HEADLESS}
    return subprocess.run([sys.executable, "-m", "rlexp", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env=dict(base, TF_CPP_MIN_LOG_LEVEL="3", SDL_VIDEODRIVER="dummy", **env))


def decoded_frames(path: Path) -> list[np.ndarray]:
    """Every frame ffmpeg decodes from the video, as (height, width, 3) arrays."""
    import imageio_ffmpeg

    reader = imageio_ffmpeg.read_frames(str(path))
    width, height = next(reader)["size"]
    return [np.frombuffer(raw, np.uint8).reshape(height, width, 3) for raw in reader]


@pytest.fixture(scope="module")
def cheetah(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """A tiny SAC HalfCheetah run whose episodes are cut at 120 steps."""
    cwd = tmp_path_factory.mktemp("cheetah")
    result = rlexp(cwd, "agent=sac", "env=halfcheetah", "run.max_steps=200", "buffer.initial_size=100",
                   "env.max_episode_steps=120", "run.eval_episodes=1", "run_dir=outputs/cheetah")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return cwd, result


@pytest.mark.e2e
@pytest.mark.newest_python
def test_mujoco_run_trains_and_plays_to_an_mp4_headless_with_a_frame_per_step(cheetah):
    cwd, train = cheetah
    assert train.stderr == ""  # no MuJoCo deprecation warnings about gymnasium's model files
    assert "training SAC on HalfCheetah-v5 (1 env in-process, " in train.stdout
    play = rlexp(cwd, "mode=play", "+checkpoint=outputs/cheetah", "+video_dir=videos")
    assert play.returncode == 0, play.stdout[-2000:] + play.stderr[-2000:]
    assert play.stderr == "" and "video: videos/cheetah.mp4 (120 frames)" in play.stdout
    frames = decoded_frames(cwd / "videos" / "cheetah.mp4")
    assert len(frames) == 120 and frames[0].shape == (480, 480, 3)  # gymnasium's MuJoCo frames: 480x480
    assert all(frame.std() > 10 for frame in frames)  # a rendered scene (floor, sky, cheetah), not a blank
    assert np.abs(frames[0].astype(int) - frames[-1].astype(int)).mean() > 1  # the cheetah moved
    assert not (cwd / "MUJOCO_LOG.TXT").exists()  # MuJoCo's default warning handler writes one


@pytest.mark.e2e
def test_a_mujoco_gl_that_cannot_render_here_is_one_line(cheetah):
    cwd, _ = cheetah
    result = rlexp(cwd, "mode=play", "+checkpoint=outputs/cheetah", "+video_dir=glfw_videos", MUJOCO_GL="glfw")
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert lines[0].startswith("error: MuJoCo could not render a frame with MUJOCO_GL=glfw (")
    assert "DISPLAY" in lines[0] and "apt-get install libosmesa6" in lines[0]
    assert not (cwd / "glfw_videos").exists()


@pytest.mark.e2e
@pytest.mark.newest_python
def test_atari_play_and_eval_print_no_library_noise(tmp_path):
    """No ALE banner, no nanobind leak report at the exit; the video has every frame."""
    train = rlexp(tmp_path, "agent=ppo", "env=pong", "env.n_envs=2", "agent.n_steps=32", "run.max_steps=128",
                  "run.eval_episodes=0", "env.max_episode_steps=150", "run_dir=outputs/pong")
    assert train.returncode == 0 and train.stderr == "", train.stderr[-2000:]
    assert "training PPO on PongNoFrameskip-v4 (2 envs on EnvPool, " in train.stdout
    play = rlexp(tmp_path, "mode=play", "+checkpoint=outputs/pong", "+video_dir=videos")
    assert play.returncode == 0 and play.stderr == "", play.stderr[-3000:]
    reported = int(play.stdout.split("video: videos/pong.mp4 (")[1].split(" frames)")[0])
    assert 0 < reported <= 150 and len(decoded_frames(tmp_path / "videos" / "pong.mp4")) == reported
    evaluated = rlexp(tmp_path, "mode=eval", "+checkpoint=outputs/pong", "run.eval_episodes=1")
    assert evaluated.returncode == 0 and evaluated.stderr == "", evaluated.stderr[-3000:]


LLVM_SYMBOL = "_ZN4llvm15FixedVectorType3getEPNS_4TypeEj"  # in TensorFlow's library; Mesa's llvmpipe calls it


@pytest.mark.parametrize("imports, private", [
    ("from rlexp import make_envs; make_envs('Pendulum-v1'); from rlexp import SAC", True),
    ("from rlexp.build import configure_threads; configure_threads({}, image_obs=False)", True),
    ("import tensorflow", False),  # TensorFlow's own import: global, what crashed Mesa's renderer
], ids=["api", "threads", "plain-tensorflow"])
def test_tensorflow_imported_by_rlexp_keeps_its_symbols_private(imports, private):
    """Loaded globally, TensorFlow's LLVM symbols are found by every library loaded after it (Mesa's llvmpipe)."""
    check = (f"{imports}\nimport ctypes\ntry:\n    getattr(ctypes.CDLL(None), {LLVM_SYMBOL!r})\nexcept AttributeError:\n"
             "    print('private')\nelse:\n    print('global')")
    result = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=120,
                            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["private" if private else "global"]


@pytest.fixture
def no_gl_settings(monkeypatch):
    """No GL settings of the user's, and TensorFlow taken as rlexp imports it (pytest's test modules import it
    themselves, globally)."""
    for key in HEADLESS:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setattr(rendering, "tensorflow_symbols_global", lambda: False)
    return monkeypatch


def test_a_users_own_gl_settings_are_kept_without_probing(no_gl_settings):
    no_gl_settings.setattr(rendering, "probe", lambda backend: pytest.fail("probed"))
    no_gl_settings.setenv("MUJOCO_GL", "glfw")
    assert rendering.choose_gl() == "glfw"
    no_gl_settings.delenv("MUJOCO_GL")
    no_gl_settings.setenv("PYOPENGL_PLATFORM", "osmesa")
    assert rendering.choose_gl() == "osmesa" and os.environ["MUJOCO_GL"] == "osmesa"


def test_egl_is_tried_first_then_osmesa(no_gl_settings):
    tried = []
    no_gl_settings.setattr(rendering, "probe", lambda backend: tried.append(backend) or
                           ("llvmpipe (LLVM 15.0.6, 256 bits)" if backend == "osmesa" else None))
    assert rendering.choose_gl() == "osmesa" and tried == ["egl", "osmesa"]
    assert os.environ["MUJOCO_GL"] == os.environ["PYOPENGL_PLATFORM"] == "osmesa"


def test_no_backend_and_no_display_names_the_package_to_install(no_gl_settings):
    no_gl_settings.setattr(rendering, "probe", lambda backend: None)
    with pytest.raises(UserError, match=r"no display, and neither EGL nor OSMesa renders; .*apt-get install "
                                        r"libosmesa6"):
        rendering.choose_gl()
    assert "MUJOCO_GL" not in os.environ
    no_gl_settings.setenv("DISPLAY", ":0")
    assert rendering.choose_gl() is None  # GLFW, MuJoCo's default, with a display


def test_mesa_under_a_global_tensorflow_is_refused_in_one_line(no_gl_settings):
    no_gl_settings.setattr(rendering, "probe", lambda backend: "llvmpipe (LLVM 15.0.6, 256 bits)")
    no_gl_settings.setattr(rendering, "tensorflow_symbols_global", lambda: True)
    with pytest.raises(UserError, match="import rlexp .* before importing tensorflow"):
        rendering.choose_gl()


def test_the_probe_finds_a_backend_on_this_machine():
    """CI installs OSMesa and EGL (.ci/run): one of them renders MuJoCo's GL resources in a child process."""
    renderers = [rendering.probe(backend) for backend in rendering.BACKENDS]
    assert any(renderers), "no EGL or OSMesa: apt-get install libosmesa6"
    assert rendering.probe("no-such-backend") is None


def test_video_writer_keeps_every_frame_and_pads_odd_sizes(tmp_path):
    """moviepy 2.2 wrote 499 of 500 frames (and 5 of 6, 29 of 30 ...); an odd size is padded with its last
    row/column, which H.264's 4:2:0 colour needs."""
    from rlexp.envs.playback import VideoWriter

    for count, size in ((500, (64, 48)), (6, (33, 21))):
        writer = VideoWriter(tmp_path / f"v{count}.mp4", fps=30)
        for i in range(count):
            writer.add(np.full((*size, 3), (i * 7) % 256, np.uint8))
        writer.close()
        frames = decoded_frames(tmp_path / f"v{count}.mp4")
        assert len(frames) == count == writer.frames
        assert frames[0].shape == (size[0] + size[0] % 2, size[1] + size[1] % 2, 3)
        assert abs(int(frames[5].mean()) - 35) <= 2  # frame 5 is frame 5: grey level 5 x 7
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v500.mp4", "v6.mp4"]  # no temporary files left


def test_recording_says_how_far_it_got_while_frames_render(tmp_path, monkeypatch, caplog):
    """Frames rendered in software can take minutes (MuJoCo with Mesa: ~10 frames/s): while a video is recorded,
    play says every PROGRESS_SECONDS how many frames the episode has and at what rate (here: every step)."""
    import logging

    from rlexp import PPO, make_envs
    from rlexp.envs import playback as playing
    monkeypatch.setattr(playing, "PROGRESS_SECONDS", 0.0)
    envs = make_envs("CartPole-v1", n_envs=1, seed=0, render_mode="rgb_array", max_episode_steps=5)
    agent = PPO(envs, seed=0, n_steps=8, mini_batches=1)
    with caplog.at_level(logging.INFO, logger="rlexp"):
        playing.play(agent, envs, episodes=1, video_dir=str(tmp_path / "videos"))
    said = [r.getMessage() for r in caplog.records if "frames rendered" in r.getMessage()]
    assert [line.split(" frames rendered")[0] for line in said] == [f"episode 1: {n}" for n in range(5)]
    envs.close()
