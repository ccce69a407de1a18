"""Deep Deterministic Policy Gradient (Lillicrap et al. 2016), continuous actions.

Also the machinery TD3 builds on: actor and critic(s) with target copies, Gaussian exploration noise
when stepping, uniform random actions until the buffer holds `initial_size`, and a fused graph loop
(act, step the envs, store, sample, update) of many env steps per call.
"""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from rlexp.agents.base import Agent, soft_update
from rlexp.agents.distributions import no_autograph
from rlexp.envs import space_kind
from rlexp.errors import UserError


class DDPG(Agent):
    """DDPG: a deterministic tanh actor trained through one Q(s, a) critic; soft target updates.

    Actions live in [-1, 1] inside the agent (the buffer stores them so) and are rescaled to the action
    space's bounds when stepping.

    Args (besides `Agent`'s):
        buffer: a `ReplayBuffer`; random actions until it holds `initial_size`, then one update phase
            every `train_freq` vector steps.
        tau: soft target update rate.
        step_noise_coef: std of the Gaussian noise added to actions when stepping (in [-1, 1] units).
        train_freq: vector env steps between update phases.
        gradient_steps: gradient updates per phase (-1: one per collected transition).
        lr: actor and critic learning rate.
        jit_compile: XLA for the update step. Off: with two inter-op threads (run.tf_inter_threads=auto) the
            plain graph runs the two critics side by side, TD3 Pendulum 20k in 37-44 s vs 56-63 s with XLA.
    """

    action_spaces = ("continuous",)
    off_policy = True
    default_models = {"image": "nature_cnn", "vector": "mlp_400_300"}
    n_critics = 1
    policy_delay = 1
    STEPS_PER_CALL = 200  # env steps per graph call once training has started
    MIN_PART_ROWS = 64  # batches of at least 2x this many rows run their forward passes in two halves

    def __init__(self, envs, model=None, buffer=None, *, tau: float = 0.005, step_noise_coef: float = 0.1,
                 train_freq: int = 1, gradient_steps: int = 1, lr: float = 1e-3, jit_compile: bool = False,
                 **kwargs) -> None:
        if buffer is None:
            from rlexp.buffers import ReplayBuffer

            buffer = ReplayBuffer()
        self.tau, self.step_noise_coef = float(tau), float(step_noise_coef)
        self.train_freq, self.gradient_steps = int(train_freq), int(gradient_steps)
        if self.train_freq < 1:
            raise UserError(f"agent.train_freq={train_freq} must be at least 1")
        space = envs.single_action_space
        low, high = (np.asarray(getattr(space, k, np.nan), np.float32) for k in ("low", "high"))
        if space_kind(space) == "continuous" and not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
            raise UserError(f"{type(self).__name__} needs a bounded action space, got {space}")
        self.action_low, self.action_high, self._half_range = low, high, 0.5 * (high - low)
        # With one critic, two row blocks let TF's two inter-op threads (run.tf_inter_threads=auto) share
        # its single chain of matmuls (DDPG Pendulum 2.33 vs 2.58 ms per env step). Two critics are two
        # chains already; TD3 ran 4% slower in row blocks (2.43 vs 2.34 ms), its 128-row dX matmuls taking
        # 800+ us in the loop against 150 us alone.
        two_threads = tf.config.threading.get_inter_op_parallelism_threads() >= 2
        self.batch_parts = 2 if two_threads and self.n_critics < 2 else 1
        super().__init__(envs, model, buffer, lr=lr, jit_compile=jit_compile, **kwargs)
        if self.gradient_steps == -1:
            self.gradient_steps = self.train_freq * self.n_envs

    def build(self) -> None:
        def actor(name):
            return self.build_model({"action": self.n_actions}, name=name)

        def critics(prefix):
            return [self.build_model({"q": 1}, name=f"{prefix}{i}", extra_inputs=self.n_actions)
                    for i in range(self.n_critics)]

        self.actor, self.target_actor = actor("actor"), actor("target_actor")
        self.critics, self.target_critics = critics("critic"), critics("target_critic")
        for target, source in zip([self.target_actor, *self.target_critics], [self.actor, *self.critics]):
            target.set_weights(source.get_weights())
        self.actor_optimizer, self.critic_optimizer = self.make_optimizer(), self.make_optimizer()
        self.actor_optimizer.build(self.trainable_variables("actor"))
        self.critic_optimizer.build(self.trainable_variables("critic"))
        self.updates = tf.Variable(0, dtype=tf.int64, name="updates")

    def models(self):
        names = {"actor": self.actor, "target_actor": self.target_actor}
        for i, (critic, target) in enumerate(zip(self.critics, self.target_critics)):
            names |= {f"critic{i}": critic, f"target_critic{i}": target}
        return names

    def optimizers(self):
        return {"actor": self.actor_optimizer, "critic": self.critic_optimizer}

    def trainable_variables(self, optimizer_name: str) -> list[tf.Variable]:
        if optimizer_name == "actor":
            return self.actor.trainable_variables
        return [v for critic in self.critics for v in critic.trainable_variables]

    def extra_variables(self):
        return {"updates": self.updates}

    # ----- acting -----------------------------------------------------------------------------------
    @no_autograph
    def in_row_blocks(self, model: tf.keras.Model, x: tf.Tensor) -> tf.Tensor:
        """model(x); a large batch runs as `batch_parts` row blocks, side by side (the same maths)."""
        rows = x.shape[0]
        if self.batch_parts < 2 or rows is None or rows < 2 * self.MIN_PART_ROWS or rows % self.batch_parts:
            return model(x)
        return tf.concat([model(part) for part in tf.split(x, self.batch_parts)], axis=0)

    @no_autograph
    def unit_action(self, obs: tf.Tensor, actor=None) -> tf.Tensor:
        """Deterministic actions in [-1, 1]."""
        return tf.tanh(self.in_row_blocks(actor or self.actor, obs))

    @no_autograph
    def to_env(self, actions):
        """[-1, 1] -> the action space's bounds."""
        return self.action_low + (actions + 1.0) * self._half_range

    @no_autograph
    def policy(self, obs):
        return self.to_env(self.unit_action(obs))

    @no_autograph
    def q(self, critic, obs: tf.Tensor, actions: tf.Tensor) -> tf.Tensor:
        x = tf.concat([tf.cast(obs, tf.float32), actions], axis=-1)
        return self.in_row_blocks(critic, x)[:, 0]

    # ----- learning ---------------------------------------------------------------------------------
    @no_autograph
    def critic_targets(self, rewards: tf.Tensor, next_obs: tf.Tensor, terminated: tf.Tensor) -> tf.Tensor:
        """r + gamma * (1 - terminated) * Q'(s', mu'(s'))."""
        next_q = self.q(self.target_critics[0], next_obs, self.unit_action(next_obs, self.target_actor))
        return rewards + self.gamma * (1.0 - terminated) * next_q

    @no_autograph
    def critic_step(self, obs, actions, rewards, next_obs, terminated) -> tf.Tensor:
        """One gradient step of the critic(s) towards `critic_targets`; counts the update."""
        targets = tf.stop_gradient(self.critic_targets(rewards, next_obs, terminated))
        critic_vars = self.trainable_variables("critic")
        with tf.GradientTape() as tape:
            critic_loss = tf.add_n([tf.reduce_mean(tf.square(self.q(c, obs, actions) - targets))
                                    for c in self.critics])
        self.critic_optimizer.apply_gradients(zip(tape.gradient(critic_loss, critic_vars), critic_vars))
        self.updates.assign_add(1)
        return critic_loss

    @no_autograph
    def actor_step(self, obs, target_updates: bool = True) -> tf.Tensor:
        """One gradient step of the actor through the first critic, then (by default) the soft target updates."""
        actor_vars = self.trainable_variables("actor")
        with tf.GradientTape() as tape:
            actor_loss = -tf.reduce_mean(self.q(self.critics[0], obs, self.unit_action(obs)))
        self.actor_optimizer.apply_gradients(zip(tape.gradient(actor_loss, actor_vars), actor_vars))
        if target_updates:
            self.target_updates()
        return actor_loss

    @no_autograph
    def target_updates(self) -> None:
        """Soft updates of the target actor and critic(s)."""
        soft_update(self.target_actor.variables, self.actor.variables, self.tau)
        for target, critic in zip(self.target_critics, self.critics):
            soft_update(target.variables, critic.variables, self.tau)

    @no_autograph
    def _target_updates_then_0(self) -> tf.Tensor:
        """`target_updates` as a `tf.cond` branch (which must return a tensor)."""
        self.target_updates()
        return tf.constant(0)

    @no_autograph
    def update_step(self, obs, actions, rewards, next_obs, terminated) -> dict[str, tf.Tensor]:
        """One critic step; every `policy_delay` steps an actor step and soft target updates."""
        critic_loss = self.critic_step(obs, actions, rewards, next_obs, terminated)
        if self.policy_delay == 1:
            return dict(critic_loss=critic_loss, actor_loss=self.actor_step(obs))
        actor_loss = tf.cond(self.updates % self.policy_delay == 0, lambda: self.actor_step(obs),
                             lambda: tf.constant(0.0))
        return dict(critic_loss=critic_loss, actor_loss=actor_loss)

    # ----- the loop ---------------------------------------------------------------------------------
    def _numpy_step(self, obs: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """Step the envs from `obs` (the current observations) with [-1, 1] `actions`, store the transitions."""
        return self.store_step(self.to_env(actions), actions)

    def _numpy_sample(self):
        batch = self.normalize_batch(self.buffer.sample(self.gradient_steps))
        return [batch[k].astype(np.float32, copy=False) for k in ("obs", "actions", "rewards", "next_obs", "terminated")]

    def _numpy_step_and_sample(self, obs: np.ndarray, actions: np.ndarray) -> list[np.ndarray]:
        """A cycle's last env step, then its batches: one numpy_function call instead of two."""
        return [self._numpy_step(obs, actions), *self._numpy_sample()]

    @no_autograph
    def _noisy_actions(self, obs: tf.Tensor) -> tf.Tensor:
        noise = self.step_noise_coef * self.tf_rng.normal([self.n_envs, self.n_actions])
        return tf.clip_by_value(self.unit_action(obs) + noise, -1.0, 1.0)

    @no_autograph
    def _graph_step(self, obs: tf.Tensor, actions: tf.Tensor) -> tf.Tensor:
        """`_numpy_step` with TF ops (see `steps_in_graph`): step the envs, store the transitions."""
        next_obs, rewards, terminated, _, final_obs = self.graph_env_step(self.to_env(actions))
        self.buffer.graph_add(obs, actions, rewards, final_obs, terminated)
        return next_obs

    @no_autograph
    def _env_step(self, obs: tf.Tensor, actions: tf.Tensor | None = None) -> tf.Tensor:
        """In the graph: one noisy env step (`actions`, if drawn already), its transitions stored."""
        actions = self._noisy_actions(obs) if actions is None else actions
        if self.steps_in_graph:
            return self._graph_step(obs, actions)
        next_obs = tf.numpy_function(self._numpy_step, [obs, actions], tf.as_dtype(self.obs_dtype), stateful=True)
        next_obs.set_shape((self.n_envs, *self.obs_shape))
        return next_obs

    @no_autograph
    def _step_and_sample(self, obs: tf.Tensor, actions: tf.Tensor | None = None) -> tuple[tf.Tensor, list]:
        """In the graph: `_env_step`, then gradient_steps batches from the buffer.

        Without `steps_in_graph`, step and sample are one numpy_function call: the sample always sees the
        step's transitions (TF does not order two numpy_functions by itself), and one call costs less than two."""
        obs_dtype, shapes = tf.as_dtype(self.obs_dtype), [self.obs_shape, (self.n_actions,), (), self.obs_shape, ()]
        rows = self.gradient_steps * self.buffer.batch_size
        actions = self._noisy_actions(obs) if actions is None else actions
        if self.steps_in_graph:
            return self._graph_step(obs, actions), self.buffer.graph_sample(rows, self.tf_rng)
        next_obs, *batch = tf.numpy_function(self._numpy_step_and_sample, [obs, actions],
                                             [obs_dtype] + [tf.float32] * 5, stateful=True)
        next_obs.set_shape((self.n_envs, *self.obs_shape))
        return next_obs, [tf.reshape(x, (rows, *shape)) for x, shape in zip(batch, shapes)]

    # The loops below are written with tf.while_loop, not AutoGraph: converting them (and the steps they
    # call) was ~0.45 s of TD3's 1.0 s trace.
    @no_autograph
    def _train_cycles(self, obs: tf.Tensor, cycles: tf.Tensor) -> dict[str, tf.Tensor]:
        """`cycles` x (train_freq noisy env steps, then gradient_steps updates) in one graph call."""
        size = self.buffer.batch_size

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

        totals = {"critic_loss": tf.constant(0.0), "actor_loss": tf.constant(0.0)}
        _, obs, totals = tf.while_loop(lambda i, *_: i < cycles, cycle, (tf.constant(0), obs, totals))
        n = tf.cast(tf.maximum(cycles * self.gradient_steps, 1), tf.float32)
        return {k: v / n for k, v in totals.items()} | {"obs": obs}

    @no_autograph
    def _train_groups(self, obs: tf.Tensor, groups: tf.Tensor) -> dict[str, tf.Tensor]:
        """`_train_cycles` for one env step and one update per cycle, `policy_delay` cycles at a time with
        the actor step written after the last one (no condition). TF then sees that the next env step only
        needs the actor, unchanged by the critic steps in between, and runs it beside them (TD3 Pendulum:
        2.90-2.97 vs 3.28-3.33 ms per env step). Call with `updates` a multiple of `policy_delay`.

        A group's target updates (~100 small ops) run at the start of the next group, once its env step's
        actions are drawn: TF otherwise interleaves them with that env step's ops, delaying its Python step
        (2.53-2.74 vs 2.67-2.81 ms per env step). The last group's run after the loop."""
        # written inline, not as function calls: TF orders a call as one op after everything before it
        # that touches its variables (the random generator included), which would hold the next env step
        critic_step, actor_step = self.critic_step, self.actor_step
        if self.jit_compile:  # XLA compiles each step into one op, as it does `update_step`
            critic_step, actor_step = (tf.function(f, jit_compile=True) for f in (critic_step, actor_step))

        def group(i, obs, critic_loss, actor_loss):
            for k in range(self.policy_delay):
                actions = self._noisy_actions(obs)
                if k == 0:  # the previous group's target updates, once this env step's actions are drawn
                    with tf.control_dependencies([actions]):
                        tf.cond(i > 0, self._target_updates_then_0, lambda: tf.constant(0))
                obs, batch = self._step_and_sample(obs, actions)
                critic_loss += critic_step(*batch)
            return i + 1, obs, critic_loss, actor_loss + actor_step(batch[0], target_updates=False)

        zero = tf.constant(0.0)
        loop_vars = (tf.constant(0), obs, zero, zero)
        _, obs, critic_loss, actor_loss = tf.while_loop(lambda i, *_: i < groups, group, loop_vars)
        with tf.control_dependencies([critic_loss, actor_loss]):  # the last group's target updates
            tf.cond(groups > 0, self._target_updates_then_0, lambda: tf.constant(0))
        n = tf.cast(tf.maximum(groups * self.policy_delay, 1), tf.float32)
        return {"critic_loss": critic_loss / n, "actor_loss": actor_loss / n, "obs": obs}

    def _replay_to_graph(self) -> None:
        """With `steps_in_graph`, move a NumPy `ReplayBuffer` into TF variables (once the random warm-up,
        stepped in Python at 26 µs a step against 66 µs in a graph, has filled it)."""
        from rlexp.buffers import GraphReplayBuffer, ReplayBuffer

        if self.steps_in_graph and type(self.buffer) is ReplayBuffer:
            buffer = GraphReplayBuffer.like(self.buffer)
            buffer.load_state_dict(self.buffer.state_dict())
            buffer.rng, self.buffer = self.rng, buffer

    def train_iteration(self) -> dict[str, float]:
        remaining = max(self.max_steps - self.steps, 1)
        if not self.buffer.ready:  # uniform random actions until the buffer holds initial_size
            n = min(-(-(self.buffer.initial_size - self.buffer.size) // self.n_envs), 1000)
            for _ in range(n):
                actions = self.rng.uniform(-1, 1, (self.n_envs, self.n_actions)).astype(np.float32)
                self._obs = self._numpy_step(self._obs, actions)
            return {}
        self._replay_to_graph()
        if not hasattr(self, "_train_fn"):
            self._update_step_fn = tf.function(self.update_step, jit_compile=self.jit_compile, autograph=False)
            self._train_fn = tf.function(self._train_cycles, autograph=False)
            self._groups_fn = tf.function(self._train_groups, autograph=False)
        per_cycle = self.train_freq * self.n_envs
        cycles = max(1, min(self.STEPS_PER_CALL, remaining) // per_cycle)
        train_fn, count = self._train_fn, cycles
        if self.train_freq == 1 and self.gradient_steps == 1:
            lag = -int(self.updates) % self.policy_delay  # updates until the next actor step
            if lag == 0 and cycles >= self.policy_delay:
                train_fn, count = self._groups_fn, cycles // self.policy_delay
            elif lag:  # realign after a resume between two actor steps
                count = min(cycles, lag)
        return {k: float(v) for k, v in self.call_graph_loop(
            train_fn, tf.constant(count), max_steps=max(self.STEPS_PER_CALL // self.n_envs, self.train_freq)).items()}
