"""The fit loop: iterations until a stop reason, episode bookkeeping (running mean, best, plateaus), tracking,
evaluations during training and the checkpoints the loop writes; interruption and divergence."""
from __future__ import annotations

import contextlib
import logging
import math
import signal
import threading
import time
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from rlexp.runs.history import plot_history
from rlexp.runs.progress import Progress

log = logging.getLogger("rlexp")


class TrainingDiverged(RuntimeError):
    """A loss or parameter became NaN or infinite."""


@contextlib.contextmanager
def stop_on_interrupt(stop: list[bool]):
    """Ctrl-C (SIGINT) or SIGTERM sets stop[0] to the signal's number: the loop ends at the next iteration boundary
    with a consistent checkpoint. A second Ctrl-C interrupts at once (the previous checkpoint stays loadable)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        if stop[0] and signum == signal.SIGINT:
            raise KeyboardInterrupt
        stop[0] = stop[0] or signum  # the first signal: the run's exit code is 128 + it
        log.warning("stopping after this iteration and saving a checkpoint (Ctrl-C again to stop at once)")

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


class FitLoop:
    """`Agent`'s training loop (`fit`) and the episode bookkeeping it does between iterations."""

    @property
    def mean_reward(self) -> float:
        return float(np.mean(self.rewards)) if self.rewards else -math.inf

    @property
    def window_full(self) -> bool:
        """Whether the running mean covers a full `reward_buffer_size` window of episodes (a best needs one)."""
        return len(self.rewards) >= self.reward_buffer_size

    def _record_episodes(self, elapsed: float) -> bool:
        """Turn finished episodes into history rows; plateau logic. Returns True if the mean improved.

        The best mean (`best_reward`, best.ckpt) and the plateau logic count only means over a full window:
        the mean of the first few episodes says little about the weights."""
        improved = False
        monitoring = self.divergence_monitoring_steps is not None and self.steps >= float(self.divergence_monitoring_steps)
        for step, ret, *_ in self._finished:
            self.episodes += 1
            self.rewards.append(ret)
            mean = self.mean_reward
            if self.window_full and mean > self.best_reward:
                self.best_reward, improved = mean, True
                self.plateau_count = self.early_stop_count = 0
            elif self.window_full and monitoring:
                self.plateau_count += 1
                if self.plateau_count >= self.plateau_reduce_patience:
                    self.plateau_count = 0
                    self.early_stop_count += 1
                    self.lr_scale *= self.plateau_reduce_factor
                    log.info(f"plateau at step {step:,}: learning rate x{self.plateau_reduce_factor} -> {self.current_lr():.3g}")
            self.history.append(self.episodes, step, elapsed, ret, mean, self.best_reward)
        self._finished.clear()
        return improved

    def steps_left(self) -> int:
        """Env steps the next fused call may take: up to max_steps, or the next evaluation if sooner."""
        limit = self.max_steps if self.pause_step is None else min(self.max_steps, self.pause_step)
        return limit - self.steps

    def target_reached(self, target_reward: float | None) -> bool:
        """Whether the mean of the last agent.reward_buffer_size episodes (a full window) reaches the target."""
        enough = len(self.rewards) >= self.reward_buffer_size
        return target_reward is not None and enough and self.mean_reward >= float(target_reward)

    def stop_reason(self, max_steps: int, target_reward: float | None, interrupted: bool = False) -> str | None:
        """Why training ends now (max_steps, interrupted, target_reward, early_stop), or None to go on."""
        if self.steps >= max_steps:
            return "max_steps"
        if interrupted:
            return "interrupted"
        if self.target_reached(target_reward):
            return "target_reward"
        if self.early_stop_count >= self.early_stop_patience > 0:
            return "early_stop"
        return None

    def fit(self, max_steps: float, target_reward: float | None = None, run_dir: str | Path | None = None,
            checkpoint_interval: float = 10.0, history_interval: float = 2.0, progress: str = "auto",
            config: Mapping[str, Any] | None = None, tracker: Any = None, evaluator: Any = None,
            verbose: int = 1) -> dict[str, Any]:
        """Train until `max_steps` env steps, the target mean reward, or early stopping.

        With `run_dir`, writes history.parquet, history.png and checkpoints/{last,best}.ckpt there: last.ckpt after
        the first iteration, then every `checkpoint_interval` seconds (`rlexp.runs.checkpoints.checkpoint_wait`) and
        at the end (the last.ckpt each save replaces stays as previous.ckpt, which resume falls back to if last.ckpt
        is damaged); best.ckpt holds the best mean over a full `reward_buffer_size` window of training episodes
        (none before the first full window), or with an `evaluator` (rlexp.runs.evaluation.Evaluator) the best
        evaluation.
        `tracker` (see rlexp.runs.tracking) receives episode returns, losses, learning rate, steps/s and evaluations;
        it is flushed with the history.
        `verbose` (Stable-Baselines3's): 0 prints nothing but warnings; 1 progress (`progress`: 'auto' a live bar
        on a terminal and log lines otherwise, 'bar', 'log' or 'none') and evaluations, on the console where
        nothing has configured logging (`rlexp.runs.logs.verbosity`). The constructor's `quiet=True` leaves out the
        progress.
        Returns a summary of the whole run (all sessions of a resumed one): steps, seconds (training time),
        steps_per_s, reason, mean and best reward, episodes; session_steps and session_seconds of this call;
        first_call_steps and first_call_seconds of its first training iteration (graph tracing and compilation
        included) and steady_steps_per_s of the rest (None with a single iteration);
        already_finished when the run had ended before this call (nothing trained).
        """
        from rlexp.runs.logs import verbosity

        with verbosity(verbose):
            return self._fit(max_steps, target_reward, run_dir, checkpoint_interval, history_interval,
                             progress if verbose else "none", config, tracker, evaluator)

    def _fit(self, max_steps: float, target_reward: float | None, run_dir: str | Path | None,
             checkpoint_interval: float, history_interval: float, progress: str, config: Mapping[str, Any] | None,
             tracker: Any, evaluator: Any) -> dict[str, Any]:
        """`fit`'s loop."""
        from rlexp.runs.tracking import Tracker

        from rlexp.checks.values import check_fit_arguments
        from rlexp.runs.checkpoints import checkpoint_wait

        check_fit_arguments(max_steps, target_reward, checkpoint_interval, history_interval)
        tracker = tracker or Tracker()
        self._tracked_steps = -self.TRACK_EVERY_STEPS
        self.max_steps = int(float(max_steps))
        run_dir = Path(run_dir) if run_dir else None
        if run_dir is not None:
            from rlexp.runs.files import check_writable

            check_writable(run_dir, f"run_dir={run_dir}")
        self.config = dict(config or {})
        if run_dir is not None:
            self.history.path = run_dir / "history.parquet"
        bar = Progress(self.max_steps, "none" if self.quiet else progress, self.log_frequency or 10,
                       self.display_precision, initial_steps=self.steps, initial_episodes=self.episodes)
        start_steps, self._first_call = self.steps, (0, 0.0)
        last_checkpoint = last_flush = last_best = time.perf_counter()
        wait = float(checkpoint_interval)  # until the next `last` checkpoint (longer where writing one is slow)
        best_pending = False
        session_start, base_time = time.perf_counter(), self.train_time
        stop, iterations = [False], 0
        try:
            with stop_on_interrupt(stop):
                while (reason := self.stop_reason(self.max_steps, target_reward, stop[0])) is None:
                    self._apply_lr()
                    self.pause_step = evaluator.next_step if evaluator is not None else None
                    metrics = self.train_iteration()
                    iterations += 1
                    self.check_finite(metrics)
                    self.train_time = base_time + time.perf_counter() - session_start
                    if iterations == 1:  # graph tracing and compilation, then its steps: the session's steady
                        self._first_call = (self.steps - start_steps, self.train_time - base_time)  # state follows
                    rows = len(self.history)
                    improved = self._record_episodes(self.train_time)
                    best_pending |= improved and evaluator is None  # with an evaluator, best.ckpt is its best
                    self._track(tracker, metrics, rows, start_steps, self.train_time - base_time)
                    bar.update(self.steps, self.episodes, self.mean_reward, self.best_reward)
                    if evaluator is not None and evaluator.due(self.steps):
                        session_start += self._evaluate_now(evaluator, tracker)
                    if run_dir is None:
                        continue
                    now = time.perf_counter()
                    if best_pending and now - last_best >= 1.0:
                        self.save(run_dir / "checkpoints" / "best.ckpt", full=False)
                        best_pending, last_best = False, now
                    if iterations == 1 or now - last_checkpoint >= wait:  # the first at once: resumable early
                        self.save(run_dir / "checkpoints" / "last.ckpt", keep_previous=True)
                        tracker.flush()
                        wait = checkpoint_wait(checkpoint_interval, time.perf_counter() - now)
                        last_checkpoint = last_flush = now
                    elif now - last_flush >= history_interval:
                        self.history.flush()
                        tracker.flush()
                        last_flush = now
        finally:
            bar.close()
        self.stop_signal = int(stop[0]) if reason == "interrupted" else None
        if run_dir is not None:
            if best_pending:
                self.save(run_dir / "checkpoints" / "best.ckpt", full=False)
            self.save(run_dir / "checkpoints" / "last.ckpt", keep_previous=True)
            tracker.flush()
            if len(self.history):
                plot_history({run_dir.name: self.history.columns()}, run_dir / "history.png")
            if evaluator is None and not (run_dir / "checkpoints" / "best.ckpt").exists():
                log.info(f"no checkpoints/best.ckpt: {self.episodes:,} episodes, fewer than one full "
                         f"agent.reward_buffer_size={self.reward_buffer_size} window (play and eval use last.ckpt)")
        return self._summary(reason, start_steps, base_time, already_finished=iterations == 0 and
                             reason != "interrupted")

    def _summary(self, reason: str, start_steps: int, base_time: float, already_finished: bool) -> dict[str, Any]:
        """What `fit` returns: the whole run's totals and this call's share."""
        seconds = self.train_time
        session_steps, session_seconds = self.steps - start_steps, self.train_time - base_time
        first_steps, first_seconds = self._first_call
        steady = ((session_steps - first_steps) / (session_seconds - first_seconds)
                  if session_steps > first_steps and session_seconds > first_seconds else None)
        return dict(steps=self.steps, seconds=seconds, steps_per_s=self.steps / seconds if seconds > 0 else 0.0,
                    session_steps=session_steps, session_seconds=session_seconds,
                    first_call_steps=first_steps, first_call_seconds=first_seconds, steady_steps_per_s=steady,
                    reason=reason, already_finished=already_finished, mean_reward=self.mean_reward,
                    best_reward=self.best_reward, episodes=self.episodes,
                    signal=getattr(self, "stop_signal", None))  # the signal that interrupted it

    def _evaluate_now(self, evaluator: Any, tracker: Any) -> float:
        """One evaluation during training: logged, tracked, checkpointed by the evaluator. Returns its
        duration, which the training time leaves out."""
        start = time.perf_counter()
        row = evaluator(self, self.train_time)
        tracker.scalars(self.steps, {"eval/mean_return": row["mean_return"], "eval/std_return": row["std_return"]})
        p = self.display_precision
        log.info(f"eval at step {self.steps:,}: {row['mean_return']:.{p}f} ± {row['std_return']:.{p}f} over "
                 f"{row['episodes']} {'' if evaluator.deterministic else 'stochastic '}episodes"
                 + (" (new best)" if row["improved"] else ""))
        return time.perf_counter() - start

    TRACK_EVERY_STEPS = 1000  # env steps between two writes of the training scalars

    def _track(self, tracker: Any, metrics: Mapping[str, float], first_row: int, start_steps: int,
               seconds: float) -> None:
        """Send the new episodes and this iteration's metrics to the tracker: first the steps trained so far (the
        episodes carry their own end steps, which lie before them when the iteration ran past an episode's end)."""
        trained = getattr(tracker, "trained", None)  # a tracker of the user's own may not have it
        if trained is not None:
            trained(self.steps)
        rows = self.history.rows
        for i in range(first_row, len(self.history)):
            tracker.scalars(rows["step"][i], {"episode/return": rows["episode_reward"][i],
                                              "episode/mean_return": rows["mean_reward"][i]})
        if self.steps - self._tracked_steps < self.TRACK_EVERY_STEPS:  # DQN iterates every few env steps
            return
        self._tracked_steps = self.steps
        tracker.scalars(self.steps, {**{f"train/{k}": v for k, v in metrics.items()},
                                     "train/learning_rate": self.current_lr(),
                                     "train/steps_per_s": (self.steps - start_steps) / max(seconds, 1e-9)})

    def first_update_step(self) -> int:
        """The fewest env steps (run.max_steps) of a run that makes a gradient step: a shorter one learns
        nothing. 0: the first iteration learns (an on-policy rollout is collected whole, past max_steps)."""
        return 0

    def check_finite(self, metrics: Mapping[str, float]) -> None:
        bad = [k for k, v in metrics.items() if not np.isfinite(v)]
        if bad:
            raise TrainingDiverged(f"non-finite {', '.join(bad)} at step {self.steps:,}")
