"""Deep Deterministic Policy Gradient (Lillicrap et al. 2016), continuous actions.

A deterministic tanh actor trained through a Q(s, a) critic, Gaussian exploration noise, soft target
updates. TD3 builds on it (more critics, delayed actor steps, smoothed targets). The replay, warm-up and
fused loop are `OffPolicyAgent`'s.
"""
from __future__ import annotations

import tensorflow as tf

from rlexp.agents.distributions import no_autograph
from rlexp.agents.off_policy import OffPolicyAgent
from rlexp.errors import UserError


class DDPG(OffPolicyAgent):
    """DDPG: a deterministic tanh actor trained through one Q(s, a) critic; soft target updates.

    Args (besides `OffPolicyAgent`'s):
        tau: soft target update rate.
        step_noise_coef: std of the exploration noise added to actions when stepping (in [-1, 1] units): of each
            Gaussian draw, or the sigma of the Ornstein-Uhlenbeck process.
        noise_type: 'normal' (independent draws) or 'ornstein_uhlenbeck' (temporally correlated, per env:
            x <- x - ou_theta * x * dt + sigma * sqrt(dt) * N(0, 1), dt = 0.01, as SB3's; each env's x restarts
            at 0 when its episode ends, as SB3 resets it).
        ou_theta: the Ornstein-Uhlenbeck process's pull towards 0.
        lr: actor and critic learning rate.
        jit_compile: XLA for the update step. Off: with two inter-op threads (run.tf_inter_threads=auto) the
            plain graph runs the two critics side by side, TD3 Pendulum 20k in 37-44 s vs 56-63 s with XLA.
    """

    action_spaces = ("continuous",)
    default_models = {"image": "nature_cnn", "vector": "mlp_400_300"}
    n_critics = 1
    grouped_updates = True
    episode_phases = True  # agent.train_freq_unit=episode
    population_support = True
    member_keys = ("lr", "gamma", "tau", "step_noise_coef")

    OU_DT = 1e-2

    def __init__(self, envs, model=None, buffer=None, *, tau: float = 0.005, step_noise_coef: float = 0.1,
                 noise_type: str = "normal", ou_theta: float = 0.15, train_freq: int = 1, gradient_steps: int = 1,
                 lr: float = 1e-3, jit_compile: bool = False, **kwargs) -> None:
        self.tau, self.step_noise_coef = float(tau), float(step_noise_coef)
        if noise_type not in ("normal", "ornstein_uhlenbeck"):
            raise UserError(f"agent.noise_type={noise_type!r} must be 'normal' or 'ornstein_uhlenbeck'")
        self.noise_type, self.ou_theta = noise_type, float(ou_theta)
        super().__init__(envs, model, buffer, train_freq=train_freq, gradient_steps=gradient_steps, lr=lr,
                         jit_compile=jit_compile, **kwargs)

    @property
    def resets_at_episode_ends(self) -> bool:
        """The Ornstein-Uhlenbeck noise restarts with each env's episode (`episodes_ended`)."""
        return self.noise_type == "ornstein_uhlenbeck"

    @property
    def row_blocks(self) -> bool:
        """One critic is one chain of matmuls: row blocks let two threads share it. Two critics are two
        chains already (TD3 ran 4% slower in row blocks)."""
        return self.n_critics < 2

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
        self.ou_noise = tf.Variable(tf.zeros([self.n_envs, self.n_actions]), name="ou_noise")  # per env

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

    def resume_variables(self):
        return {"ou_noise": self.ou_noise} if self.noise_type == "ornstein_uhlenbeck" else {}

    # ----- acting -----------------------------------------------------------------------------------
    @no_autograph
    def unit_action(self, obs: tf.Tensor, actor=None) -> tf.Tensor:
        """Deterministic actions in [-1, 1]."""
        return tf.tanh(self.in_row_blocks(actor or self.actor, obs))

    @no_autograph
    def policy(self, obs):
        return self.to_env(self.unit_action(obs))

    @no_autograph
    def q(self, critic, obs: tf.Tensor, actions: tf.Tensor) -> tf.Tensor:
        x = tf.concat([tf.cast(obs, tf.float32), actions], axis=-1)
        return self.in_row_blocks(critic, x)[:, 0]

    @no_autograph
    def explore(self, obs: tf.Tensor) -> tf.Tensor:
        """The actor's actions plus Gaussian or Ornstein-Uhlenbeck noise, clipped to [-1, 1]."""
        draws = self.tf_rng.normal([self.n_envs, self.n_actions])
        noise = self.per_row(self.step_noise_coef, draws) * draws
        if self.noise_type == "ornstein_uhlenbeck":
            noise = self.ou_noise - self.ou_theta * self.ou_noise * self.OU_DT + noise * self.OU_DT**0.5
            self.ou_noise.assign(noise)
        return tf.clip_by_value(self.unit_action(obs) + noise, -1.0, 1.0)

    @no_autograph
    def episodes_ended(self, dones: tf.Tensor) -> None:
        """The Ornstein-Uhlenbeck noise of the envs whose episode ended back to 0."""
        self.ou_noise.assign(tf.where(dones[:, None], tf.zeros_like(self.ou_noise), self.ou_noise))

    # ----- learning ---------------------------------------------------------------------------------
    @no_autograph
    def critic_targets(self, rewards: tf.Tensor, next_obs: tf.Tensor, terminated: tf.Tensor) -> tf.Tensor:
        """r + gamma * (1 - terminated) * Q'(s', mu'(s'))."""
        next_q = self.q(self.target_critics[0], next_obs, self.unit_action(next_obs, self.target_actor))
        return rewards + self.per_row(self.gamma, rewards) * (1.0 - terminated) * next_q

    @no_autograph
    def critic_step(self, obs, actions, rewards, next_obs, terminated) -> tf.Tensor:
        """One gradient step of the critic(s) towards `critic_targets`; counts the update."""
        targets = tf.stop_gradient(self.critic_targets(rewards, next_obs, terminated))
        critic_vars = self.trainable_variables("critic")
        with tf.GradientTape() as tape:
            critic_loss = tf.add_n([self.row_mean(tf.square(self.q(c, obs, actions) - targets)) for c in self.critics])
        self.optimizer_step(self.critic_optimizer, tape.gradient(critic_loss, critic_vars), critic_vars)
        self.updates.assign_add(1)
        return critic_loss

    @no_autograph
    def actor_step(self, obs, target_updates: bool = True) -> tf.Tensor:
        """One gradient step of the actor through the first critic, then (by default) the soft target updates."""
        actor_vars = self.trainable_variables("actor")
        with tf.GradientTape() as tape:
            actor_loss = -self.row_mean(self.q(self.critics[0], obs, self.unit_action(obs)))
        self.optimizer_step(self.actor_optimizer, tape.gradient(actor_loss, actor_vars), actor_vars)
        if target_updates:
            self.target_updates()
        return actor_loss

    @no_autograph
    def target_updates(self) -> None:
        """Soft updates of the target actor and critic(s)."""
        self.update_targets(self.target_actor.variables, self.actor.variables, self.tau)
        for target, critic in zip(self.target_critics, self.critics):
            self.update_targets(target.variables, critic.variables, self.tau)
