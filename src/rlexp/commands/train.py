"""mode=train: a new run (or +resume, +init_from), evaluation during it, tracking, and the final evaluation."""
from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf, open_dict

from rlexp.build import build_agent, check_config, setup_tensorflow, startup_done
from rlexp.errors import RunFailed, UserError
from rlexp.runs.checkpoints import BEST, PREVIOUS, DamagedCheckpoint, diverged, resume_checkpoint, write_failure
from rlexp.runs.dirs import (CHECKPOINT, absolute, check_resume_overrides, choices, claim_run_dir, in_sweep,
                             new_run_dir, run_config, run_dir_key, stored_config, task_overrides, unclaim_run_dir,
                             write_run_config)
from rlexp.runs.evaluation import (deterministic_eval, deterministic_final_eval, eval_kind, evaluate, make_evaluator,
                                   mean_std, write_summary)
from rlexp.runs.files import check_writable
from rlexp.runs.lock import RunLock

log = logging.getLogger("rlexp")


def init_weights(agent: Any, source: str) -> Path:
    """+init_from: a run dir's last checkpoint (or a .ckpt file) gives the weights and normaliser statistics."""
    ckpt = absolute(source)
    if ckpt.is_dir():
        ckpt = ckpt / CHECKPOINT
    if not ckpt.exists():
        raise UserError(f"+init_from={source}: {ckpt} does not exist; pass a run dir or a .ckpt file")
    try:
        agent.load(ckpt, weights_only=True)
    except DamagedCheckpoint as e:
        raise DamagedCheckpoint(f"+init_from={source}: {e}") from None
    except ValueError as e:  # Keras: the layer shapes differ
        raise UserError(f"+init_from={source}: its model does not fit this one ({e}); use the run's model "
                        "preset and layers") from None
    return ckpt


def warn_if_no_update(agent: Any, cfg: DictConfig) -> None:
    """A warning when run.max_steps ends the run before its first gradient step (while the replay buffer fills)."""
    first = agent.first_update_step()
    if agent.steps < first and int(float(cfg.run.max_steps)) < first:
        log.warning(f"warning: run.max_steps={cfg.run.max_steps} ends before the first gradient step (after "
                    f"buffer.initial_size transitions), which needs run.max_steps >= {first:,}; nothing will be "
                    "learned")


def train(cfg: DictConfig) -> float | dict[str, float]:
    from rlexp.agents.base import TrainingDiverged
    from rlexp.presets.complete import check_presets
    from rlexp.runs.logs import attach_run_log, detach_run_log

    resume, init_from = cfg.get("resume"), cfg.get("init_from")
    preset_line, lock, ckpt = None, None, None
    if resume and init_from:
        raise UserError("+resume continues a run, +init_from starts a new one from a run's weights: pass one of them")
    try:  # one pass: resolve the presets -> check -> claim the run dir -> build -> fit
        if resume:
            cfg, run_dir, ckpt, lock = resume_setup(cfg, str(resume))
            setup_tensorflow(cfg)
            checked = check_config(cfg)
        else:
            check_presets(cfg, choices())
            from rlexp.presets.fallbacks import apply_fallback

            cfg, preset_line = apply_fallback(cfg, choices(), task_overrides())
            setup_tensorflow(cfg)
            checked = check_config(cfg)
            run_dir = new_run_dir(cfg)
            made = [p for p in run_dir.parents if not p.exists()]  # what a refused build removes again
            run_dir = claim_run_dir(run_dir)
            lock = RunLock(run_dir).acquire(run_dir_key(cfg))
        try:
            agent = build_agent(cfg, checked=checked)
            if preset_line:
                log.info(preset_line)
            if init_from and not resume:
                log.info(f"initial weights from {init_weights(agent, str(init_from))}")
        except BaseException:
            if not resume:  # a value the build refuses leaves no run dir behind
                lock.release()
                lock = None
                unclaim_run_dir(run_dir, made)
            raise
        warn_if_no_update(agent, cfg)
        startup_done()
        if resume:
            from rlexp.runs.files import remove_leftovers

            remove_leftovers(run_dir, run_dir / "checkpoints", run_dir / "tb")  # half-written files of the killed run
        handler = None
        try:
            handler = attach_run_log(run_dir, *([preset_line] if preset_line else []))
            if not resume:
                write_run_config(run_dir, cfg)
            return _train(agent, cfg, run_dir, ckpt, restart=bool(resume) and ckpt is None)
        except OSError as e:  # disk full, permissions: one line true to what is on disk
            line = write_failure(e, run_dir)
            if not resume and not in_sweep() and not (run_dir / ".hydra" / "config.yaml").exists():
                shutil.rmtree(run_dir, ignore_errors=True)  # a run dir that can't even hold its config
            raise RunFailed(line) from None
        except TrainingDiverged as e:
            raise RunFailed(diverged(e, run_dir)) from None
        finally:
            if handler is not None:
                detach_run_log(handler)
    finally:
        if lock is not None:
            lock.release()


def resume_setup(cfg: DictConfig, resume: str) -> tuple[DictConfig, Path, Path | None, RunLock]:
    """+resume: the run dir (writable, locked for this process), the checkpoint to continue from (None: the run
    wrote none yet and trains again from step 0) and the run's own config with this command's run.* settings."""
    from rlexp.checks.values import check_settings

    key = f"+resume={resume}"
    run_dir = absolute(resume)
    check_run_dir(run_dir, key)
    config_file = run_dir / ".hydra" / "config.yaml"
    check_writable(run_dir, key)
    lock = RunLock(run_dir).acquire(key)
    try:
        ckpt = resume_checkpoint(run_dir, key)
        if ckpt is None:
            best = run_dir / CHECKPOINT.with_name(BEST)
            weights = f" ({best} holds weights only)" if best.exists() else ""
            log.info(f"{run_dir} has no checkpoint to resume yet{weights}: training it again from step 0 with its "
                     "config")
        stored = stored_config(ckpt or config_file, cfg, None if ckpt else OmegaConf.to_container(
            OmegaConf.load(config_file)))
        if stored.get("fallback", "auto") not in ("auto", "none", None):  # compare like with like
            from rlexp.presets.fallbacks import merge_fallback

            cfg = merge_fallback(cfg, str(stored.fallback), task_overrides())
        elif stored.get("fallback", "auto") == "auto":  # the pair's RL Zoo row and tuned preset, as it trained
            from rlexp.presets.fallbacks import apply_fallback

            fresh = OmegaConf.merge(cfg, {})
            with open_dict(fresh):
                fresh.pop("resume", None)
            cfg = apply_fallback(fresh, choices(), task_overrides())[0]
            derived = "epsilon_decay_steps"  # DQN's, from the run's length (which resuming may change)
            if derived in stored.agent and not any(o.startswith(f"agent.{derived}=") for o in task_overrides()):
                with open_dict(cfg):
                    cfg.agent[derived] = stored.agent[derived]
        check_resume_overrides(cfg, stored)
        check_settings(stored)
    except BaseException:
        lock.release()
        raise
    return stored, run_dir, ckpt, lock


def check_run_dir(run_dir: Path, key: str) -> None:
    """+resume's folder is a training run's dir: one that exists and holds its checkpoint or config (a file
    inside a run dir, such as its last.ckpt, names the run dir to pass instead)."""
    where = "pass the run dir of a training run (outputs/<date>/<time>_<agent>_<env>)"
    if not run_dir.exists():
        raise UserError(f"{key}: no such run dir {run_dir}; {where}")
    if not run_dir.is_dir():
        owner = next((p for p in run_dir.parents if (p / ".hydra" / "config.yaml").exists()), None)
        raise UserError(f"{key}: {run_dir} is a file; " + (f"resume its run with +resume={owner}" if owner else where))
    if not (run_dir / CHECKPOINT).exists() and not (run_dir / CHECKPOINT).with_name(PREVIOUS).exists() \
            and not (run_dir / ".hydra" / "config.yaml").exists():
        raise UserError(f"{key}: {run_dir} is not a run dir (it has no checkpoints/last.ckpt or .hydra/config.yaml); "
                        f"{where}")


def _train(agent: Any, cfg: DictConfig, run_dir: Path, resume_from: Path | None,
           restart: bool = False) -> float | dict[str, float]:
    """Train (from `resume_from`; with `restart` a run that wrote no checkpoint yet, its files started over)."""
    evaluator = make_evaluator(cfg, run_dir)
    if resume_from is not None:
        state = agent.load(resume_from)
        if evaluator is not None:
            evaluator.restore(agent.steps)
        log.info(f"resumed {run_dir} at step {state['steps']:,} ({state['episodes']:,} episodes)")
    elif restart:
        agent.history.path = run_dir / "history.parquet"
        agent.history._flushed = -1  # the first flush replaces the rows of the attempt that wrote no checkpoint
        if evaluator is not None:
            evaluator.restore(0)
    ended = resume_from is not None and agent.stop_reason(int(float(cfg.run.max_steps)), cfg.run.target_reward)
    if ended:
        log.info(f"the run had already finished ({ended}): nothing to train; resume with a larger run.max_steps "
                 "(or run.target_reward) to train on")
    elif not cfg.agent.get("quiet"):
        from rlexp.envs.make import stepping

        precision = "float32" if agent.precision == "float32" else f"{agent.precision.split('_')[-1]} compute"
        log.info(f"training {type(agent).__name__} on {cfg.env.id} ({stepping(agent.envs)}, {precision}) -> {run_dir}")
    tracker = make_tracker(cfg, run_dir, agent if resume_from is not None or restart else None, agent)
    failed = True
    try:
        summary = agent.fit(cfg.run.max_steps, cfg.run.target_reward, run_dir=run_dir,
                            checkpoint_interval=float(cfg.run.checkpoint_interval),
                            history_interval=float(cfg.run.history_interval), progress=progress_mode(cfg),
                            config=run_config(cfg), tracker=tracker, evaluator=evaluator)
        tracker.end_of_training()
        returns, evaluated = [], False
        if summary["reason"] != "interrupted":
            returns, evaluated = final_evaluation(agent, cfg, evaluator)
        precision = int(cfg.agent.display_precision)
        mean, std = mean_std(returns)
        if evaluated:  # one eval/mean_return a step: an evaluation during training at this step is the final one
            tracker.scalars(agent.steps, {"eval/mean_return": mean, "eval/std_return": std})
        write_summary(run_dir, summary, returns, cfg)
        failed = False
    finally:
        tracker.close(failed)
        if evaluator is not None:
            evaluator.close()
    finished = resume_from is not None and summary["already_finished"]
    # the whole run's totals: a resumed run's steps and training seconds count every session
    log.info(f"{'already finished' if finished else 'done'} ({summary['reason']}): {summary['steps']:,} steps in "
             f"{summary['seconds']:.1f} s ({summary['steps_per_s']:,.0f} steps/s) | "
             + (f"eval {mean:.{precision}f} ± {std:.{precision}f} over {len(returns)} "
                f"{eval_kind(cfg, final=True)}episodes"
                if returns else "no eval")
             + f" | run dir: {run_dir}")
    log.info(f"next: python -m rlexp mode=play +checkpoint={run_dir} +video_dir=videos | "
             f"python -m rlexp mode=eval +checkpoint={run_dir} | python -m rlexp +resume={run_dir}")
    agent.envs.close()
    agent.envs = None  # the env copies go now, not with the agent at the exit (see commands.play)
    if summary["reason"] == "interrupted" and summary.get("signal"):
        if in_sweep():  # the sweep's own stop (a trial run inside its process took the Ctrl-C): not a result
            raise KeyboardInterrupt
        raise SystemExit(128 + int(summary["signal"]))  # saved; scripts tell it from a finished run: 130 / 143
    if in_sweep():  # a trial of rlexp's sweeper gets every objective back (the float elsewhere)
        from rlexp.sweep import trial_metrics

        metrics = trial_metrics(mean, evaluator.rows if evaluator is not None else [], agent.steps,
                                summary["seconds"])
        if metrics is not None:
            return metrics
    return mean


def progress_mode(cfg: DictConfig) -> str:
    """Live bar on a terminal, log lines otherwise and in sweeps (many trials share one console)."""
    mode = str(cfg.run.progress)
    return "log" if mode == "auto" and in_sweep() else mode


def make_tracker(cfg: DictConfig, run_dir: Path, resumed: Any = None, agent: Any = None):
    """TensorBoard always (a `resumed` agent's event files made to agree with its history first); Weights &
    Biases with logger=wandb (grouped by sweep in --multirun); in a trial of rlexp's sweeper, its tracker for the
    study (rlexp.sweep.trial_reporter, told the trial's `agent`)."""
    from rlexp.runs.tracking import TensorBoard, Trackers, Wandb

    resume = (resumed.history.rows, resumed.steps) if resumed is not None else None
    trackers = [TensorBoard(run_dir / "tb", resume=resume)]
    logger = cfg.get("logger") or {}
    if logger.get("name") == "wandb":
        group = Path(HydraConfig.get().sweep.dir).name if in_sweep() else None
        settings = dict(OmegaConf.to_container(logger, resolve=True))
        settings["name"] = settings.pop("run_name", None)
        trackers.append(Wandb(settings, run_config(cfg), run_dir, default_group=group))
    if in_sweep():
        from rlexp.sweep import trial_reporter

        reporter = trial_reporter(int(float(cfg.run.max_steps)), int(cfg.run.get("eval_interval") or 0), agent)
        if reporter is not None:
            trackers.append(reporter)
    return Trackers(trackers)


LONG_EVALUATION = 10_000  # env steps (episodes x the training episodes' mean length) from which it is announced


def final_evaluation(agent: Any, cfg: DictConfig, evaluator: Any = None) -> tuple[list[float], bool]:
    """The final evaluation's returns, and whether it ran now: an evaluation during training at the final step
    evaluated the same weights on the same episodes, so its returns are taken instead where it drew actions as
    the final one does (`run.final_eval_deterministic`). A long one (from `LONG_EVALUATION` env steps, estimated
    from the training episodes) is announced first."""
    final_mode = deterministic_final_eval(cfg)
    if (evaluator is not None and evaluator.last_returns is not None and evaluator.rows[-1]["step"] == agent.steps
            and final_mode == deterministic_eval(cfg)):
        return list(evaluator.last_returns), False
    episodes = int(cfg.run.eval_episodes)
    length = agent.steps / agent.episodes if agent.episodes else episode_limit(cfg)
    if episodes > 0 and episodes * length >= LONG_EVALUATION:
        log.info(f"final evaluation: {episodes} {eval_kind(cfg, final=True)}episodes of ~{length:,.0f} steps ...")
    return evaluate(agent, cfg, final_mode), True


def episode_limit(cfg: DictConfig) -> int:
    """The env's time limit (env.max_episode_steps, else its registration's; 0 if it has none)."""
    limit = cfg.env.get("max_episode_steps")
    if not limit:
        import gymnasium as gym

        try:
            limit = gym.spec(str(cfg.env.id).split(":")[-1]).max_episode_steps
        except gym.error.Error:
            limit = 0
    return int(limit or 0)
