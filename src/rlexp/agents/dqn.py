"""Deep Q-Network (Mnih et al. 2015) and Double DQN (van Hasselt et al. 2016), discrete actions."""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from rlexp.agents.distributions import no_autograph
from rlexp.agents.off_policy import OffPolicyAgent


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


class DQN(OffPolicyAgent):
    """DQN / Double DQN with a replay buffer, epsilon-greedy exploration and a target network.

    Args (besides `OffPolicyAgent`'s):
        double: use Double DQN targets.
        epsilon_start, epsilon_end, epsilon_decay_steps: linear exploration schedule over env steps (it
            explores from the first step: no separate random warm-up).
        target_sync_steps: env steps between copies of the online weights to the target network.
        grad_norm: global gradient-norm clip (None: off).
        numpy_acting: collect with a NumPy mirror of an MLP Q-network (about half the cost per env step
            of a graph step, same transitions bit for bit; CNNs always act in TensorFlow).

    With a `PrioritizedReplayBuffer` (buffer=prioritized), the Huber loss of each sampled transition is
    weighted by its importance-sampling weight, and its |TD error| sets its new priority before the next
    batch is drawn.
    """

    action_spaces = ("discrete",)
    metric_names = ("loss",)
    random_warmup = False
    prioritized_replay = True
    episode_phases = True  # agent.train_freq_unit=episode (`episode_iteration`)
    population_support = True
    member_keys = ("lr", "gamma")
    default_models = {"image": "nature_cnn", "vector": "mlp_large"}  # RL Zoo's net_arch [256, 256]

    def __init__(self, envs, model=None, buffer=None, *, double: bool = False, epsilon_start: float = 1.0,
                 epsilon_end: float = 0.02, epsilon_decay_steps: int = 150000, target_sync_steps: int = 1000,
                 train_freq: int = 4, gradient_steps: int = 1, grad_norm: float | None = 10.0,
                 numpy_acting: bool = True, **kwargs) -> None:
        self.double = bool(double)
        self.epsilon_start, self.epsilon_end = float(epsilon_start), float(epsilon_end)
        self.epsilon_decay_steps = max(int(float(epsilon_decay_steps)), 1)
        self.target_sync_steps = int(float(target_sync_steps))
        self.grad_norm = None if grad_norm is None else float(grad_norm)
        self.numpy_acting = bool(numpy_acting)
        self.last_sync = 0
        super().__init__(envs, model, buffer, train_freq=train_freq, gradient_steps=gradient_steps, **kwargs)

    @property
    def q_units(self) -> int:
        """The Q-network's outputs: one value per action."""
        return self.n_actions

    def build(self) -> None:
        self.model = self.build_model({"q": self.q_units}, name="q")
        self.target = self.build_model({"q": self.q_units}, name="q_target")
        self.target.set_weights(self.model.get_weights())
        self.optimizer = self.make_optimizer()
        self.optimizer.build(self.model.trainable_variables)
        self._collect_fn = tf.function(self._collect)
        from rlexp.models.numpy_mirror import NumpyModel

        self._mirror = NumpyModel.mirror(self.model) if self.numpy_acting else None  # a population's too
        self._draws_fn = tf.function(self._exploration_noise)
        self._sync_fn = tf.function(lambda: self.copy_targets(self.target.variables, self.model.variables))

    def models(self):
        return {"model": self.model, "target": self.target}

    def optimizers(self):
        return {"model": self.optimizer}

    def _state(self):
        return super()._state() | {"last_sync": self.last_sync}

    def load(self, path, weights_only: bool = False):
        state = super().load(path, weights_only)
        self.restore_state(state)
        return state

    def restore_state(self, state) -> None:
        self.last_sync = int(state.get("last_sync", self.steps))

    @property
    def epsilon(self) -> float:
        frac = min(self.steps / self.epsilon_decay_steps, 1.0)
        return self.epsilon_start + frac * (self.epsilon_end - self.epsilon_start)

    @no_autograph
    def q_values(self, obs, network=None) -> tf.Tensor:
        """Q(s, .), one value per action (of `network`, else the online one)."""
        return (network or self.model)(obs)

    def numpy_q_values(self, outputs: np.ndarray) -> np.ndarray:
        """Q(s, .) from the NumPy mirror's outputs."""
        return outputs

    @no_autograph
    def policy(self, obs):
        return tf.argmax(self.q_values(obs), axis=-1)

    @no_autograph
    def sample_policy(self, obs, rng):
        """Epsilon-greedy with the final exploration rate (SB3's DQN.predict with deterministic=False, once
        its exploration schedule has ended)."""
        greedy = tf.argmax(self.q_values(obs), axis=-1)
        n = tf.shape(greedy)[:1]
        randoms = rng.uniform(n, 0, self.n_actions, dtype=tf.int64)
        return tf.where(rng.uniform(n) < self.epsilon_end, randoms, greedy)

    # ----- collection: epsilon-greedy, in the graph or with a NumPy mirror of the Q-network ----------
    @no_autograph
    def _exploration_noise(self, n_steps: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """`n_steps` steps of random actions and uniform draws (explore where draw < epsilon), from `tf_rng`
        in two calls: one per step cost ~23 µs of TensorFlow's loop overhead per env step. A population's
        members each draw their envs' columns from their own generators."""
        per_member = {} if self.members is None else {"axis": 1}
        random = self.tf_rng.uniform([n_steps, self.n_envs], 0, self.n_actions, dtype=tf.int64, **per_member)
        return random, self.tf_rng.uniform([n_steps, self.n_envs], **per_member)

    def _collect(self, obs: tf.Tensor, epsilon: tf.Tensor, steps: tf.Tensor) -> tf.Tensor:
        randoms, draws = self._exploration_noise(steps)
        for t in tf.range(steps):
            greedy = tf.argmax(self.q_values(obs), axis=-1)
            actions = tf.where(draws[t] < epsilon, randoms[t], greedy)
            next_obs = tf.numpy_function(self._numpy_step, [obs, actions], tf.as_dtype(self.obs_dtype), stateful=True)
            next_obs.set_shape(obs.shape)
            obs = next_obs
        return obs

    def _collect_numpy(self, epsilon: float, steps: int) -> None:
        """`_collect` with the Q-network's NumPy mirror: no TensorFlow call per env step. The exploration
        noise is the graph version's draws, so the transitions (and the training run) are too, bit for bit."""
        randoms, draws = (x.numpy() for x in self._draws_fn(tf.constant(steps)))
        epsilon = np.float32(epsilon)  # compared in float32, as in the graph
        weights = [w.numpy() for w in self.model.weights]
        obs = self._obs
        for t in range(steps):
            greedy = np.argmax(self.numpy_q_values(self._mirror(weights, obs)[0]), axis=-1)
            obs = self._numpy_step(obs, np.where(draws[t] < epsilon, randoms[t], greedy))

    # ----- update ---------------------------------------------------------------------------------
    @no_autograph
    def td_errors(self, obs, actions, rewards, next_obs, terminated) -> tf.Tensor:
        """Q(s, a) minus the (Double) DQN target, per row."""
        next_q_target = self.target(next_obs)
        next_q_online = self.model(next_obs) if self.double else None
        gamma = self.per_row(self.gamma, rewards)
        targets = tf.stop_gradient(q_targets(rewards, terminated, next_q_target, gamma, next_q_online))
        taken = tf.one_hot(tf.cast(actions, tf.int32), self.n_actions)  # Q(s, a): fewer ops than a gather
        return tf.reduce_sum(self.model(obs) * taken, axis=-1) - targets

    @no_autograph
    def loss(self, obs, actions, rewards, next_obs, terminated, weights=None):
        """Huber loss between Q(s, a) and the (Double) DQN target: the mean, or with importance-sampling
        `weights` the mean of the weighted per-row losses."""
        return self._loss_and_errors(obs, actions, rewards, next_obs, terminated, weights)[0]

    @no_autograph
    def _loss_and_errors(self, obs, actions, rewards, next_obs, terminated, weights=None):
        errors = self.td_errors(obs, actions, rewards, next_obs, terminated)
        losses = huber(errors)
        return self.row_mean(losses if weights is None else weights * losses), errors

    @no_autograph
    def update_step(self, obs, actions, rewards, next_obs, terminated) -> dict[str, tf.Tensor]:
        """One gradient step on the Huber loss (clipped to `grad_norm`)."""
        return {"loss": self._update(obs, actions, rewards, next_obs, terminated)[0]}

    @no_autograph
    def update_batch(self, batch: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        """`update_step` on a batch; with importance-sampling `weights` in it, a weighted one that also
        returns the rows' `td_errors`."""
        keys = ("obs", "actions", "rewards", "next_obs", "terminated")
        loss, errors = self._update(*(batch[k] for k in keys), batch.get("weights"))
        return {"loss": loss} | ({"td_errors": errors} if "weights" in batch else {})

    @no_autograph
    def _update(self, obs, actions, rewards, next_obs, terminated, weights=None) -> tuple[tf.Tensor, tf.Tensor]:
        variables = self.model.trainable_variables
        with tf.GradientTape() as tape:
            loss, errors = self._loss_and_errors(obs, actions, rewards, next_obs, terminated, weights)
        self.optimizer_step(self.optimizer, tape.gradient(loss, variables), variables, self.grad_norm)
        return loss, errors

    def can_learn(self) -> bool:
        """Whether this iteration's env steps are followed by an update phase."""
        return self.buffer.ready

    def collect(self, steps: int) -> None:
        """`steps` epsilon-greedy vector env steps at the current exploration rate, into the buffer."""
        if self._mirror is not None:
            self._collect_numpy(self.epsilon, steps)
        else:
            self._collect_fn(tf.convert_to_tensor(self._obs), tf.constant(self.epsilon, tf.float32),
                             tf.constant(steps))

    def sync_target(self) -> None:
        """Copy the online weights to the target once `target_sync_steps` env steps have passed since the last."""
        if self.steps - self.last_sync >= self.target_sync_steps:
            self._sync_fn()
            self.last_sync = self.steps

    def train_iteration(self) -> dict[str, float]:
        if self.train_freq_unit == "episode":
            return self.episode_iteration()
        self.collect(self.train_freq)
        metrics = {"epsilon": self.epsilon}
        if self.can_learn() and self.gradient_steps > 0:
            self.sync_target()
            metrics |= self.learn_from_replay()
        return metrics

    def episode_iteration(self) -> dict[str, float]:
        """agent.train_freq_unit=episode (SB3's train_freq=[n, "episode"]): vector env steps, the exploration rate
        following each, until `train_freq` episodes have ended over all envs (or the run's next stop); then
        `gradient_steps` updates (-1: one per transition collected), one graph call each."""
        from rlexp.buffers import PrioritizedReplayBuffer

        ended = steps = 0
        while ended < self.train_freq and self.steps_left() > 0:
            self.collect(1)
            ended += int(np.count_nonzero(self.episode_ends))
            steps += 1
        metrics: dict[str, float] = {"epsilon": self.epsilon}
        updates = steps * self.n_envs if self.updates_per_transition else self.gradient_steps
        if not (self.can_learn() and updates > 0):
            return metrics
        self.sync_target()
        if isinstance(self.buffer, PrioritizedReplayBuffer):
            return metrics | self.run_prioritized_updates(updates)
        totals: dict[str, float] = {}
        for _ in range(updates):  # a phase's count varies, a batch's shape does not
            for key, value in self.run_updates(self.normalize_batch(self.buffer.sample(1))).items():
                totals[key] = totals.get(key, 0.0) + value
        return metrics | {key: value / updates for key, value in totals.items()}
