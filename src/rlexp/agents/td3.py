"""Twin Delayed DDPG (Fujimoto et al. 2018), continuous actions: DDPG plus three fixes."""
from __future__ import annotations

import tensorflow as tf

from rlexp.agents.ddpg import DDPG
from rlexp.agents.distributions import no_autograph


@no_autograph
def smoothed_target_actions(target_actions: tf.Tensor, noise: tf.Tensor, noise_clip: float) -> tf.Tensor:
    """Target policy smoothing: clip(mu'(s') + clip(noise, -c, c), -1, 1)."""
    return tf.clip_by_value(target_actions + tf.clip_by_value(noise, -noise_clip, noise_clip), -1.0, 1.0)


class TD3(DDPG):
    """TD3: two critics with the minimum as target (clipped double-Q), target policy smoothing, and
    actor + target updates every `policy_delay` critic updates.

    Args (besides `DDPG`'s):
        policy_delay: critic updates per actor (and target) update.
        policy_noise_coef: std of the target smoothing noise (in [-1, 1] action units).
        noise_clip: the smoothing noise is clipped to +-noise_clip.
    """

    n_critics = 2
    member_keys = DDPG.member_keys + ("policy_noise_coef",)
    # float32 under run.mixed_precision=auto: in bfloat16 RL Zoo's LunarLanderContinuous row learned worse on the same
    # seeds (benchmarks/results/learning.md, "bfloat16 against float32"), though Pendulum and HalfCheetah matched
    auto_bfloat16 = False

    def __init__(self, envs, model=None, buffer=None, *, policy_delay: int = 2, policy_noise_coef: float = 0.2,
                 noise_clip: float = 0.5, **kwargs) -> None:
        self.policy_delay = max(int(policy_delay), 1)
        self.policy_noise_coef, self.noise_clip = float(policy_noise_coef), float(noise_clip)
        super().__init__(envs, model, buffer, **kwargs)

    @no_autograph
    def critic_targets(self, rewards, next_obs, terminated):
        """r + gamma * (1 - terminated) * min_i Q'_i(s', smoothed mu'(s'))."""
        target_actions = self.unit_action(next_obs, self.target_actor)
        draws = self.tf_rng.normal(tf.shape(target_actions))
        noise = self.per_row(self.policy_noise_coef, draws) * draws
        next_actions = smoothed_target_actions(target_actions, noise, self.noise_clip)
        next_q = [self.q(c, next_obs, next_actions) for c in self.target_critics]
        return rewards + self.per_row(self.gamma, rewards) * (1.0 - terminated) * tf.reduce_min(tf.stack(next_q), axis=0)
