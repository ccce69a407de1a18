"""Deep Q-learning from Demonstrations (Hester et al. 2017), discrete actions: Double DQN that first learns
from an expert's episodes alone, then keeps sampling them beside its own replay.

Loss = 1-step TD + n_step_weight * n-step TD + supervised_weight * large-margin loss (demonstrations only)
       + l2_weight * ||theta||^2,
large margin: max_a [Q(s, a) + expert_margin * (a != a_E)] - Q(s, a_E). Option names follow TensorForce's
(`expert_margin`, `supervised_weight`, `demo_memory_capacity`, `demo_sampling_ratio`).

Replay, as in the paper by default (buffer=dqfd, `PrioritizedNStepReplayBuffer`): the demonstrations and the
agent's transitions share one prioritized buffer, demonstrations with a priority bonus, and each row's
losses are weighted by its importance-sampling weight. With buffer=dqfd_uniform (`NStepReplayBuffer`,
TensorForce's scheme) each batch draws `demo_sampling_ratio` of its rows from the demonstrations, the rest
from the agent's replay, both uniformly.
"""
from __future__ import annotations

import logging

import numpy as np
import tensorflow as tf

from rlexp.agents.distributions import no_autograph
from rlexp.agents.dqn import DQN, huber
from rlexp.errors import UserError

N_STEP_KEYS = ("n_step_returns", "n_step_obs", "n_step_discounts")
log = logging.getLogger("rlexp")


@no_autograph
def large_margin_loss(q: tf.Tensor, expert_actions: tf.Tensor, margin: float) -> tf.Tensor:
    """Per row: max_a [Q(s, a) + margin * (a != a_E)] - Q(s, a_E) (0 when a_E leads the others by the margin)."""
    expert = tf.one_hot(tf.cast(expert_actions, tf.int32), tf.shape(q)[-1])
    return tf.reduce_max(q + margin * (1.0 - expert), axis=-1) - tf.reduce_sum(q * expert, axis=-1)


class DQfD(DQN):
    """DQfD: pre-training on demonstrations, then Double DQN with demonstrations mixed into every batch.

    Args (besides `DQN`'s; `double` defaults to true):
        demos: a Minari dataset of demonstrations (a `+demo_dir` recorded by `mode=play`, or a dataset dir).
        demo_memory_capacity: demonstration transitions kept (whole episodes first).
        demo_sampling_ratio: with uniform replay (buffer=dqfd_uniform), the share of each batch drawn from the
            demonstrations (prioritized replay draws them by their priorities).
        pretrain_steps: gradient steps on demonstrations alone before the first env step; updates then follow
            every `train_freq` env steps from the first (the demonstrations fill the replay, so there is no
            wait for `initial_size` own transitions).
        expert_margin: the margin the expert's action must lead the others' Q-values by.
        supervised_weight: weight of the large-margin loss.
        n_step, n_step_weight: the n-step return's length and its loss's weight.
        l2_weight: weight of the L2 penalty on the Q-network's weights.
        epsilon_start, epsilon_end: DQN's exploration schedule, 0.01 throughout by default as in the paper (the
            pre-trained network acts well already).
    """

    population_support = False  # demonstrations and n-step replay: not per member yet
    episode_phases = False  # its phases mix demonstrations into each batch: train_freq counts env steps

    metric_names = ("loss", "td_loss", "n_step_loss", "supervised_loss")

    def __init__(self, envs, model=None, buffer=None, *, demos: str | None = None, demo_memory_capacity: int = 10000,
                 demo_sampling_ratio: float = 0.2, pretrain_steps: int = 10000, expert_margin: float = 0.5,
                 supervised_weight: float = 0.1, n_step: int = 10, n_step_weight: float = 1.0,
                 l2_weight: float = 1e-5, double: bool = True, epsilon_start: float = 0.01,
                 epsilon_end: float = 0.01, **kwargs) -> None:
        from rlexp.buffers import NStepReplayBuffer, PrioritizedNStepReplayBuffer

        if not demos:
            raise UserError("agent.demos is not set: DQfD learns from a Minari dataset of demonstrations "
                            "(python -m rlexp mode=play +checkpoint=<run> play.episodes=20 +demo_dir=demos/, "
                            "then agent.demos=demos/)")
        if not 0 <= float(demo_sampling_ratio) < 1:
            raise UserError(f"agent.demo_sampling_ratio={demo_sampling_ratio} must be in [0, 1)")
        for key in ("normalize_obs", "normalize_reward", "clip_rewards"):
            if kwargs.get(key):  # demonstrations are raw env data; the losses would mix two scales
                raise UserError(f"{'env' if key == 'clip_rewards' else 'agent'}.{key}=true is not supported by "
                                "DQfD, which learns from raw demonstrations; leave it false")
        self.demos_path, self.demo_memory_capacity = str(demos), int(demo_memory_capacity)
        self.demo_sampling_ratio, self.pretrain_steps = float(demo_sampling_ratio), int(pretrain_steps)
        self.expert_margin, self.supervised_weight = float(expert_margin), float(supervised_weight)
        self.n_step, self.n_step_weight, self.l2_weight = max(int(n_step), 1), float(n_step_weight), float(l2_weight)
        self.pretrained = False
        buffer = buffer if buffer is not None else PrioritizedNStepReplayBuffer()
        if not isinstance(buffer, NStepReplayBuffer):
            raise UserError("DQfD needs its n-step replay buffer: buffer=dqfd (prioritized, the default) or "
                            "buffer=dqfd_uniform")
        self.prioritized = isinstance(buffer, PrioritizedNStepReplayBuffer)
        super().__init__(envs, model, buffer, double=double, epsilon_start=epsilon_start, epsilon_end=epsilon_end,
                         **kwargs)
        buffer.n, buffer.gamma, buffer.stride = self.n_step, self.gamma, self.n_envs
        self.demo_rows = int(round(self.buffer.batch_size * self.demo_sampling_ratio))

    @property
    def demos(self):
        """The demonstrations, loaded when training first needs them (play and eval don't)."""
        return self._load_demos()

    def _load_demos(self):
        """The demonstrations, loaded (and put into a prioritized buffer) on the first call."""
        if not hasattr(self, "_demos"):
            from rlexp.envs.demos import env_id_of, load_demonstrations

            self._demos = load_demonstrations(self.demos_path, env_id_of(self.envs), self.observation_space,
                                              self.action_space, self.gamma, self.n_step, self.demo_memory_capacity)
            log.info(f"demonstrations: {len(self._demos):,} transitions of {self._demos.episodes} episode(s) "
                     f"from {self.demos_path} (demo_memory_capacity={self.demo_memory_capacity:,})")
            if self.prioritized:
                self.buffer.attach_demonstrations(self._demos)
        return self._demos

    def _state(self):
        return super()._state() | {"pretrained": self.pretrained}

    def load(self, path, weights_only: bool = False):
        state = super().load(path, weights_only)
        self.pretrained = bool(state.get("pretrained", True))
        return state

    # ----- batches ------------------------------------------------------------------------------------
    def demo_batch(self, rows: int) -> dict[str, np.ndarray]:
        """`rows` demonstration transitions drawn uniformly, flagged as expert data."""
        idx = self.rng.integers(0, len(self.demos), rows)
        keys = ("obs", "actions", "rewards", "next_obs", "terminated", *N_STEP_KEYS)
        batch = {k: getattr(self.demos, k).take(idx, axis=0) for k in keys}
        return batch | {"expert": np.ones(rows, np.float32)}

    def mixed_batches(self, n_batches: int) -> dict[str, np.ndarray]:
        """`n_batches` batches, each `demo_rows` demonstrations and the rest from the replay (uniform replay);
        until the replay holds `initial_size` transitions, demonstrations only."""
        size = self.buffer.batch_size
        demo_rows = self.demo_rows if self.buffer.ready else size
        demo = self.demo_batch(n_batches * demo_rows)
        own_rows = size - demo_rows
        own = self.buffer.sample(n_batches) if own_rows else None
        parts = []
        for b in range(n_batches):
            part = {k: v[b * demo_rows:(b + 1) * demo_rows] for k, v in demo.items()}
            if own is not None:
                rows = slice(b * size, b * size + own_rows)  # the first own_rows of this batch's sample
                own_part = {k: own[k][rows] for k in part if k != "expert"} | {"expert": np.zeros(own_rows, np.float32)}
                part = {k: np.concatenate([part[k], own_part[k].astype(part[k].dtype, copy=False)]) for k in part}
            parts.append(part)
        return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}

    # ----- the loss -------------------------------------------------------------------------------------
    @no_autograph
    def dqfd_loss(self, batch: dict[str, tf.Tensor]) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        """The loss, its terms, and the rows' 1-step TD errors (`td_errors`); with importance-sampling
        `weights` in the batch, each row's TD, n-step and large-margin losses are weighted by them."""
        q = self.model(batch["obs"])
        taken = tf.one_hot(tf.cast(batch["actions"], tf.int32), self.n_actions)
        q_taken = tf.reduce_sum(q * taken, axis=-1)

        def double_q_target(returns, next_obs, discounts):  # Double DQN's (DQN's with double=false)
            next_q = self.target(next_obs)
            best = tf.one_hot(tf.argmax(self.model(next_obs) if self.double else next_q, axis=-1), self.n_actions)
            return tf.stop_gradient(returns + discounts * tf.reduce_sum(next_q * best, axis=-1))

        one_step = double_q_target(batch["rewards"], batch["next_obs"], self.gamma * (1.0 - batch["terminated"]))
        n_step = double_q_target(batch["n_step_returns"], batch["n_step_obs"], batch["n_step_discounts"])
        weights = batch.get("weights")

        def weighted(losses):
            return losses if weights is None else weights * losses

        td_errors = q_taken - one_step
        td_loss = tf.reduce_mean(weighted(huber(td_errors)))
        n_step_loss = tf.reduce_mean(weighted(huber(q_taken - n_step)))
        expert = batch["expert"]
        margin = large_margin_loss(q, batch["actions"], self.expert_margin)
        supervised_loss = tf.reduce_sum(weighted(margin) * expert) / tf.maximum(tf.reduce_sum(expert), 1.0)
        l2 = tf.add_n([tf.reduce_sum(tf.square(w)) for w in self.model.trainable_variables if len(w.shape) > 1])
        loss = (td_loss + self.n_step_weight * n_step_loss + self.supervised_weight * supervised_loss
                + self.l2_weight * l2)
        return loss, dict(loss=loss, td_loss=td_loss, n_step_loss=n_step_loss, supervised_loss=supervised_loss,
                          td_errors=td_errors)

    @no_autograph
    def update_batch(self, batch: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        """One gradient step on `dqfd_loss`; its metrics (and the rows' `td_errors`)."""
        variables = self.model.trainable_variables
        with tf.GradientTape() as tape:
            loss, metrics = self.dqfd_loss(batch)
        grads = tape.gradient(loss, variables)
        if self.grad_norm is not None:
            grads, _ = tf.clip_by_global_norm(grads, self.grad_norm)
        self.optimizer.apply_gradients(zip(grads, variables))
        return metrics

    # ----- training -------------------------------------------------------------------------------------
    def pretrain(self) -> dict[str, float]:
        """`pretrain_steps` gradient steps on demonstrations alone (the target synced every
        `target_sync_steps` of them), in calls of up to 1,000 steps; logs the last call's mean losses."""
        metrics, done, chunk = {}, 0, max(min(1000, self.target_sync_steps), 1)
        self._load_demos()
        while done < self.pretrain_steps:
            n = min(chunk, self.pretrain_steps - done)
            self._sync_fn()
            if self.prioritized:
                metrics = self.run_prioritized_updates(n)
            else:
                metrics = self.run_updates(self.demo_batch(n * self.buffer.batch_size))
            done += n
        self._sync_fn()
        self.pretrained = True
        if done:
            log.info(f"pre-training: {done:,} gradient steps on the demonstrations; loss {metrics['loss']:.4g} "
                     f"(supervised {metrics['supervised_loss']:.4g}), mean of the last {n:,}")
        return metrics

    def learn_from_replay(self) -> dict[str, float]:
        if self.prioritized:
            self._load_demos()  # a resumed run loads them here
            return super().learn_from_replay()
        return self.run_updates(self.mixed_batches(self.gradient_steps))

    def can_learn(self) -> bool:
        return True  # the demonstrations fill the replay: no wait for initial_size own transitions

    def first_update_step(self) -> int:
        return 0

    def train_iteration(self) -> dict[str, float]:
        if not self.pretrained:
            return self.pretrain() | {"epsilon": self.epsilon}
        return super().train_iteration()
