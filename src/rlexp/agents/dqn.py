"""Deep Q-Network (Mnih et al. 2015) and Double DQN (van Hasselt et al. 2016), discrete actions."""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from rlexp.agents.base import Agent
from rlexp.agents.distributions import no_autograph
from rlexp.errors import UserError


@no_autograph
def q_targets(rewards: tf.Tensor, terminated: tf.Tensor, next_q_target: tf.Tensor, gamma: float,
              next_q_online: tf.Tensor | None = None) -> tf.Tensor:
    """One-step TD targets r + gamma * (1 - terminated) * Q'(s', a').

    DQN takes a' = argmax Q_target(s'); Double DQN (`next_q_online` given) takes a' = argmax Q_online(s')
    and evaluates it with the target network.
    """
    if next_q_online is None:
        next_values = tf.reduce_max(next_q_target, axis=-1)
    else:
        best = tf.argmax(next_q_online, axis=-1)
        next_values = tf.gather(next_q_target, best, batch_dims=1)
    return rewards + gamma * (1.0 - terminated) * next_values


@no_autograph
def huber(errors: tf.Tensor, delta: float = 1.0) -> tf.Tensor:
    """Huber loss per element (Keras's formula, without its rank and dtype handling)."""
    absolute = tf.abs(errors)
    return tf.where(absolute <= delta, 0.5 * tf.square(errors), delta * absolute - 0.5 * delta**2)


class DQN(Agent):
    """DQN / Double DQN with a replay buffer, epsilon-greedy exploration and a target network.

    Args (besides `Agent`'s):
        buffer: a `ReplayBuffer` or `FrameBuffer`; training starts when it holds `initial_size`.
        double: use Double DQN targets.
        epsilon_start, epsilon_end, epsilon_decay_steps: linear exploration schedule over env steps.
        target_sync_steps: env steps between copies of the online weights to the target network.
        train_freq: vector env steps collected between training phases.
        gradient_steps: gradient updates per training phase (-1: one per collected transition).
        grad_norm: global gradient-norm clip (None: off).
        numpy_acting: collect with a NumPy mirror of an MLP Q-network (about half the cost per env step
            of a graph step, same transitions bit for bit; CNNs always act in TensorFlow).
    """

    action_spaces = ("discrete",)
    off_policy = True

    def __init__(self, envs, model=None, buffer=None, *, double: bool = False, epsilon_start: float = 1.0,
                 epsilon_end: float = 0.02, epsilon_decay_steps: int = 150000, target_sync_steps: int = 1000,
                 train_freq: int = 4, gradient_steps: int = 1, grad_norm: float | None = 10.0,
                 numpy_acting: bool = True, **kwargs) -> None:
        if buffer is None:
            from rlexp.buffers import ReplayBuffer

            buffer = ReplayBuffer()
        self.double = bool(double)
        self.epsilon_start, self.epsilon_end = float(epsilon_start), float(epsilon_end)
        self.epsilon_decay_steps = max(int(float(epsilon_decay_steps)), 1)
        self.target_sync_steps = int(float(target_sync_steps))
        self.train_freq = int(train_freq)
        if self.train_freq < 1:
            raise UserError(f"agent.train_freq={train_freq} must be at least 1")
        self.gradient_steps = int(gradient_steps)
        self.grad_norm = None if grad_norm is None else float(grad_norm)
        self.numpy_acting = bool(numpy_acting)
        self.last_sync = 0
        super().__init__(envs, model, buffer, **kwargs)
        if self.gradient_steps == -1:
            self.gradient_steps = self.train_freq * self.n_envs

    def build(self) -> None:
        self.model = self.build_model({"q": self.n_actions}, name="q")
        self.target = self.build_model({"q": self.n_actions}, name="q_target")
        self.target.set_weights(self.model.get_weights())
        self.optimizer = self.make_optimizer()
        self.optimizer.build(self.model.trainable_variables)
        self._collect_fn = tf.function(self._collect)
        from rlexp.numpy_models import NumpyModel

        self._mirror = NumpyModel.mirror(self.model) if self.numpy_acting else None
        self._draws_fn = tf.function(self._exploration_noise)
        self._update_fn = tf.function(self._update, autograph=False)
        self._sync_fn = tf.function(lambda: [t.assign(o) for t, o in zip(self.target.variables, self.model.variables)])

    def models(self):
        return {"model": self.model, "target": self.target}

    def optimizers(self):
        return {"model": self.optimizer}

    def _state(self):
        return super()._state() | {"last_sync": self.last_sync}

    def load(self, path, weights_only: bool = False):
        state = super().load(path, weights_only)
        self.last_sync = int(state.get("last_sync", self.steps))
        return state

    @property
    def epsilon(self) -> float:
        frac = min(self.steps / self.epsilon_decay_steps, 1.0)
        return self.epsilon_start + frac * (self.epsilon_end - self.epsilon_start)

    @no_autograph
    def policy(self, obs):
        return tf.argmax(self.model(obs), axis=-1)

    # ----- collection: epsilon-greedy in the graph, env step + buffer write through numpy ---------
    def _numpy_step(self, obs: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """Step the envs from `obs` (the current observations), store the transitions."""
        return self.store_step(actions, actions)

    @no_autograph
    def _exploration_noise(self, n_steps: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """`n_steps` steps of random actions and uniform draws (explore where draw < epsilon), from `tf_rng`
        in two calls: one per step cost ~23 µs of TensorFlow's loop overhead per env step."""
        random = self.tf_rng.uniform([n_steps, self.n_envs], 0, self.n_actions, dtype=tf.int64)
        return random, self.tf_rng.uniform([n_steps, self.n_envs])

    def _collect(self, obs: tf.Tensor, epsilon: tf.Tensor) -> tf.Tensor:
        randoms, draws = self._exploration_noise(self.train_freq)
        for t in tf.range(self.train_freq):
            greedy = tf.argmax(self.model(obs), axis=-1)
            actions = tf.where(draws[t] < epsilon, randoms[t], greedy)
            next_obs = tf.numpy_function(self._numpy_step, [obs, actions], tf.as_dtype(self.obs_dtype), stateful=True)
            next_obs.set_shape(obs.shape)
            obs = next_obs
        return obs

    def _collect_numpy(self, epsilon: float) -> None:
        """`_collect` with the Q-network's NumPy mirror: no TensorFlow call per env step. The exploration
        noise is the graph version's draws, so the transitions (and the training run) are too, bit for bit."""
        randoms, draws = (x.numpy() for x in self._draws_fn(tf.constant(self.train_freq)))
        epsilon = np.float32(epsilon)  # compared in float32, as in the graph
        weights = [w.numpy() for w in self.model.weights]
        obs = self._obs
        for t in range(self.train_freq):
            greedy = np.argmax(self._mirror(weights, obs)[0], axis=-1)
            obs = self._numpy_step(obs, np.where(draws[t] < epsilon, randoms[t], greedy))

    # ----- update ---------------------------------------------------------------------------------
    @no_autograph
    def loss(self, obs, actions, rewards, next_obs, terminated):
        """Huber loss between Q(s, a) and the (Double) DQN target."""
        next_q_target = self.target(next_obs)
        next_q_online = self.model(next_obs) if self.double else None
        targets = tf.stop_gradient(q_targets(rewards, terminated, next_q_target, self.gamma, next_q_online))
        taken = tf.one_hot(tf.cast(actions, tf.int32), self.n_actions)  # Q(s, a): fewer ops than a gather
        return tf.reduce_mean(huber(tf.reduce_sum(self.model(obs) * taken, axis=-1) - targets))

    @no_autograph
    def _update(self, batch: dict[str, tf.Tensor]) -> tf.Tensor:
        """`gradient_steps` gradient steps on consecutive slices of `batch`; the mean loss. A `tf.while_loop`,
        not AutoGraph (whose conversion was most of the first call's trace)."""
        size = self.buffer.batch_size
        variables = self.model.trainable_variables
        batch = {k: tf.reshape(v, [-1, size, *v.shape[1:]]) for k, v in batch.items()}  # one row per step

        def gradient_step(g, total):
            part = {k: tf.gather(v, g) for k, v in batch.items()}
            with tf.GradientTape() as tape:
                loss = self.loss(part["obs"], part["actions"], part["rewards"], part["next_obs"], part["terminated"])
            grads = tape.gradient(loss, variables)
            if self.grad_norm is not None:
                grads, _ = tf.clip_by_global_norm(grads, self.grad_norm)
            self.optimizer.apply_gradients(zip(grads, variables))
            return g + 1, total + loss

        initial = (tf.constant(0), tf.constant(0.0))
        _, total = tf.while_loop(lambda g, _: g < self.gradient_steps, gradient_step, initial)
        return total / tf.cast(self.gradient_steps, tf.float32)

    def train_iteration(self) -> dict[str, float]:
        if self._mirror is not None:
            self._collect_numpy(self.epsilon)
        else:
            self._collect_fn(tf.convert_to_tensor(self._obs), tf.constant(self.epsilon, tf.float32))
        metrics = {"epsilon": self.epsilon}
        if self.buffer.ready and self.gradient_steps > 0:
            if self.steps - self.last_sync >= self.target_sync_steps:
                self._sync_fn()
                self.last_sync = self.steps
            batch = self.normalize_batch(self.buffer.sample(self.gradient_steps))
            metrics["loss"] = float(self._update_fn(batch))
        return metrics
