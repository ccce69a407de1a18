"""Populations: N independent members of one agent trained in one process and one graph (`Agent(seeds=...)`).

Each member is an ordinary run: its own seed, weights, optimizer state, random streams, env copies, episodes,
history, checkpoints and stop reason. The agent holds them stacked on a member axis (`rlexp.agents.base.members`,
`rlexp.models.stacked`); `fit_population` trains them together and writes each member's run dir as a single run
writes its own, so play, eval, plot and resume read a member as any other run.
"""
from __future__ import annotations

import collections
import logging
import math
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from rlexp.agents.base.member_checkpoints import MemberCheckpoints
from rlexp.agents.distributions import no_autograph
from rlexp.errors import UserError
from rlexp.runs.history import History

log = logging.getLogger("rlexp")

SUPPORTED = ("PPO, A2C, VPG, TRPO, DQN, QR-DQN, DDPG, TD3, SAC and TQC with dense models on vector observations (float32, uniform "
             "replay, obs/reward normalisation on-policy only, no gSDE)")
MEMBER_RANGES = {"lr": (0.0, 1.0, False), "gamma": (0.0, 1.0, False), "lam": (0.0, 1.0, True), "tau": (0.0, 1.0, False),
                 "clip_norm": (0.0, math.inf, False)}  # (low, high, low included); others: >= 0


def member_seeds(seed: int | None, seeds: int | Sequence[int]) -> list[int]:
    """The members' seeds: a count N (`seed` ... `seed` + N - 1) or a list of seeds."""
    from rlexp.checks.values import check_seed

    if isinstance(seeds, (bool, str, float)) or not isinstance(seeds, (int, list, tuple)):
        raise UserError(f"run.seeds={seeds!r} must be a count of members (e.g. 8) or a list of seeds (e.g. [0,3,7])")
    if isinstance(seeds, int):
        if seeds < 1:
            raise UserError(f"run.seeds={seeds} must be at least 1 (a count of members) or a list of seeds")
        if seed is None:
            raise UserError("run.seeds=<count> counts from `seed`, which is null; set seed=0 or list the seeds")
        return [check_seed(seed + i, "run.seeds") for i in range(seeds)]
    listed = list(seeds)
    if not listed:
        raise UserError("run.seeds=[] names no member; give a count (e.g. 8) or at least one seed")
    for value in listed:
        if isinstance(value, bool) or not isinstance(value, int):
            raise UserError(f"run.seeds={listed}: {value!r} is not an integer seed")
    return [check_seed(value, "run.seeds") for value in listed]


def population_members(cls: type, envs: Any, seed: int | None, seeds: int | Sequence[int],
                       params: Mapping[str, Any]):
    """The `Members` of an agent built with `seeds`, after checking it can train as a population; and each
    member's Python `random` state as its single run has it when its models are built (Keras' initialisers draw
    their seeds from it)."""
    import keras

    from rlexp.agents.base.members import Members

    name = cls.__name__
    if not getattr(cls, "population_support", False):
        raise UserError(f"run.seeds: {name} does not train as a population yet; populations train {SUPPORTED}")
    seeds = member_seeds(seed, seeds)
    per_member = getattr(envs, "envs_per_member", None)
    if per_member is None or len(getattr(envs, "members", ())) != len(seeds):
        raise UserError(f"a population of {len(seeds)} members needs each member's envs: build them with "
                        f"rlexp.envs.make_member_envs(env_id, n_envs, seeds={seeds})")
    off_policy = getattr(cls, "off_policy", False)  # its replay samples are normalised: not per member yet
    refused = {"normalize_obs": off_policy and bool(params.get("normalize_obs")),
               "normalize_reward": off_policy and bool(params.get("normalize_reward")),
               "use_sde": bool(params.get("use_sde") or params.get("sde")),
               "divergence_monitoring_steps": params.get("divergence_monitoring_steps") is not None,
               "kl_threshold": params.get("kl_threshold") is not None,
               "lr_schedule=kl_adaptive": params.get("lr_schedule") == "kl_adaptive",
               "mixed_precision": bool(params.get("mixed_precision"))}
    for key, used in refused.items():
        if used:
            setting = key if "=" in key else f"{key}={True if key == 'use_sde' else params.get(key)}"
            raise UserError(f"run.seeds: agent.{setting} is not supported in a population yet; populations train "
                            f"{SUPPORTED}; drop it or train the seeds as single runs")
    states = []
    for member_seed in seeds:
        keras.utils.set_random_seed(member_seed)
        states.append(random.getstate())
    return Members(seeds, per_member), states


def member_value(metric: Any, member: int) -> float:
    """A member's value of a metric: its entry of a per-member metric, or the one value all share."""
    values = np.asarray(metric).reshape(-1)
    return float(values[member] if values.size > 1 else values[0])


@dataclass
class MemberRecord:
    """One member's progress as a single run keeps its own (see `FitLoop`)."""

    seed: int
    window: int
    run_dir: Path | None = None
    history: History = field(default_factory=History)
    rewards: collections.deque = None  # type: ignore[assignment]
    episodes: int = 0
    best_reward: float = -math.inf
    steps: int = 0
    train_time: float = 0.0
    reason: str | None = None  # why it stopped (None: training)
    best_pending: bool = False
    tracker: Any = None  # its TensorBoard (rlexp.runs.tracking)

    def __post_init__(self) -> None:
        self.rewards = collections.deque(maxlen=self.window)

    @property
    def mean_reward(self) -> float:
        return float(np.mean(self.rewards)) if self.rewards else -math.inf


class PopulationLoop(MemberCheckpoints):
    """`Agent`'s population part: stacked models, the members' bookkeeping, checkpoints and `fit_population`."""

    column_keys: tuple[str, ...] = ()  # member values a rollout reads per env column (on-policy: gamma, lam)

    def stacked_model(self, make: Callable[[], Any], name: str):
        """`make()` once per member, with the member's Python random state (its single run's initial weights),
        the models stacked (`rlexp.models.stacked`)."""
        from rlexp.models.stacked import stack_models

        models = []
        outer = random.getstate()
        for i in range(self.members.count):
            random.setstate(self._member_random[i])
            models.append(make())
            self._member_random[i] = random.getstate()
        random.setstate(outer)
        return stack_models(models, name)

    def member_buffer(self, buffer: Any):
        """The members' replay: N buffers of `buffer`'s sizes, member n's sampled (and its warm-up actions drawn) by
        `member_rngs[n]`, the NumPy generator its single run seeds with its seed."""
        from rlexp.buffers import GraphReplayBuffer, ReplayBuffer
        from rlexp.buffers.members import MemberReplayBuffers

        if type(buffer) not in (ReplayBuffer, GraphReplayBuffer):
            raise UserError(f"run.seeds: a population's members replay from uniform buffers, not "
                            f"{type(buffer).__name__}; populations train {SUPPORTED}")
        self.member_rngs = [np.random.default_rng(seed) for seed in self.members.seeds]
        return MemberReplayBuffers(buffer, self.member_rngs)

    # ----- the member axis in losses (a single run's own reductions where there is no population) ----------
    def row_mean(self, x):
        """The mean of a loss term over the rows: per member ([N]) in a population, whose losses are summed."""
        import tensorflow as tf

        return tf.reduce_mean(x) if self.members is None else self.members.mean(x)

    def standardize_rows(self, x, epsilon: float):
        """(x - mean) / (std + epsilon) over the rows (each member's own in a population)."""
        import tensorflow as tf

        if self.members is not None:
            return self.members.standardize(x, epsilon)
        mean, var = tf.nn.moments(x, axes=[0])
        return (x - mean) / (tf.sqrt(var) + epsilon)

    def per_row(self, value, rows):
        """A hyperparameter for each row of `rows`: a per-member value ([N] tensor) repeated for its members' rows;
        a value all share as it is. Shaped to multiply `rows`."""
        import tensorflow as tf

        if self.members is None or len(getattr(value, "shape", ())) == 0:
            return value
        repeated = self.member_rows(value, rows)
        rank = rows.shape.rank
        return repeated if rank == 1 else tf.reshape(repeated, [-1] + [1] * (rank - 1))

    def apply_member_values(self, values: Mapping[str, Sequence[float]]) -> None:
        """Hyperparameters that differ between members (`member_keys`): learning rate, discount and GAE lambda per
        env column, loss coefficients per member, PPO's clip range per row."""
        import tensorflow as tf

        self.member_values = {}
        for key, listed in (values or {}).items():
            if key not in self.member_keys:
                raise UserError(f"run.members.{key}: members of {type(self).__name__} may differ only in "
                                f"{', '.join(self.member_keys)} (values that change no shapes)")
            if not isinstance(listed, (list, tuple)) or len(listed) != self.members.count:
                raise UserError(f"run.members.{key}={listed!r} must list one value per member "
                                f"({self.members.count}: one per seed of run.seeds)")
            numbers = []
            for value in listed:
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                    raise UserError(f"run.members.{key}={list(listed)}: {value!r} is not a finite number")
                numbers.append(float(value))
            low, high, closed = MEMBER_RANGES.get(key, (0.0, math.inf, True))
            for value in numbers:
                if not (low < value <= high if not closed else low <= value <= high):
                    raise UserError(f"run.members.{key}={numbers}: {value} is outside "
                                    f"{'[' if closed else '('}{low:g}, {high:g}]")
            if key == "clip_norm" and getattr(self, "clip_schedule", "constant") != "constant":
                raise UserError("run.members.clip_norm: members' clip ranges stay constant; drop "
                                "agent.clip_schedule=linear or the members' clip_norm")
            if key == "lr" and self.opt_momentum > 0:
                raise UserError("run.members.lr: members' learning rates scale each optimizer step, which RMSprop's "
                                "momentum carries over; use agent.opt_momentum=0")
            array = np.asarray(numbers, np.float32)
            self.member_values[key] = numbers
            if key == "gamma":  # each member's reward scaling discounts with its own gamma
                for normalizer, gamma in zip(self.normalizer.members, numbers):
                    normalizer.gamma = gamma
            if key == "lr":
                self.lr = float(array.max())  # the schedules' base; each member's steps scaled to its own rate
                self.members.lr_scale = tf.constant(array / array.max())
            elif key == "tau":  # float64, as a single run's Python float (OffPolicyAgent.update_targets)
                self.tau = np.asarray(numbers, np.float64)
            elif key in self.column_keys:  # per env column
                setattr(self, key, tf.constant(np.repeat(array, self.members.envs)))
            else:  # per member
                setattr(self, key, tf.constant(array))

    @no_autograph
    def optimizer_step(self, optimizer, grads: list, variables: list, grad_norm: float | None = None) -> None:
        """`optimizer`'s step on `grads`, clipped to the global norm `grad_norm` (None: not clipped): a single
        run's, or each member's own (`members_minimize`)."""
        import tensorflow as tf

        if self.members is not None:
            self.members_minimize(grads, variables, grad_norm, optimizer)
            return
        if grad_norm is not None:
            grads, _ = tf.clip_by_global_norm(grads, grad_norm)
        optimizer.apply_gradients(zip(grads, variables))

    @no_autograph
    def members_minimize(self, grads: list[tf.Tensor], variables: list[tf.Variable], grad_norm: float | None,
                         optimizer=None) -> None:
        """A population's step of `optimizer` (default: the model's): each member's gradients clipped to its own
        norm; a member that has stopped keeps its weights and optimizer state (restored after the step, only while
        one has stopped)."""
        import tensorflow as tf

        optimizer = optimizer or self.optimizer
        if grad_norm is not None:
            grads = self.members.clip_gradients(grads, grad_norm)

        def step_then_0():
            if self.members.lr_scale is None:
                optimizer.apply_gradients(zip(grads, variables))
                return tf.constant(0)
            before = [tf.identity(tf.convert_to_tensor(v)) for v in variables]
            with tf.control_dependencies(before):
                optimizer.apply_gradients(zip(grads, variables))
            self.members.scale_steps(variables, before)
            return tf.constant(0)

        def masked_step_then_0():
            kept = list(variables) + [v for v in optimizer.variables if len(v.shape)]
            before = [tf.identity(tf.convert_to_tensor(v)) for v in kept]
            with tf.control_dependencies(before):
                optimizer.apply_gradients(zip(grads, variables))
            if self.members.lr_scale is not None:
                self.members.scale_steps(variables, before[:len(variables)])
            self.members.keep_stopped(kept, before)
            return tf.constant(0)

        tf.cond(tf.reduce_all(self.members.active > 0), step_then_0, masked_step_then_0)

    def metric_zero(self):
        """A zero shaped as one loss term: a scalar, or one per member."""
        import tensorflow as tf

        return tf.constant(0.0) if self.members is None else tf.zeros([self.members.count])

    def member_rows(self, x, rows):
        """A per-member tensor [N, ...] repeated for each member's block of `rows` ([N * B, ...]); a single run's
        `x` as it is."""
        import tensorflow as tf

        if self.members is None:
            return x
        return tf.repeat(x, tf.shape(rows)[0] // self.members.count, axis=0)

    def member_records(self) -> list[MemberRecord]:
        if not hasattr(self, "_records"):
            self._records = [MemberRecord(s, self.reward_buffer_size) for s in self.members.seeds]
        return self._records

    # ----- training ------------------------------------------------------------------------------------
    def _record_member_episodes(self, elapsed: float) -> list[int]:
        """The finished episodes into their members' histories; returns the members whose full-window mean
        improved. Episodes of a stopped member are not its run's: they are dropped."""
        records, improved = self.member_records(), []
        for step, ret, member in self._finished:
            record = records[member]
            if record.reason is not None:
                continue
            record.episodes += 1
            record.rewards.append(ret)
            mean = record.mean_reward
            if len(record.rewards) >= self.reward_buffer_size and mean > record.best_reward:
                record.best_reward = mean
                improved.append(member)
            record.history.append(record.episodes, step, elapsed, ret, mean, record.best_reward)
            if record.tracker is not None:
                record.tracker.scalars(step, {"episode/return": ret, "episode/mean_return": mean})
        self._finished.clear()
        return improved

    def member_lr_scale(self, member: int) -> float:
        """A member's learning rate over the optimizer's (run.members.lr; else 1)."""
        scale = self.members.lr_scale
        return 1.0 if scale is None else float(scale.numpy()[member])

    def stop_member(self, member: int, reason: str) -> None:
        """Stop one member where it is (its reason recorded): it takes no more updates; the others go on."""
        record = self.member_records()[member]
        record.reason = reason
        active = self.members.active.numpy()
        active[member] = 0.0
        self.members.active.assign(active)
        log.info(f"member {member} (seed {record.seed}) stopped at step {record.steps:,}: {reason}")

    def fit_population(self, max_steps: float, target_reward: float | None = None,
                       run_dirs: Sequence[str | Path] | None = None, checkpoint_interval: float = 10.0,
                       history_interval: float = 2.0, config: Mapping[str, Any] | None = None,
                       trackers: Sequence[Any] | None = None, verbose: int = 1,
                       evaluators: Sequence[Any] | None = None,
                       make_single: Callable[[int], Any] | None = None) -> list[dict[str, Any]]:
        """Train every member until `max_steps` env steps (each member's), its target mean reward or its
        divergence; a member that stops takes no more updates while the others go on. With `run_dirs` (one per
        member) each gets history.parquet, history.png and checkpoints/{last,best}.ckpt as `fit` writes them.
        `evaluators` (one `rlexp.runs.evaluation.Evaluator` per member, all of one interval) evaluate the members
        during training, each by the single agent `make_single(member)` builds, and make best.ckpt the best
        evaluation (`rlexp.agents.base.member_evaluations`).
        Returns each member's summary (steps, seconds, reason, mean and best reward, episodes)."""
        from rlexp.agents.base.member_evaluations import MemberView

        evaluators = list(evaluators) if evaluators else None
        views = [MemberView(self, i, lambda i=i: make_single(i)) for i in range(self.members.count)] if evaluators else []
        try:
            return self._fit_population(max_steps, target_reward, run_dirs, checkpoint_interval, history_interval,
                                        config, trackers, verbose, evaluators, views)
        finally:
            for view in views:
                view.close()

    def _fit_population(self, max_steps, target_reward, run_dirs, checkpoint_interval, history_interval, config,
                        trackers, verbose, evaluators, views) -> list[dict[str, Any]]:
        from rlexp.agents.base.loop import plot_history, stop_on_interrupt
        from rlexp.agents.base.member_evaluations import evaluate_due_members
        from rlexp.checks.values import check_fit_arguments
        from rlexp.runs.checkpoints import checkpoint_wait

        check_fit_arguments(max_steps, target_reward, checkpoint_interval, history_interval)
        self.max_steps = int(float(max_steps))
        self.config = dict(config or {})
        records = self.member_records()
        dirs = [Path(d) for d in run_dirs] if run_dirs else [None] * len(records)
        trackers = list(trackers) if trackers else [None] * len(records)
        for record, run_dir, tracker in zip(records, dirs, trackers):
            record.run_dir, record.tracker = run_dir, tracker
            if run_dir is not None:
                record.history.path = run_dir / "history.parquet"
        for i, record in enumerate(records):  # on again: a member this call's max_steps or target lets train
            reached = (target_reward is not None and len(record.rewards) >= self.reward_buffer_size
                       and record.mean_reward >= float(target_reward))
            if record.reason in ("max_steps", "interrupted") or record.reason == "target_reward" and not reached:
                record.reason = None
                active = self.members.active.numpy()
                active[i] = 1.0
                self.members.active.assign(active)
        session_start, base_times = time.perf_counter(), [r.train_time for r in records]
        last_checkpoint = last_flush = time.perf_counter()
        wait, stop, iterations = float(checkpoint_interval), [False], 0

        def training() -> list[int]:
            return [i for i, r in enumerate(records) if r.reason is None]

        try:
            with stop_on_interrupt(stop):
                while training() and self.steps < self.max_steps and not stop[0]:
                    self._apply_lr()
                    self.pause_step = None if evaluators is None else min(evaluators[i].next_step for i in training())
                    metrics = self.train_iteration()
                    iterations += 1
                    elapsed = time.perf_counter() - session_start
                    going = training()
                    for i in going:
                        records[i].steps, records[i].train_time = self.steps, base_times[i] + elapsed
                    for record, tracker in zip(records, trackers):  # a sweep trial's account of its members' steps
                        if tracker is not None:
                            tracker.trained(record.steps)
                    for i in self._record_member_episodes(elapsed):
                        records[i].best_pending = evaluators is None  # with evaluations, best.ckpt is their best
                    for i in going:
                        bad = [k for k, v in metrics.items() if not np.isfinite(member_value(v, i))]
                        if records[i].reason is not None:  # stopped by its tracker (a sweep trial pruned)
                            pass
                        elif bad:
                            self.stop_member(i, f"diverged (non-finite {', '.join(bad)})")
                        elif (target_reward is not None and len(records[i].rewards) >= self.reward_buffer_size
                              and records[i].mean_reward >= float(target_reward)):
                            self.stop_member(i, "target_reward")
                        if trackers[i] is not None and metrics:
                            trackers[i].scalars(self.steps, {f"train/{k}": member_value(v, i) for k, v in metrics.items()}
                                                | {"train/learning_rate": self.current_lr() * self.member_lr_scale(i)})
                    if evaluators is not None:
                        began = time.perf_counter()
                        evaluate_due_members(self, evaluators, views, training(), log)
                        session_start += time.perf_counter() - began  # evaluations are not training time
                    if verbose and iterations % 10 == 1:
                        means = " ".join(f"{r.mean_reward:.1f}" if r.rewards else "-" for r in records)
                        log.info(f"step {self.steps:,}/{self.max_steps:,}: members' mean rewards {means}")
                    now = time.perf_counter()
                    for i, record in enumerate(records):
                        if record.run_dir is None:
                            continue
                        if record.best_pending:
                            self.save_member(i, record.run_dir / "checkpoints" / "best.ckpt", full=False)
                            record.best_pending = False
                        if i in going and (iterations == 1 or now - last_checkpoint >= wait or i not in training()):
                            self.save_member(i, record.run_dir / "checkpoints" / "last.ckpt", keep_previous=True)
                    if iterations == 1 or now - last_checkpoint >= wait:
                        wait = checkpoint_wait(checkpoint_interval, time.perf_counter() - now)
                        last_checkpoint = last_flush = now
                        for tracker in trackers:
                            if tracker is not None:
                                tracker.flush()
                    elif now - last_flush >= history_interval:
                        for record, tracker in zip(records, trackers):
                            record.history.flush()
                            if tracker is not None:
                                tracker.flush()
                        last_flush = now
        except BaseException:  # stopped from inside (a sweep trial pruned): each member's episodes so far kept
            for record in records:
                if record.history.path is not None:
                    record.history.flush()
            raise

        summaries = []
        for i, record in enumerate(records):
            ending = record.reason is None  # a member stopped before was saved as it stopped (its replay too)
            if ending:
                record.reason = "interrupted" if stop[0] and self.steps < self.max_steps else "max_steps"
            if record.run_dir is not None:
                if ending:
                    self.save_member(i, record.run_dir / "checkpoints" / "last.ckpt", keep_previous=True)
                if len(record.history):
                    plot_history({record.run_dir.name: record.history.columns()}, record.run_dir / "history.png")
            summaries.append(dict(seed=record.seed, steps=record.steps, seconds=record.train_time,
                                  steps_per_s=record.steps / record.train_time if record.train_time else 0.0,
                                  reason=record.reason, mean_reward=record.mean_reward,
                                  best_reward=record.best_reward, episodes=record.episodes))
        interrupted = any(r.reason == "interrupted" for r in records)
        self.stop_signal = int(stop[0]) if stop[0] and interrupted else None
        return summaries
