"""Normalized Advantage Functions (Gu et al. 2016), continuous actions: Q-learning with a Q-function whose
maximum over actions is known in closed form.

Q(s, a) = V(s) + A(s, a),  A(s, a) = -1/2 (a - mu(s))^T P(s) (a - mu(s)),  P(s) = L(s) L(s)^T,
with L lower-triangular and a positive (exponentiated) diagonal, so P is positive definite, argmax_a Q = mu(s)
and max_a Q = V(s). Option names follow TensorForce's (`target_sync_frequency`, `target_update_weight`).
"""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from rlexp.agents.distributions import no_autograph
from rlexp.agents.off_policy import OffPolicyAgent, soft_update
from rlexp.errors import UserError


@no_autograph
def lower_triangular(entries: tf.Tensor, n: int) -> tf.Tensor:
    """[batch, n(n+1)/2] -> [batch, n, n] lower-triangular L, row by row (L[0,0], L[1,0], L[1,1], ...), with
    the diagonal exponentiated."""
    rows, cols = np.tril_indices(n)
    batch = tf.shape(entries)[0]
    index = tf.constant(rows * n + cols, tf.int32)
    flat = tf.scatter_nd(index[:, None], tf.transpose(entries), [n * n, batch])
    lower = tf.reshape(tf.transpose(flat), [batch, n, n])
    return tf.linalg.set_diag(lower, tf.exp(tf.linalg.diag_part(lower)))


@no_autograph
def advantage(actions: tf.Tensor, mu: tf.Tensor, lower: tf.Tensor) -> tf.Tensor:
    """-1/2 (a - mu)^T L L^T (a - mu) = -1/2 ||L^T (a - mu)||^2, per row."""
    projected = tf.linalg.matvec(lower, actions - mu, transpose_a=True)
    return -0.5 * tf.reduce_sum(tf.square(projected), axis=-1)


class NAF(OffPolicyAgent):
    """NAF: one network with V(s), mu(s) and L(s) heads, a target copy for V(s'), Gaussian exploration noise.

    Args (besides `OffPolicyAgent`'s):
        target_sync_frequency: updates between target updates.
        target_update_weight: weight of the online network in a target update (1: copy, < 1: Polyak averaging).
        step_noise_coef: std of the Gaussian noise added to mu(s) when stepping (in [-1, 1] action units).
        grad_norm: global gradient-norm clip (None: off).
    """

    action_spaces = ("continuous",)
    default_models = {"image": "nature_cnn", "vector": "mlp_large"}
    metric_names = ("loss",)

    def __init__(self, envs, model=None, buffer=None, *, target_sync_frequency: int = 1,
                 target_update_weight: float = 0.005, step_noise_coef: float = 0.1, grad_norm: float | None = None,
                 lr: float = 1e-3, **kwargs) -> None:
        self.target_sync_frequency = int(target_sync_frequency)
        self.target_update_weight = float(target_update_weight)
        if self.target_sync_frequency < 1 or not 0 < self.target_update_weight <= 1:
            raise UserError("agent.target_sync_frequency must be at least 1 and agent.target_update_weight in (0, 1]")
        self.step_noise_coef = float(step_noise_coef)
        self.grad_norm = None if grad_norm is None else float(grad_norm)
        super().__init__(envs, model, buffer, lr=lr, **kwargs)

    def build(self) -> None:
        n = self.n_actions
        heads = {"value": 1, "mu": n, "lower": n * (n + 1) // 2}
        self.model = self.build_model(heads, name="naf")
        self.target = self.build_model(heads, name="naf_target")
        self.target.set_weights(self.model.get_weights())
        self.optimizer = self.make_optimizer()
        self.optimizer.build(self.model.trainable_variables)
        self.updates = tf.Variable(0, dtype=tf.int64, name="updates")

    def models(self):
        return {"model": self.model, "target": self.target}

    def extra_variables(self):
        return {"updates": self.updates}

    # ----- Q(s, a) ----------------------------------------------------------------------------------
    @no_autograph
    def heads(self, model, obs: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """V(s) [batch], mu(s) in [-1, 1] [batch, n], L(s) [batch, n, n]."""
        value, mu, lower = model(obs)
        return value[:, 0], tf.tanh(mu), lower_triangular(lower, self.n_actions)

    @no_autograph
    def q(self, obs: tf.Tensor, actions: tf.Tensor) -> tf.Tensor:
        value, mu, lower = self.heads(self.model, obs)
        return value + advantage(actions, mu, lower)

    @no_autograph
    def policy(self, obs):
        return self.to_env(self.heads(self.model, obs)[1])

    @no_autograph
    def explore(self, obs: tf.Tensor) -> tf.Tensor:
        """mu(s) plus Gaussian noise, clipped to [-1, 1]."""
        noise = self.step_noise_coef * self.tf_rng.normal([self.n_envs, self.n_actions])
        return tf.clip_by_value(self.heads(self.model, obs)[1] + noise, -1.0, 1.0)

    # ----- learning ---------------------------------------------------------------------------------
    @no_autograph
    def update_step(self, obs, actions, rewards, next_obs, terminated) -> dict[str, tf.Tensor]:
        """Squared TD error towards r + gamma * (1 - terminated) * V'(s') (max_a Q' = V'); target updates every
        `target_sync_frequency` updates."""
        targets = rewards + self.gamma * (1.0 - terminated) * self.heads(self.target, next_obs)[0]
        variables = self.model.trainable_variables
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(self.q(obs, actions) - tf.stop_gradient(targets)))
        grads = tape.gradient(loss, variables)
        if self.grad_norm is not None:
            grads, _ = tf.clip_by_global_norm(grads, self.grad_norm)
        self.optimizer.apply_gradients(zip(grads, variables))
        self.updates.assign_add(1)
        tf.cond(self.updates % self.target_sync_frequency == 0, self._target_update_then_0, lambda: tf.constant(0))
        return {"loss": loss}

    @no_autograph
    def _target_update_then_0(self) -> tf.Tensor:
        soft_update(self.target.variables, self.model.variables, self.target_update_weight)
        return tf.constant(0)
