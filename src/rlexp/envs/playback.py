"""Watching a trained agent: render to a window, an .mp4 video (imageio-ffmpeg) or .jpg frames."""
from __future__ import annotations

import logging
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from rlexp.envs.wrappers import with_lost_lives
from rlexp.errors import UserError
from rlexp.runs.files import check_writable

log = logging.getLogger("rlexp")


def writable_dir(path: str | os.PathLike, key: str) -> Path:
    """Create `path` if needed and check it can be written, or raise a one-line UserError naming `key`."""
    path = check_writable_dir(path, key)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"+{key}={path} can't be created ({e.strerror}); pick a writable directory") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise UserError(f"+{key}={path} is not writable; pick a writable directory")
    return path


def check_writable_dir(path: str | os.PathLike, key: str) -> Path:
    """Check, creating nothing, that `path` is a writable directory or can be made one, or raise a one-line
    UserError naming `+key=path` (rlexp.runs.files.check_writable, as run dirs are checked)."""
    path = Path(path).expanduser()
    check_writable(Path(os.path.abspath(path)), f"+{key}={path}")
    return path


def declared_render_modes(env_id: str, imports: Sequence[str] = ()) -> list[str] | None:
    """The render modes that `env_id`'s class lists in its metadata["render_modes"]; None where unknown
    (an unregistered id, or an entry point without metadata)."""
    import gymnasium as gym
    from gymnasium.envs.registration import load_env_creator

    from rlexp.envs.make import import_env_modules

    import_env_modules(imports)
    if ":" in env_id:
        module, env_id = env_id.split(":", 1)
        import_env_modules([module], key="env.id")
    try:
        entry_point = gym.spec(env_id).entry_point
        creator = entry_point if callable(entry_point) else load_env_creator(entry_point)
    except (gym.error.Error, ImportError, AttributeError, ValueError):
        return None
    metadata = getattr(creator, "metadata", None)
    return list(metadata.get("render_modes") or []) if isinstance(metadata, dict) else None


def check_render_mode(env_id: str, imports: Sequence[str], render_mode: str, option: str) -> None:
    """Raise a one-line UserError naming `option` when `env_id` does not render with `render_mode`."""
    modes = declared_render_modes(env_id, imports)
    if modes is None or render_mode in modes:
        return
    if render_mode == "human" and {"rgb_array", "rgb_array_list"} & set(modes):
        return  # gymnasium shows its RGB frames in a window
    raise UserError(f"{option} needs an env that renders with render_mode={render_mode!r}, but {env_id} lists "
                    f"render_modes {modes}; add {render_mode!r} to its class's metadata['render_modes'] and "
                    f"accept render_mode in its __init__, or play without {option}")


def is_mujoco(envs: Any) -> bool:
    """Whether the (first) env of `envs` is one of gymnasium's MuJoCo envs."""
    if "mujoco" not in sys.modules:
        return False
    env = envs.envs[0] if getattr(envs, "envs", None) else envs
    return any(cls.__name__ == "MujocoEnv" for cls in type(getattr(env, "unwrapped", env)).__mro__)


def rgb_frame(envs) -> np.ndarray:
    """The first env's current frame as an RGB(A) array, or a one-line UserError if the envs give none."""
    try:
        with warnings.catch_warnings(record=True) as caught:  # GLFW reports why it failed as warnings
            warnings.simplefilter("always")
            rendered = envs.render()
    except NotImplementedError:
        rendered = None
    except Exception as e:  # noqa: BLE001 - MuJoCo's OpenGL backends fail with errors of every kind
        if not is_mujoco(envs):
            raise
        from rlexp.envs.rendering import render_failure

        raise UserError(render_failure(e, [str(w.message) for w in caught])) from None
    for w in caught:  # a frame came: its warnings are passed on as they were
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    frame = rendered[0] if isinstance(rendered, (tuple, list)) and rendered else rendered
    if not (isinstance(frame, np.ndarray) and frame.ndim == 3 and frame.shape[-1] in (3, 4)):
        raise UserError(f"recording a video or frames needs RGB frames, but the env's render() gave "
                        f"{type(frame).__name__}; make the envs with render_mode='rgb_array' (the env class must "
                        "support it)")
    return frame[..., :3]


class VideoWriter:
    """An H.264 .mp4 written with imageio-ffmpeg as frames come, one video frame per `add`, and renamed into place
    at `close` (atomic: a failed play leaves no partial video). Frames of odd width or height get one edge row or
    column (H.264's 4:2:0 colour needs even sizes)."""

    def __init__(self, path: Path, fps: int) -> None:
        self.path, self.fps, self.frames = path, int(fps), 0
        self.tmp = path.with_name(f".{path.stem}.tmp.mp4")
        self._writer = None

    def add(self, frame: np.ndarray) -> None:
        height, width = frame.shape[:2]
        if self._writer is None:
            import imageio_ffmpeg

            self._writer = imageio_ffmpeg.write_frames(str(self.tmp), (width + width % 2, height + height % 2),
                                                       fps=self.fps, codec="libx264", quality=7, macro_block_size=1,
                                                       ffmpeg_log_level="error")
            self._writer.send(None)  # starts ffmpeg
        if height % 2 or width % 2:
            frame = np.pad(frame, ((0, height % 2), (0, width % 2), (0, 0)), mode="edge")
        self._writer.send(np.ascontiguousarray(frame))
        self.frames += 1

    def close(self) -> None:
        """Finish the file and move it to `path`."""
        if self._writer is not None:
            self._writer.close()
            os.replace(self.tmp, self.path)

    def abort(self) -> None:
        if self._writer is not None:
            try:
                self._writer.close()
            finally:
                self.tmp.unlink(missing_ok=True)


PROGRESS_SECONDS = 10.0  # a line this often while frames are rendered (MuJoCo in software: ~10 frames/s)


def play(agent, envs, episodes: int = 1, video_dir: str | None = None, frame_dir: str | None = None,
         frame_frequency: int = 1, frame_delay: float = 0.0, render: bool = False, fps: int = 30,
         name: str = "play", recorder=None, deterministic: bool = True) -> list[float]:
    """Play `episodes` episodes in a 1-env vector env (deterministic actions, or drawn from the policy);
    returns each episode's return. The video has one frame per step: each observation the agent acted on. A
    `recorder` (rlexp.envs.demos.DemoRecorder) keeps the episodes as demonstrations."""
    from rlexp.checks.values import _number, whole

    episodes, fps = whole("play.episodes", episodes, 1), whole("play.fps", fps, 1)
    frame_frequency = whole("play.frame_frequency", frame_frequency, 1)
    frame_delay = _number("play.frame_delay", frame_delay, minimum=0)
    video_path = check_writable_dir(video_dir, "video_dir") if video_dir else None
    frame_path = check_writable_dir(frame_dir, "frame_dir") if frame_dir else None
    capture = video_path is not None or frame_path is not None
    if not render:  # off-screen frames need no display or sound device (SDL would complain on stderr)
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
        os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
    video: VideoWriter | None = None
    returns: list[float] = []
    obs, _ = envs.reset(seed=agent.seed)
    if recorder is not None:
        recorder.start(obs)
    total, frame_index, starts = 0.0, 0, np.ones(1, bool)
    said, started = time.monotonic(), time.monotonic()
    try:
        while len(returns) < episodes:
            if capture and time.monotonic() - said >= PROGRESS_SECONDS:  # rendering in software is slow: say so
                said = time.monotonic()
                log.info(f"episode {len(returns) + 1}: {frame_index:,} frames rendered "
                         f"({frame_index / max(said - started, 1e-9):.0f} frames/s)")
            if capture:
                frame = rgb_frame(envs)
                if frame_index == 0:  # the directories are made once the env proves it gives frames
                    if frame_path is not None:
                        writable_dir(frame_path, "frame_dir")
                    if video_path is not None:
                        video = VideoWriter(writable_dir(video_path, "video_dir") / f"{name}.mp4", fps)
                if video is not None:
                    video.add(frame)
                if frame_path is not None and frame_index % max(int(frame_frequency), 1) == 0:
                    from PIL import Image

                    Image.fromarray(frame).save(frame_path / f"{name}_{frame_index:06d}.jpg", quality=90)
                frame_index += 1
            if frame_delay:
                time.sleep(float(frame_delay))
            actions = agent.act(obs, starts, deterministic)
            obs, rewards, terminated, truncated, info = envs.step(actions)
            starts = with_lost_lives(terminated | truncated, info)  # a recurrent state restarts as in training
            if recorder is not None:
                recorder.step(actions, obs, rewards, terminated, truncated, info)
            total += float(rewards[0])
            if terminated[0] or truncated[0]:
                returns.append(total)
                log.info(f"episode {len(returns)}: return {total:.{agent.display_precision}f}")
                total = 0.0
    except BaseException:
        if video is not None:
            video.abort()
        raise
    if video is not None:
        video.close()
        log.info(f"video: {video.path} ({video.frames} frames)")
    if frame_path is not None:
        log.info(f"frames: {frame_path} (every {frame_frequency} frame(s))")
    return returns
