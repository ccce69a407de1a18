"""mode=play and mode=eval: a trained run's agent acts (video, frames, demonstrations) or is evaluated."""
from __future__ import annotations

import logging
import os
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from rlexp.build import build_agent, setup_tensorflow, startup_done
from rlexp.errors import UserError
from rlexp.runs.checkpoints import DamagedCheckpoint
from rlexp.runs.dirs import absolute, find_checkpoint, stored_config
from rlexp.runs.evaluation import deterministic_eval, eval_kind, evaluate, mean_std

log = logging.getLogger("rlexp")


def play_render_mode(cfg: DictConfig) -> tuple[str | None, str]:
    """The render mode that mode=play asks of the env, and the option that asks for it."""
    if cfg.mode != "play":
        return None, ""
    for key in ("video_dir", "frame_dir"):
        if cfg.get(key):
            return "rgb_array", f"+{key}"
    return ("human", "+render=true") if cfg.get("render") else (None, "")


def play_or_eval(cfg: DictConfig) -> float:
    """mode=play / mode=eval of the checkpoint `find_checkpoint` picks; a damaged one is one line naming it."""
    ckpt = find_checkpoint(cfg, cfg.get("checkpoint"))
    try:
        return _play_or_eval(cfg, ckpt)
    except DamagedCheckpoint as e:
        raise DamagedCheckpoint(f"+checkpoint={cfg.checkpoint}: {e}" if cfg.get("checkpoint") else str(e)) from None


def _play_or_eval(cfg: DictConfig, ckpt: Path) -> float:
    from rlexp.envs.playback import check_writable_dir, play

    run_cfg = stored_config(ckpt, cfg)
    render_mode, option = play_render_mode(cfg)
    if render_mode:  # fail before loading anything, and before making any directory
        from rlexp.envs.playback import check_render_mode
        from rlexp.envs.rendering import offscreen_rendering

        offscreen_rendering(render_mode)  # before the env's module imports MuJoCo

        check_render_mode(str(run_cfg.env.id), run_cfg.env.get("imports") or (), render_mode, option)
    for key in ("video_dir", "frame_dir", "demo_dir"):
        if cfg.get(key):
            check_writable_dir(cfg[key], key)
    if cfg.get("demo_dir"):
        from rlexp.envs.demos import DATASET_ID

        if (Path(cfg.demo_dir).expanduser() / DATASET_ID).exists():
            raise UserError(f"+demo_dir={cfg.demo_dir} holds demonstrations already; pick a new directory")
    setup_tensorflow(run_cfg)
    log.info(f"loaded {ckpt}")
    precision = int(run_cfg.agent.display_precision)
    if cfg.mode == "eval":
        agent = build_agent(run_cfg, n_envs=1)
        startup_done()
        agent.load(ckpt, weights_only=True)
        returns = evaluate(agent, run_cfg)
        mean, std = mean_std(returns)
        log.info(f"eval: {mean:.{precision}f} ± {std:.{precision}f} over {len(returns)} {eval_kind(run_cfg)}episodes")
        return mean
    if not cfg.get("render"):
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # off-screen rendering needs no display
    try:
        agent = build_agent(run_cfg, n_envs=1, render_mode=render_mode)
    except TypeError as e:  # an env class that takes no render_mode but doesn't say so in its metadata
        if render_mode and "render_mode" in str(e):
            raise UserError(f"{option} needs an env that renders with render_mode={render_mode!r}, but "
                            f"{run_cfg.env.id} takes no render_mode argument; add it, or play without "
                            f"{option}") from None
        raise
    startup_done()
    agent.load(ckpt, weights_only=True)
    name = ckpt.parent.parent.name
    recorder = None
    if cfg.get("demo_dir"):
        from rlexp.envs.demos import DemoRecorder

        recorder = DemoRecorder()
    returns = play(agent, agent.envs, episodes=int(cfg.play.episodes), video_dir=cfg.get("video_dir"),
                   frame_dir=cfg.get("frame_dir"), frame_frequency=int(cfg.play.frame_frequency),
                   frame_delay=float(cfg.play.frame_delay), render=bool(cfg.get("render")), fps=int(cfg.play.fps),
                   name=name, recorder=recorder, deterministic=deterministic_eval(run_cfg))
    agent.envs.close()
    # the env copies go now: the agent, kept by reference cycles in its graph functions, lives to the exit, where
    # an emulator still alive with it is reported as leaked (ale-py's nanobind bindings print ~20 lines)
    agent.envs = None
    if recorder is not None:
        path = recorder.write(absolute(cfg.demo_dir), run_cfg.env.id,
                              type(agent).__name__, agent.observation_space, agent.action_space)
        log.info(f"demonstrations: {path} ({len(recorder.episodes)} episodes, Minari format); train from them "
                 f"with agent=dqfd agent.demos={cfg.demo_dir}; load them with Minari: "
                 f"MINARI_DATASETS_PATH={absolute(cfg.demo_dir)} python -c \"import minari; "
                 f"print(minari.load_dataset('{DATASET_ID}'))\"")
    if cfg.get("video_dir") and (cfg.get("logger") or {}).get("name") == "wandb":
        from rlexp.runs.tracking import Wandb

        settings = dict(OmegaConf.to_container(cfg.logger, resolve=True))
        settings["name"] = settings.pop("run_name", None) or f"{name}_play"
        tracker = Wandb(settings, {"checkpoint": str(ckpt), "mode": "play"}, Path(cfg.video_dir))
        try:
            tracker.video(Path(cfg.video_dir) / f"{name}.mp4")
        finally:
            tracker.close()
    return mean_std(returns)[0]
