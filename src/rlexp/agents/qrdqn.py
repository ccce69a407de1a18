"""Quantile-regression DQN (Dabney et al. 2018), discrete actions: the Q-network gives N quantiles of the return
per action, Q(s, a) is their mean, and each quantile is regressed towards the target distribution
r + gamma * Z'(s', argmax_a' Q'(s', a')) by the quantile Huber loss. sb3-contrib's QRDQN is the reference."""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from rlexp.agents.distributions import no_autograph
from rlexp.agents.dqn import DQN
from rlexp.agents.quantiles import quantile_huber_loss
from rlexp.errors import UserError


class QRDQN(DQN):
    """QR-DQN: DQN's replay, epsilon-greedy exploration and target network, with a distributional head.

    Args (besides `DQN`'s, but `double`):
        n_quantiles: quantiles of the return per action (sb3-contrib's default 200).
    """

    prioritized_replay = False  # (sb3-contrib's QRDQN samples uniformly)

    def __init__(self, envs, model=None, buffer=None, *, n_quantiles: int = 200, **kwargs) -> None:
        if isinstance(n_quantiles, bool) or not float(n_quantiles).is_integer() or int(n_quantiles) < 1:
            raise UserError(f"agent.n_quantiles={n_quantiles}: use a whole number of 1 or more (sb3-contrib: 200)")
        if kwargs.get("double"):
            raise UserError("agent.double=true: QR-DQN's target takes the target network's greedy action "
                            "(sb3-contrib's); use agent=dqn agent.double=true for Double DQN")
        self.n_quantiles = int(n_quantiles)
        super().__init__(envs, model, buffer, **kwargs)

    @property
    def q_units(self) -> int:
        return self.n_quantiles * self.n_actions

    @no_autograph
    def quantiles(self, obs, network=None) -> tf.Tensor:
        """Z(s, .): [batch, n_quantiles, n_actions] (sb3-contrib's layout of the output layer)."""
        return tf.reshape((network or self.model)(obs), [-1, self.n_quantiles, self.n_actions])

    @no_autograph
    def q_values(self, obs, network=None) -> tf.Tensor:
        return tf.reduce_mean(self.quantiles(obs, network), axis=1)

    def numpy_q_values(self, outputs: np.ndarray) -> np.ndarray:
        return outputs.reshape(len(outputs), self.n_quantiles, self.n_actions).mean(axis=1)

    @no_autograph
    def _loss_and_errors(self, obs, actions, rewards, next_obs, terminated, weights=None):
        next_quantiles = self.quantiles(next_obs, self.target)
        best = tf.argmax(tf.reduce_mean(next_quantiles, axis=1), axis=-1)
        next_best = tf.gather(next_quantiles, best, axis=2, batch_dims=1)  # [batch, n_quantiles]
        gamma = self.per_row(self.gamma, rewards)
        targets = tf.stop_gradient(rewards[:, None] + (gamma * (1.0 - terminated))[:, None] * next_best)
        taken = tf.gather(self.quantiles(obs), tf.cast(actions, tf.int32), axis=2, batch_dims=1)
        losses = quantile_huber_loss(taken, targets, sum_over_quantiles=True)
        return self.row_mean(losses), losses
