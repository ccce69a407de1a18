"""Watching a trained agent: render to a window, an .mp4 video (moviepy) or .jpg frames."""
from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import numpy as np

from rlexp.errors import UserError
from rlexp.wrappers import with_lost_lives

log = logging.getLogger("rlexp")


def writable_dir(path: str | os.PathLike, key: str) -> Path:
    """Create `path` if needed and check it can be written, or raise a one-line UserError naming `key`."""
    path = Path(path).expanduser()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"+{key}={path} can't be created ({e.strerror}); pick a writable directory") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise UserError(f"+{key}={path} is not writable; pick a writable directory")
    return path


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
    video_path = writable_dir(video_dir, "video_dir") if video_dir else None
    frame_path = writable_dir(frame_dir, "frame_dir") if frame_dir else None
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
            frame = envs.render()
            frame = frame[0] if isinstance(frame, (tuple, list)) else frame
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
        path = video_path / f"{name}.mp4"
        write_video(frames, path, fps)
        log.info(f"video: {path} ({len(frames)} frames)")
    if frame_path is not None:
        log.info(f"frames: {frame_path} (every {frame_frequency} frame(s))")
    return returns

