"""Watching a trained agent: render to a window, an .mp4 video (moviepy) or .jpg frames."""
from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from rlexp.errors import UserError
from rlexp.files import cannot_make_dir_in
from rlexp.wrappers import with_lost_lives

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
    UserError naming `key`."""
    path = Path(path).expanduser()
    existing = Path(os.path.abspath(path))
    while not existing.exists() and existing.parent != existing:
        existing = existing.parent
    if not existing.is_dir():
        raise UserError(f"+{key}={path} can't be created ({existing} is not a directory); pick a writable directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UserError(f"+{key}={path} is not writable; pick a writable directory")
    reason = cannot_make_dir_in(existing)
    if reason:
        raise UserError(f"+{key}={path} can't be created ({existing}: {reason}); pick a writable directory")
    return path


def declared_render_modes(env_id: str, imports: Sequence[str] = ()) -> list[str] | None:
    """The render modes that `env_id`'s class lists in its metadata["render_modes"]; None where unknown
    (an unregistered id, or an entry point without metadata)."""
    import gymnasium as gym
    from gymnasium.envs.registration import load_env_creator

    from rlexp.envs import import_env_modules

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


def rgb_frame(envs) -> np.ndarray:
    """The first env's current frame as an RGB(A) array, or a one-line UserError if the envs give none."""
    try:
        rendered = envs.render()
    except NotImplementedError:
        rendered = None
    frame = rendered[0] if isinstance(rendered, (tuple, list)) and rendered else rendered
    if not (isinstance(frame, np.ndarray) and frame.ndim == 3 and frame.shape[-1] in (3, 4)):
        raise UserError(f"recording a video or frames needs RGB frames, but the env's render() gave "
                        f"{type(frame).__name__}; make the envs with render_mode='rgb_array' (the env class must "
                        "support it)")
    return frame[..., :3]


def write_video(frames: list[np.ndarray], path: Path, fps: int) -> None:
    """Encode RGB frames to an .mp4 with moviepy, atomically (a temporary name, then a rename)."""
    from moviepy import ImageSequenceClip

    tmp = path.with_name(f".{path.stem}.tmp.mp4")
    try:
        ImageSequenceClip(list(frames), fps=fps).write_videofile(str(tmp), codec="libx264", audio=False, logger=None)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def play(agent, envs, episodes: int = 1, video_dir: str | None = None, frame_dir: str | None = None,
         frame_frequency: int = 1, frame_delay: float = 0.0, render: bool = False, fps: int = 30,
         name: str = "play", recorder=None, deterministic: bool = True) -> list[float]:
    """Play `episodes` episodes in a 1-env vector env (deterministic actions, or drawn from the policy);
    returns each episode's return. A `recorder` (rlexp.demos.DemoRecorder) keeps the episodes as
    demonstrations."""
    from rlexp.checks import _number, whole

    episodes, fps = whole("play.episodes", episodes, 1), whole("play.fps", fps, 1)
    frame_frequency = whole("play.frame_frequency", frame_frequency, 1)
    frame_delay = _number("play.frame_delay", frame_delay, minimum=0)
    video_path = check_writable_dir(video_dir, "video_dir") if video_dir else None
    frame_path = check_writable_dir(frame_dir, "frame_dir") if frame_dir else None
    capture = video_path is not None or frame_path is not None
    if not render:  # off-screen frames need no display or sound device (SDL would complain on stderr)
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
        os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
    frames: list[np.ndarray] = []
    returns: list[float] = []
    obs, _ = envs.reset(seed=agent.seed)
    if recorder is not None:
        recorder.start(obs)
    total, frame_index, starts = 0.0, 0, np.ones(1, bool)
    while len(returns) < episodes:
        if capture:
            frame = rgb_frame(envs)
            if frame_path is not None and frame_index == 0:  # made once the env proves it gives frames
                writable_dir(frame_path, "frame_dir")
            if video_path is not None:
                frames.append(frame)
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
    if video_path is not None and frames:
        path = writable_dir(video_path, "video_dir") / f"{name}.mp4"
        write_video(frames, path, fps)
        log.info(f"video: {path} ({len(frames)} frames)")
    if frame_path is not None:
        log.info(f"frames: {frame_path} (every {frame_frequency} frame(s))")
    return returns

