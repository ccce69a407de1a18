"""Truncated Quantile Critics (Kuznetsov et al. 2020), continuous actions: SAC whose critics each give N quantiles
of the return; the target pools all critics' quantiles at (s', a'), drops the largest few of each critic's share to
control overestimation, and each critic regresses its quantiles towards the rest by the quantile Huber loss; the
actor ascends the mean of all quantiles. sb3-contrib's TQC is the reference."""
from __future__ import annotations

import tensorflow as tf

from rlexp.agents.distributions import no_autograph
from rlexp.agents.quantiles import quantile_huber_loss
from rlexp.agents.sac import SAC
from rlexp.errors import UserError


class TQC(SAC):
    """TQC: SAC's actor, entropy tuning, replay and soft target updates, with distributional critics.

    Args (besides `SAC`'s):
        n_quantiles: quantiles per critic (sb3-contrib's 25).
        n_critics: critics (2).
        top_quantiles_to_drop_per_net: of the pooled n_critics x n_quantiles target quantiles, the largest
            n_critics x this many are dropped (2).
    """

    auto_bfloat16 = False

    def __init__(self, envs, model=None, buffer=None, *, n_quantiles: int = 25, n_critics: int = 2,
                 top_quantiles_to_drop_per_net: int = 2, **kwargs) -> None:
        for key, value, least in (("n_quantiles", n_quantiles, 1), ("n_critics", n_critics, 1),
                                  ("top_quantiles_to_drop_per_net", top_quantiles_to_drop_per_net, 0)):
            if isinstance(value, bool) or not float(value).is_integer() or int(value) < least:
                raise UserError(f"agent.{key}={value}: use a whole number of {least} or more")
        if int(top_quantiles_to_drop_per_net) >= int(n_quantiles):
            raise UserError(f"agent.top_quantiles_to_drop_per_net={top_quantiles_to_drop_per_net}: keep at least one "
                            f"of each critic's agent.n_quantiles={n_quantiles} (drop fewer, e.g. 2)")
        self.n_critics, self.critic_units = int(n_critics), int(n_quantiles)
        self.n_target_quantiles = self.n_critics * (int(n_quantiles) - int(top_quantiles_to_drop_per_net))
        super().__init__(envs, model, buffer, **kwargs)

    @no_autograph
    def quantiles(self, critics, obs, actions) -> tf.Tensor:
        """Z(s, a) of each critic: [batch, n_critics, n_quantiles]."""
        inputs = tf.concat([tf.cast(obs, tf.float32), actions], axis=-1)
        return tf.stack([critic(inputs) for critic in critics], axis=1)

    @no_autograph
    def critic_targets(self, rewards, next_obs, terminated, ent_coef) -> tf.Tensor:
        """r + gamma * (1 - terminated) * (z - ent_coef * log pi(a'|s')) for the smallest n_target_quantiles z of
        all target critics' quantiles at (s', a'), a' ~ pi(s'): [batch, n_target_quantiles]."""
        next_actions, next_log_prob = self.sample(next_obs)
        pooled = tf.reshape(self.quantiles(self.target_critics, next_obs, next_actions), [tf.shape(rewards)[0], -1])
        kept = tf.sort(pooled, axis=-1)[:, :self.n_target_quantiles]
        kept = kept - (self.per_row(ent_coef, next_log_prob) * next_log_prob)[:, None]
        return rewards[:, None] + (self.per_row(self.gamma, rewards) * (1.0 - terminated))[:, None] * kept

    @no_autograph
    def critic_loss(self, obs, actions, targets) -> tf.Tensor:
        """The quantile Huber loss of every critic's quantiles against the truncated targets, averaged over the
        critics, quantiles and targets (sb3-contrib's, not summed over quantiles)."""
        current = self.quantiles(self.critics, obs, actions)
        return self.row_mean(quantile_huber_loss(current, targets[:, None, :], sum_over_quantiles=False))

    @no_autograph
    def actor_q(self, obs, actions) -> tf.Tensor:
        """The mean of all critics' quantiles at (s, a)."""
        return tf.reduce_mean(self.quantiles(self.critics, obs, actions), axis=[1, 2])
