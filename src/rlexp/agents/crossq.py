"""CrossQ (Bhatt et al. 2024), continuous actions: SAC without target networks, whose actor and critics normalise
their layers' inputs by Batch Renormalization. The critics see the batch's (s, a) and (s', a') as one joint batch,
so that their normalisation statistics cover both, and the target comes from the same forward pass. sb3-contrib's
CrossQ is the reference."""
from __future__ import annotations

from typing import Any, Sequence

import tensorflow as tf

from rlexp.agents.distributions import no_autograph
from rlexp.agents.sac import SAC
from rlexp.errors import UserError


class CrossQ(SAC):
    """CrossQ: SAC's actor and entropy tuning, critics trained on the joint batch, an actor step every
    `policy_delay` critic steps.

    Args (besides `SAC`'s, without `tau`: there are no target networks):
        policy_delay: critic steps per actor (and entropy coefficient) step (sb3-contrib's 3).
        critic_layers: the critics' hidden sizes, one per hidden dense layer of the model preset (null: the model
            preset's own); sb3-contrib's default network is [256, 256] for the actor and [1024, 1024] for the critics.
    The model preset (`mlp_batch_renorm`) holds the batch_renorm layers: their momentum, epsilon and warm-up steps.
    """

    batch_renorm_models = True
    population_support = False
    mixed_precision_support = False
    member_keys = ()
    auto_bfloat16 = False
    targets = False
    default_models = {"image": "mlp_batch_renorm", "vector": "mlp_batch_renorm"}

    def __init__(self, envs, model=None, buffer=None, *, policy_delay: int = 3,
                 critic_layers: Sequence[int] | None = (1024, 1024), lr: float = 1e-3, **kwargs: Any) -> None:
        if isinstance(policy_delay, bool) or not float(policy_delay).is_integer() or int(policy_delay) < 1:
            raise UserError(f"agent.policy_delay={policy_delay}: use a whole number of 1 or more (sb3-contrib's 3)")
        self.policy_delay = int(policy_delay)
        if critic_layers is not None and (isinstance(critic_layers, (str, int)) or not all(
                isinstance(u, int) and not isinstance(u, bool) and u > 0 for u in critic_layers)):
            raise UserError(f"agent.critic_layers={critic_layers}: use a list of layer sizes, e.g. [1024, 1024], "
                            "or null for the model preset's")
        self.critic_layers = None if critic_layers is None else [int(u) for u in critic_layers]
        if "tau" in kwargs:
            raise UserError(f"agent.tau={kwargs['tau']}: CrossQ has no target networks to update; remove it")
        super().__init__(envs, model, buffer, lr=lr, **kwargs)

    def critic_preset(self) -> dict[str, Any]:
        """The model preset with its hidden dense layers resized to `critic_layers`."""
        preset = dict(self.model_preset)
        if self.critic_layers is None:
            return preset
        layers = [dict(spec) for spec in preset.get("layers") or []]
        hidden = [spec for spec in layers if spec.get("type", "dense") == "dense" and not spec.get("output")]
        if len(hidden) != len(self.critic_layers):
            raise UserError(f"agent.critic_layers={self.critic_layers} gives {len(self.critic_layers)} sizes, but "
                            f"model={preset.get('name')} has {len(hidden)} hidden dense layers; give one size each")
        for spec, units in zip(hidden, self.critic_layers):
            spec["units"] = units
        return preset | {"layers": layers}

    def build_critic(self, name: str):
        return self.build_model({"q": self.critic_units}, name=name, preset=self.critic_preset(),
                                extra_inputs=self.n_actions)

    def make_ent_coef_optimizer(self):
        """PyTorch's Adam with its own defaults (betas 0.9, 0.999; eps 1e-8), as sb3-contrib's entropy coefficient
        has, whatever betas the actor and critics use (sb3-contrib's 0.5, 0.999)."""
        from rlexp.models.optimizers import FusedAdam

        return FusedAdam(learning_rate=self.lr, beta_1=0.9, beta_2=0.999, epsilon=1e-8, torch_epsilon=True)

    @no_autograph
    def critic_step(self, obs, actions, rewards, next_obs, terminated) -> tf.Tensor:
        """One step of the critics on half their summed squared TD errors. a' ~ pi(s') with the actor's running
        statistics; the critics then run once, in training mode, on the joint batch [(s, a); (s', a')], and the
        target r + gamma * (1 - terminated) * (min_i Q_i(s', a') - ent_coef * log pi(a'|s')) is that pass's
        second half, held constant."""
        ent_coef = tf.exp(self.log_ent_coef)
        next_actions, next_log_prob = self.sample(next_obs)
        joint_obs = tf.concat([tf.cast(obs, tf.float32), tf.cast(next_obs, tf.float32)], axis=0)
        joint_actions = tf.concat([actions, next_actions], axis=0)
        n = tf.shape(actions)[0]
        variables = self.trainable_variables("critic")
        with tf.GradientTape() as tape:
            q = [self.q(critic, joint_obs, joint_actions, training=True) for critic in self.critics]
            next_q = tf.stop_gradient(tf.reduce_min(tf.stack([values[n:] for values in q]), axis=0))
            soft_next = next_q - self.per_row(ent_coef, next_log_prob) * next_log_prob
            targets = rewards + self.per_row(self.gamma, rewards) * (1.0 - terminated) * soft_next
            loss = 0.5 * tf.add_n([self.row_mean(tf.square(values[:n] - targets)) for values in q])
        self.optimizer_step(self.critic_optimizer, tape.gradient(loss, variables), variables)
        self.updates.assign_add(1)
        return loss
