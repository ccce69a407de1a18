"""The off-policy family (DQN, DDPG, TD3, SAC, NAF, DQfD): a replay buffer, `train_freq` env steps between
update phases of `gradient_steps` updates, target networks.

`OffPolicyAgent` owns the machinery they share: storing raw transitions and normalising samples, the random
warm-up, actions in [-1, 1] for continuous control, the fused graph loop (act, step the envs, store, sample,
update, many env steps per call, with graph envs stepped inside the graph and the replay moved into TF
variables), target updates. docs/performance.md explains the speed choices. An algorithm provides its
models (`build`), its exploration (`explore`), its update (`update_step`) and its greedy `policy`.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from rlexp.agents.base import Agent
from rlexp.agents.distributions import no_autograph
from rlexp.agents.episode_phases import check_unit, episode_phase
from rlexp.agents.goals import use_goals
from rlexp.agents.prioritized_updates import PrioritizedUpdates
from rlexp.envs.spaces import space_kind
from rlexp.errors import UserError


@no_autograph
def soft_update(targets: list[tf.Variable], sources: list[tf.Variable], tau: float) -> None:
    """Polyak averaging: target <- tau * source + (1 - tau) * target."""
    for target, source in zip(targets, sources):
        target.assign(tau * source + (1.0 - tau) * target)


@no_autograph
def hard_update(targets: list[tf.Variable], sources: list[tf.Variable]) -> list:
    """Copy the source weights into the targets."""
    return [target.assign(source) for target, source in zip(targets, sources)]


class OffPolicyAgent(PrioritizedUpdates, Agent):
    """Agents that learn from a replay buffer.

    Continuous actions live in [-1, 1] inside the agent (the buffer stores them so) and are rescaled to the
    action space's bounds when stepping; such agents need a bounded action space.

    Args (besides `Agent`'s):
        buffer: a `ReplayBuffer` (default) or `FrameBuffer`; training starts when it holds `initial_size` (random
            actions until then, with `random_warmup`). A `PrioritizedReplayBuffer` needs `prioritized_replay`.
        train_freq: vector env steps between update phases (`train_freq_unit=episode`: episodes, counted over
            all envs, as SB3's train_freq=[n, "episode"]; see `rlexp.agents.episode_phases`).
        gradient_steps: gradient updates per phase (-1: one per collected transition).
    """

    off_policy = True
    mixed_precision_support = True  # bfloat16 compute: see docs/performance.md, "16-bit compute off-policy"
    STEPS_PER_CALL = 200  # env steps per fused graph call once training has started
    MIN_PART_ROWS = 64  # batches of at least 2x this many rows run their forward passes in two halves
    metric_names: tuple[str, ...] = ("critic_loss", "actor_loss")  # what `update_step` returns
    policy_delay = 1  # updates per actor step (TD3: 2); the grouped loop runs this many cycles at a time
    random_warmup = True  # uniform random actions until the buffer holds `initial_size`
    row_blocks = False  # run large forward passes in `batch_parts` row blocks (see `in_row_blocks`)
    grouped_updates = False  # the update is `critic_step` + an `actor_step` every `policy_delay` (see `_train_groups`)
    prioritized_replay = False  # `update_batch` weights its loss by batch["weights"] and returns "td_errors"
    resets_at_episode_ends = False  # the fused loop calls `episodes_ended` after each exploratory env step
    episode_phases = False  # agent.train_freq_unit=episode: `train_iteration` runs `episode_phase` (actor-critics)

    def __init__(self, envs, model=None, buffer=None, *, train_freq: int = 1, gradient_steps: int = 1,
                 train_freq_unit: str = "step", **kwargs: Any) -> None:
        from rlexp.buffers import PrioritizedReplayBuffer, ReplayBuffer

        if buffer is None:
            buffer = ReplayBuffer()
        if isinstance(buffer, PrioritizedReplayBuffer) and not self.prioritized_replay:
            raise UserError(f"buffer=prioritized (prioritized replay) is supported by DQN and DQfD, not "
                            f"{type(self).__name__}; use its own buffer preset (leave buffer= out)")
        self.train_freq, self.gradient_steps = int(train_freq), int(gradient_steps)
        if self.train_freq < 1:
            raise UserError(f"agent.train_freq={train_freq} must be at least 1")
        if self.gradient_steps < -1:
            raise UserError(f"agent.gradient_steps={gradient_steps} must be -1 (one per transition) or at least 0")
        space = envs.single_action_space
        if space_kind(space) == "continuous":
            low, high = (np.asarray(getattr(space, k, np.nan), np.float32) for k in ("low", "high"))
            if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
                raise UserError(f"{type(self).__name__} needs a bounded action space, got {space}")
            self.action_low, self.action_high, self._half_range = low, high, 0.5 * (high - low)
        # With a single chain of matmuls (one critic), two row blocks let TF's two inter-op threads
        # (run.tf_inter_threads=auto) share it (DDPG Pendulum 2.33 vs 2.58 ms per env step); see docs/performance.md.
        two_threads = tf.config.threading.get_inter_op_parallelism_threads() >= 2
        self.batch_parts = 2 if two_threads and self.row_blocks else 1
        super().__init__(envs, model, buffer, **kwargs)
        use_goals(self, envs, self.buffer)
        self.train_freq_unit = check_unit(self, train_freq_unit)
        self.updates_per_transition = self.gradient_steps == -1
        if self.gradient_steps == -1:
            self.gradient_steps = self.train_freq * self.member_envs

    @property
    def update_rows(self) -> int:
        """Rows of one update's batch: `batch_size`, a population's members' batches one after the other."""
        return self.buffer.batch_size * (1 if self.members is None else self.members.count)

    # ----- to implement in algorithms ---------------------------------------------------------------
    def first_update_step(self) -> int:
        initial = self.buffer.initial_size
        if self.random_warmup:  # the warm-up (whole vector steps) fills the buffer; the next iteration learns
            return -(-initial // self.member_envs) * self.member_envs + 1
        collected = self.train_freq * self.member_envs  # per iteration; the one that fills the buffer learns
        return (-(-initial // collected) - 1) * collected + 1

    def explore(self, obs: tf.Tensor) -> tf.Tensor:
        """Exploratory actions for a batch of observations, as stored in the buffer (graph code)."""
        raise NotImplementedError  # abstract

    @no_autograph
    def update_step(self, obs, actions, rewards, next_obs, terminated) -> dict[str, tf.Tensor]:
        """One gradient update on a batch; returns `metric_names` (graph code). The actor-critics' (`critic_step`,
        `actor_step`): a critic step, and every `policy_delay` of them an actor step."""
        critic_loss = self.critic_step(obs, actions, rewards, next_obs, terminated)
        if self.policy_delay == 1:
            return dict(critic_loss=critic_loss, actor_loss=self.actor_step(obs))
        actor_loss = tf.cond(self.updates % self.policy_delay == 0, lambda: self.actor_step(obs), self.metric_zero)
        return dict(critic_loss=critic_loss, actor_loss=actor_loss)

    def episodes_ended(self, dones: tf.Tensor) -> None:
        """With `resets_at_episode_ends`, after each exploratory env step of the fused loop: `dones` [n_envs] flags
        the envs whose episode ended (terminated or truncated), e.g. to restart their exploration noise as SB3's
        `action_noise.reset(indices)` does (graph code)."""

    # ----- actions ----------------------------------------------------------------------------------
    @no_autograph
    def to_env(self, actions):
        """The agent's actions -> the env's: [-1, 1] -> the action space's bounds (discrete: unchanged)."""
        if self.action_kind != "continuous":
            return actions
        return self.action_low + (actions + 1.0) * self._half_range

    def random_actions(self) -> np.ndarray:
        """Uniform random actions for the warm-up, one per env, in the agent's units (a population's: each
        member's drawn by its own generator)."""
        if self.members is not None:
            return np.concatenate([self._random_actions(rng, self.members.envs) for rng in self.member_rngs])
        return self._random_actions(self.rng, self.n_envs)

    def _random_actions(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.action_kind == "continuous":
            return rng.uniform(-1, 1, (n, self.n_actions)).astype(np.float32)
        return rng.integers(0, self.n_actions, n)

    @no_autograph
    def in_row_blocks(self, model: tf.keras.Model, x: tf.Tensor) -> tf.Tensor:
        """model(x); a large batch runs as `batch_parts` row blocks, side by side (the same maths)."""
        rows = x.shape[0]
        if self.batch_parts < 2 or rows is None or rows < 2 * self.MIN_PART_ROWS or rows % self.batch_parts:
            return model(x)
        return tf.concat([model(part) for part in tf.split(x, self.batch_parts)], axis=0)

    # ----- target networks (a population's: each member's own rate; a stopped member's targets stay) ----------
    @no_autograph
    def update_targets(self, targets: list[tf.Variable], sources: list[tf.Variable], tau) -> None:
        """Polyak averaging of `targets` towards `sources` at rate `tau` (a population's: a float, or each member's
        as float64 values)."""
        if self.members is None:
            soft_update(targets, sources, tau)
            return
        # each member's tau and 1 - tau as its single run has them: 1 - tau taken in float64, then rounded
        rates = np.broadcast_to(np.asarray(tau, np.float64), [self.members.count])
        rate, keep = (tf.constant(x.astype(np.float32)) for x in (rates, 1.0 - rates))
        active = self.members.active > 0
        for target, source in zip(targets, sources):
            shape = [self.members.count] + [1] * (target.shape.rank - 1)
            moved = tf.reshape(rate, shape) * source + tf.reshape(keep, shape) * target
            target.assign(tf.where(tf.reshape(active, shape), moved, target))

    @no_autograph
    def copy_targets(self, targets: list[tf.Variable], sources: list[tf.Variable]) -> list:
        """Copy `sources` into `targets` (a population's: for the members still training)."""
        if self.members is None:
            return hard_update(targets, sources)
        active = self.members.active > 0
        return [target.assign(tf.where(tf.reshape(active, [self.members.count] + [1] * (target.shape.rank - 1)),
                                       source, target)) for target, source in zip(targets, sources)]

    # ----- the replay buffer ------------------------------------------------------------------------
    def _state(self) -> dict[str, Any]:
        return super()._state() | {"replay": "raw"}

    def load(self, path, weights_only: bool = False) -> dict[str, Any]:
        state = super().load(path, weights_only)
        normalizing = self.normalizer.normalize_obs or self.normalizer.normalize_reward
        if not weights_only and normalizing and state.get("replay") != "raw" and self.buffer.size:
            raise UserError(f"checkpoint {path} holds normalised replay data (written before replay buffers kept "
                            "raw transitions); start a new run, or resume it with the rlexp version that wrote it")
        return state

    def store_step(self, env_actions: np.ndarray, stored_actions: np.ndarray) -> np.ndarray:
        """`env_step`, then the transition into the replay buffer as the env gave it (raw observations and
        rewards: `normalize_batch` normalises samples with the statistics current at sampling time, as SB3
        does); returns the (normalised) observations to act on next."""
        raw_obs = self._raw_obs.astype(self.obs_dtype, copy=False)  # float64 envs are stored as float32
        obs, _, terminated, _, _ = self.env_step(env_actions)
        rewards, next_obs = self.raw_transition
        self.buffer.add(raw_obs, stored_actions, rewards, next_obs.astype(self.obs_dtype, copy=False), terminated,
                        self.episode_ends)
        return obs

    def normalize_batch(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """A replay sample (raw) normalised with the current statistics: observations, and rewards scaled
        by the discounted return's std (not with `clip_rewards`, whose signs are stored already)."""
        normalizer = self.normalizer
        if normalizer.normalize_obs:
            batch = batch | {k: normalizer.obs(batch[k]) for k in ("obs", "next_obs")}
        if normalizer.normalize_reward and not self.clip_rewards:
            batch = batch | {"rewards": normalizer.scale_reward(batch["rewards"])}
        return batch

    def _numpy_step(self, obs: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """Step the envs with the agent's `actions`, store the transitions. `obs` is the observations the
        actions were chosen for (a graph input, for ordering); the buffer gets their raw version, `_raw_obs`."""
        return self.store_step(self.to_env(actions), actions)

    def _numpy_sample(self) -> list[np.ndarray]:
        batch = self.normalize_batch(self.buffer.sample(self.gradient_steps))
        return [batch[k].astype(np.float32, copy=False) for k in ("obs", "actions", "rewards", "next_obs", "terminated")]

    def _numpy_step_and_sample(self, obs: np.ndarray, actions: np.ndarray) -> list[np.ndarray]:
        """A cycle's last env step, then its batches: one numpy_function call instead of two."""
        return [*self._numpy_step_and_ends(obs, actions), *self._numpy_sample()]

    def _numpy_step_and_ends(self, obs: np.ndarray, actions: np.ndarray) -> list[np.ndarray]:
        """`_numpy_step`, and with `resets_at_episode_ends` which envs' episodes it ended."""
        return [self._numpy_step(obs, actions), *([self.episode_ends] if self.resets_at_episode_ends else [])]

    def _replay_to_graph(self) -> None:
        """With `steps_in_graph`, move a NumPy `ReplayBuffer` into TF variables (once the random warm-up,
        stepped in Python at 26 µs a step against 66 µs in a graph, has filled it)."""
        from rlexp.buffers import GraphReplayBuffer, ReplayBuffer
        from rlexp.buffers.members import MemberGraphReplayBuffer, MemberReplayBuffers

        if self.steps_in_graph and type(self.buffer) is MemberReplayBuffers:
            self.buffer = MemberGraphReplayBuffer(self.buffer)
        elif self.steps_in_graph and type(self.buffer) is ReplayBuffer:
            buffer = GraphReplayBuffer.like(self.buffer)
            buffer.load_state_dict(self.buffer.state_dict())
            buffer.rng, self.buffer = self.rng, buffer

    # ----- updates from Python-paced collection (DQN) -------------------------------------------------
    @no_autograph
    def _gradient_steps(self, batch: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        """An update on each consecutive `batch_size` slice of `batch` (`gradient_steps` of them from
        `learn_from_replay`); the mean metrics. A `tf.while_loop`, not AutoGraph (whose conversion was most of
        the first call's trace)."""
        size = self.update_rows
        batch = {k: tf.reshape(v, [-1, size, *v.shape[1:]]) for k, v in batch.items()}  # one row per step
        steps = next(iter(batch.values())).shape[0]

        def gradient_step(g, totals):
            metrics = self.update_batch({k: tf.gather(v, g) for k, v in batch.items()})
            return g + 1, {k: totals[k] + metrics[k] for k in totals}

        totals = {k: self.metric_zero() for k in self.metric_names}
        _, totals = tf.while_loop(lambda g, *_: g < steps, gradient_step, (tf.constant(0), totals))
        return {k: v / float(steps) for k, v in totals.items()}

    @no_autograph
    def update_batch(self, batch: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        """`update_step` on a batch given as a dict (agents whose batches carry more use the rest)."""
        return self.update_step(batch["obs"], batch["actions"], batch["rewards"], batch["next_obs"],
                                batch["terminated"])

    def run_updates(self, batch: dict[str, np.ndarray]) -> dict[str, float]:
        """`_gradient_steps` on a batch, in one graph call; the mean metrics."""
        if not hasattr(self, "_update_fn"):
            self._update_fn = tf.function(self._gradient_steps, autograph=False)
        return self.metric_values(self._update_fn(batch))

    def learn_from_replay(self) -> dict[str, float]:
        """One update phase outside the fused loop: `gradient_steps` updates on batches from the buffer
        (normalised), prioritized ones drawn one at a time (`run_prioritized_updates`)."""
        from rlexp.buffers import PrioritizedReplayBuffer

        if isinstance(self.buffer, PrioritizedReplayBuffer):
            return self.run_prioritized_updates(self.gradient_steps)
        return self.run_updates(self.normalize_batch(self.buffer.sample(self.gradient_steps)))

    # ----- the fused loop ---------------------------------------------------------------------------
    @no_autograph
    def _graph_step(self, obs: tf.Tensor, actions: tf.Tensor) -> tf.Tensor:
        """`_numpy_step` with TF ops (see `steps_in_graph`): step the envs, store the transitions."""
        next_obs, rewards, terminated, truncated, final_obs = self.graph_env_step(self.to_env(actions))
        self.buffer.graph_add(obs, actions, rewards, final_obs, terminated)
        if self.resets_at_episode_ends:
            self.episodes_ended(terminated | truncated)
        return next_obs

    @no_autograph
    def _numpy_step_in_graph(self, obs: tf.Tensor, actions: tf.Tensor, sample: bool) -> tuple[tf.Tensor, list]:
        """`_numpy_step` (and with `sample` `_numpy_sample`'s batch columns) as one numpy_function call; with
        `resets_at_episode_ends` the step's episode ends go to `episodes_ended`."""
        ends = [tf.bool] if self.resets_at_episode_ends else []
        fn, columns = (self._numpy_step_and_sample, [tf.float32] * 5) if sample else (self._numpy_step_and_ends, [])
        next_obs, *rest = tf.numpy_function(fn, [obs, actions], [tf.as_dtype(self.obs_dtype), *ends, *columns],
                                            stateful=True)
        next_obs.set_shape((self.n_envs, *self.obs_shape))
        if ends:
            dones, *rest = rest
            dones.set_shape((self.n_envs,))
            self.episodes_ended(dones)
        return next_obs, rest

    @no_autograph
    def _env_step(self, obs: tf.Tensor, actions: tf.Tensor | None = None) -> tf.Tensor:
        """In the graph: one exploratory env step (`actions`, if drawn already), its transitions stored."""
        actions = self.explore(obs) if actions is None else actions
        if self.steps_in_graph:
            return self._graph_step(obs, actions)
        return self._numpy_step_in_graph(obs, actions, sample=False)[0]

    @no_autograph
    def _step_and_sample(self, obs: tf.Tensor, actions: tf.Tensor | None = None) -> tuple[tf.Tensor, list]:
        """In the graph: `_env_step`, then gradient_steps batches from the buffer.

        Without `steps_in_graph`, step and sample are one numpy_function call: the sample always sees the
        step's transitions (TF does not order two numpy_functions by itself), and one call costs less than two."""
        action_shape = (self.n_actions,) if self.action_kind == "continuous" else ()
        shapes = [self.obs_shape, action_shape, (), self.obs_shape, ()]
        rows = self.gradient_steps * self.buffer.batch_size  # each member's
        actions = self.explore(obs) if actions is None else actions
        if self.steps_in_graph:
            return self._graph_step(obs, actions), self.buffer.graph_sample(rows, self.tf_rng)
        next_obs, batch = self._numpy_step_in_graph(obs, actions, sample=True)
        rows = self.gradient_steps * self.update_rows
        return next_obs, [tf.reshape(x, (rows, *shape)) for x, shape in zip(batch, shapes)]

    # The loops below are written with tf.while_loop, not AutoGraph: converting them (and the steps they
    # call) was ~0.45 s of TD3's 1.0 s trace.
    @no_autograph
    def _train_cycles(self, obs: tf.Tensor, cycles: tf.Tensor) -> dict[str, tf.Tensor]:
        """`cycles` x (train_freq exploratory env steps, then gradient_steps updates) in one graph call."""
        size = self.update_rows

        def env_step(i, obs):
            return i + 1, self._env_step(obs)

        def cycle(i, obs, totals):
            if self.train_freq > 1:
                _, obs = tf.while_loop(lambda j, _: j < self.train_freq - 1, env_step, (tf.constant(0), obs))
            obs, batch = self._step_and_sample(obs)

            def update(g, totals):
                part = [tf.reshape(x[g * size:(g + 1) * size], (size, *x.shape[1:])) for x in batch]
                metrics = self._update_step_fn(*part)
                return g + 1, {k: totals[k] + metrics[k] for k in totals}

            _, totals = tf.while_loop(lambda g, _: g < self.gradient_steps, update, (tf.constant(0), totals))
            return i + 1, obs, totals

        totals = {k: self.metric_zero() for k in self.metric_names}
        _, obs, totals = tf.while_loop(lambda i, *_: i < cycles, cycle, (tf.constant(0), obs, totals))
        n = tf.cast(tf.maximum(cycles * self.gradient_steps, 1), tf.float32)
        return {k: v / n for k, v in totals.items()} | {"obs": obs}

    @no_autograph
    def _target_updates_then_0(self) -> tf.Tensor:
        """`target_updates` as a `tf.cond` branch (which must return a tensor)."""
        self.target_updates()
        return tf.constant(0)

    @no_autograph
    def _train_groups(self, obs: tf.Tensor, groups: tf.Tensor) -> dict[str, tf.Tensor]:
        """`_train_cycles` for one env step and one update per cycle, `policy_delay` cycles at a time with
        the actor step written after the last one (no condition), for agents with `grouped_updates`
        (`critic_step`, `actor_step`, `target_updates`). TF then sees that the next env step only needs the
        actor, unchanged by the critic steps in between, and runs it beside them. Call with `updates` a
        multiple of `policy_delay`.

        A group's target updates (~100 small ops) run at the start of the next group, once its env step's
        actions are drawn: TF otherwise interleaves them with that env step's ops, delaying its Python step.
        The last group's run after the loop."""
        # written inline, not as function calls: TF orders a call as one op after everything before it
        # that touches its variables (the random generator included), which would hold the next env step
        critic_step, actor_step = self.critic_step, self.actor_step
        if self.jit_compile:  # XLA compiles each step into one op, as it does `update_step`
            critic_step, actor_step = (tf.function(f, jit_compile=True) for f in (critic_step, actor_step))

        def group(i, obs, critic_loss, actor_loss):
            for k in range(self.policy_delay):
                actions = self.explore(obs)
                if k == 0:  # the previous group's target updates, once this env step's actions are drawn
                    with tf.control_dependencies([actions]):
                        tf.cond(i > 0, self._target_updates_then_0, lambda: tf.constant(0))
                obs, batch = self._step_and_sample(obs, actions)
                critic_loss += critic_step(*batch)
            return i + 1, obs, critic_loss, actor_loss + actor_step(batch[0], target_updates=False)

        zero = self.metric_zero()
        loop_vars = (tf.constant(0), obs, zero, zero)
        _, obs, critic_loss, actor_loss = tf.while_loop(lambda i, *_: i < groups, group, loop_vars)
        with tf.control_dependencies([critic_loss, actor_loss]):  # the last group's target updates
            tf.cond(groups > 0, self._target_updates_then_0, lambda: tf.constant(0))
        n = tf.cast(tf.maximum(groups * self.policy_delay, 1), tf.float32)
        return {"critic_loss": critic_loss / n, "actor_loss": actor_loss / n, "obs": obs}

    def warm_up(self) -> None:
        """Uniform random actions (up to 1,000 vector steps per call) towards the buffer's `initial_size`
        (SB3's learning_starts: the first update follows the next env step, on batches drawn with replacement
        from what the buffer holds, even if fewer than batch_size), stopping at max_steps or the next evaluation
        (`steps_left`, in whole vector steps)."""
        envs = self.member_envs  # a population's steps are each member's
        n = min(-(-(self.buffer.initial_size - self.buffer.size) // envs), 1000, max(-(-self.steps_left() // envs), 1))
        for _ in range(n):
            self._obs = self._numpy_step(self._obs, self.random_actions())

    def train_iteration(self) -> dict[str, float]:
        remaining = max(self.steps_left(), 1)
        if not self.buffer.ready and self.random_warmup:
            self.warm_up()
            return {}
        if self.train_freq_unit == "episode":
            return episode_phase(self, self.updates_per_transition)
        self._replay_to_graph()
        if not hasattr(self, "_train_fn"):
            self._update_step_fn = tf.function(self.update_step, jit_compile=self.jit_compile, autograph=False)
            self._train_fn = tf.function(self._train_cycles, autograph=False)
            self._groups_fn = tf.function(self._train_groups, autograph=False)
        per_cycle = self.train_freq * self.member_envs
        cycles = max(1, min(self.STEPS_PER_CALL, remaining) // per_cycle)
        train_fn, count = self._train_fn, cycles
        if self.grouped_updates and self.train_freq == 1 and self.gradient_steps == 1:
            lag = -int(self.updates) % self.policy_delay  # updates until the next actor step
            if lag == 0 and cycles >= self.policy_delay:
                train_fn, count = self._groups_fn, cycles // self.policy_delay
            elif lag:  # realign after a resume between two actor steps
                count = min(cycles, lag)
        metrics = self.call_graph_loop(train_fn, tf.constant(count),
                                       max_steps=max(self.STEPS_PER_CALL // self.member_envs, self.train_freq))
        return self.metric_values(metrics)

    def metric_values(self, metrics: dict[str, tf.Tensor]) -> dict[str, float | np.ndarray]:
        """A graph call's metrics as Python floats (a population's: one per member)."""
        if self.members is not None:
            return {k: v.numpy() for k, v in metrics.items()}
        return {k: float(v) for k, v in metrics.items()}
