"""Soft Actor-Critic (Haarnoja et al. 2018, with the automatic entropy tuning of Haarnoja et al. 2018b),
continuous actions: a squashed Gaussian policy, twin critics with the minimum as target, an entropy bonus
whose coefficient is learned towards a target entropy (or fixed)."""
from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

from rlexp.agents import distributions as D
from rlexp.agents.distributions import no_autograph
from rlexp.agents.off_policy import OffPolicyAgent
from rlexp.errors import UserError

LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0


@no_autograph
def squashed_gaussian(mean: tf.Tensor, log_std: tf.Tensor, noise: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """a = tanh(u), u = mean + std * noise, and its log-density by the change of variables:
    log pi(a) = log N(u; mean, std) - sum_i log(1 - tanh(u_i)^2) (+1e-6 inside the log, as SB3 and CleanRL)."""
    u = mean + tf.exp(log_std) * noise
    action = tf.tanh(u)
    log_prob = D.gaussian_log_prob(mean, log_std, u)
    return action, log_prob - tf.reduce_sum(tf.math.log(1.0 - tf.square(action) + 1e-6), axis=-1)


class SAC(OffPolicyAgent):
    """SAC: maximise return + ent_coef * entropy with a tanh-squashed Gaussian actor and two critics.

    Args (besides `OffPolicyAgent`'s):
        tau: soft target update rate of the critics.
        lr: actor, critic and entropy-coefficient learning rate.
        ent_coef: 'auto' (learned, starting at `init_ent_coef`) or a fixed coefficient.
        init_ent_coef: the learned coefficient's initial value.
        target_entropy: 'auto' (-number of action dimensions) or a number.
        use_sde: generalised state-dependent exploration (Raffin et al. 2022, as SB3's SAC): the Gaussian's
            variance is the actor's last hidden features squared times a learned [features, actions] matrix of
            stds (from `log_std_init`), means clipped to +-`clip_mean`; when stepping, the noise is the features times a
            random matrix per env, drawn at the start of each update phase's `train_freq` env steps and every
            `sde_sample_freq` steps within it (-1: once a phase), as SB3's collect_rollouts draws it.
        use_expln: gSDE's stds from their logs by SB3's expln (log1p(x) + 1 above 0) instead of exp.
        clip_mean: gSDE's means clipped to +-clip_mean (SB3's Hardtanh; 0: not clipped).
    """

    action_spaces = ("continuous",)
    default_models = {"image": "nature_cnn", "vector": "mlp_large"}
    grouped_updates = True
    episode_phases = True  # agent.train_freq_unit=episode
    population_support = True
    member_keys = ("lr", "gamma", "tau")
    auto_bfloat16 = True  # bfloat16 vs float32, same seeds: benchmarks/results/learning.md

    def __init__(self, envs, model=None, buffer=None, *, tau: float = 0.005, lr: float = 3e-4,
                 ent_coef: float | str = "auto", init_ent_coef: float = 1.0, target_entropy: float | str = "auto",
                 use_sde: bool = False, sde_sample_freq: int = -1, log_std_init: float = -3.0,
                 use_expln: bool = False, clip_mean: float = 2.0, train_freq: int = 1, gradient_steps: int = 1,
                 **kwargs) -> None:
        self.tau = float(tau)
        self.sde, self.log_std_init, self.expln = bool(use_sde), float(log_std_init), bool(use_expln)
        self.clip_mean = float(clip_mean)
        self.sde_sample_freq = int(sde_sample_freq) if int(sde_sample_freq) > 0 else int(train_freq)
        self.sde_phase = int(train_freq)  # env steps between update phases: each starts with fresh noise
        self.learn_ent_coef = ent_coef == "auto"
        try:
            start = float(init_ent_coef if self.learn_ent_coef else ent_coef)
            self.target_entropy_option = target_entropy if target_entropy == "auto" else float(target_entropy)
        except (TypeError, ValueError):
            raise UserError(f"agent.ent_coef={ent_coef!r} / agent.target_entropy={target_entropy!r} must be "
                            "'auto' or a number") from None
        if not start > 0:
            raise UserError(f"agent.ent_coef / init_ent_coef must be positive, got {start}")
        self.initial_log_ent_coef = math.log(start)
        super().__init__(envs, model, buffer, train_freq=train_freq, gradient_steps=gradient_steps, lr=lr, **kwargs)
        self.target_entropy = (-float(self.n_actions) if self.target_entropy_option == "auto"
                               else self.target_entropy_option)

    n_critics, critic_units = 2, 1  # twin critics, one value each

    def build(self) -> None:
        if self.sde:  # means, and the last hidden features the noise is made from
            self.actor = self.build_model({"policy": self.n_actions}, name="actor", latent_of="policy")
            shape = [int(self.actor.outputs[-1].shape[-1]), self.n_actions]
            self.log_std = tf.Variable(tf.fill(shape, self.log_std_init), name="log_std")
            self.sde_noise = tf.Variable(tf.zeros([self.n_envs, *shape]), name="sde_noise")  # one matrix per env
            self.sde_steps = tf.Variable(0, dtype=tf.int64, name="sde_steps")
        else:
            self.actor = self.build_model({"policy": 2 * self.n_actions}, name="actor")  # means and log stds

        self.critics = [self.build_critic(f"critic{i}") for i in range(self.n_critics)]
        self.target_critics = [self.build_critic(f"target_critic{i}") for i in range(self.n_critics * self.targets)]
        for target, critic in zip(self.target_critics, self.critics):
            target.set_weights(critic.get_weights())
        members = [] if self.members is None else [self.members.count]  # a population's: one per member
        self.log_ent_coef = tf.Variable(tf.fill(members, self.initial_log_ent_coef), name="log_ent_coef")
        self.actor_optimizer, self.critic_optimizer = self.make_optimizer(), self.make_optimizer()
        self.actor_optimizer.build(self.trainable_variables("actor"))
        self.critic_optimizer.build(self.trainable_variables("critic"))
        if self.learn_ent_coef:
            self.ent_coef_optimizer = self.make_ent_coef_optimizer()
            self.ent_coef_optimizer.build([self.log_ent_coef])
        self.updates = tf.Variable(0, dtype=tf.int64, name="updates")

    targets = True  # target critics, soft-updated by `tau` (CrossQ has none)

    def build_critic(self, name: str):
        """One Q(s, a) critic with `critic_units` outputs."""
        return self.build_model({"q": self.critic_units}, name=name, extra_inputs=self.n_actions)

    def make_ent_coef_optimizer(self):
        return self.make_optimizer()

    def models(self):
        names = {"actor": self.actor}
        for i, critic in enumerate(self.critics):
            names[f"critic{i}"] = critic
        for i, target in enumerate(self.target_critics):
            names[f"target_critic{i}"] = target
        return names

    def optimizers(self):
        optimizers = {"actor": self.actor_optimizer, "critic": self.critic_optimizer}
        return optimizers | ({"ent_coef": self.ent_coef_optimizer} if self.learn_ent_coef else {})

    def trainable_variables(self, optimizer_name: str) -> list[tf.Variable]:
        if optimizer_name == "actor":
            return self.actor.trainable_variables + ([self.log_std] if self.sde else [])
        if optimizer_name == "ent_coef":
            return [self.log_ent_coef]
        return [v for critic in self.critics for v in critic.trainable_variables]

    def extra_variables(self):
        return {"updates": self.updates, "log_ent_coef": self.log_ent_coef} | (
            {"log_std": self.log_std} if self.sde else {})

    def resume_variables(self):
        return {"sde_noise": self.sde_noise, "sde_steps": self.sde_steps} if self.sde else {}

    # ----- the policy -------------------------------------------------------------------------------
    @no_autograph
    def mean_log_std(self, obs: tf.Tensor, training: bool = False) -> tuple[tf.Tensor, tf.Tensor]:
        mean, log_std = tf.split(self.actor(obs, training=training), 2, axis=-1)
        return mean, tf.clip_by_value(log_std, LOG_STD_MIN, LOG_STD_MAX)

    @no_autograph
    def sde_params(self, obs: tf.Tensor, training: bool = False) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """gSDE: means (clipped to +-clip_mean), features, and each action's log std: var_k = sum_j f_j^2 std_jk^2."""
        mean, features = self.actor(obs, training=training)
        variance = tf.matmul(tf.square(features), tf.square(D.sde_std(self.log_std, self.expln)))
        if self.clip_mean > 0:
            mean = tf.clip_by_value(mean, -self.clip_mean, self.clip_mean)
        return mean, features, 0.5 * tf.math.log(variance + 1e-6)

    @no_autograph
    def sample(self, obs: tf.Tensor, rng: tf.random.Generator | None = None,
               training: bool = False) -> tuple[tf.Tensor, tf.Tensor]:
        """Actions in [-1, 1] drawn from the squashed Gaussian (with `rng`, else `tf_rng`), with their
        log-probabilities (with gSDE, one noise matrix for the whole batch, drawn anew on each call and
        differentiable in the stds). `training`: the actor's batch_renorm layers learn from `obs` (CrossQ)."""
        rng = self.tf_rng if rng is None else rng
        if not self.sde:
            mean, log_std = self.mean_log_std(obs, training)
            return squashed_gaussian(mean, log_std, rng.normal(tf.shape(mean)))
        mean, features, log_std = self.sde_params(obs, training)
        noise = tf.matmul(features, D.sde_std(self.log_std, self.expln) * rng.normal(tf.shape(self.log_std)))
        return squashed_gaussian(mean, log_std, noise * tf.exp(-log_std))

    @no_autograph
    def explore(self, obs: tf.Tensor) -> tf.Tensor:
        if not self.sde:
            return self.sample(obs)[0]
        step_in_phase = self.sde_steps % self.sde_phase
        tf.cond(step_in_phase % self.sde_sample_freq == 0, self._resample_sde_noise_then_0, lambda: tf.constant(0))
        self.sde_steps.assign_add(1)
        mean, features, _ = self.sde_params(obs)
        return tf.tanh(mean + tf.einsum("nd,nda->na", features, self.sde_noise))

    @no_autograph
    def _resample_sde_noise_then_0(self) -> tf.Tensor:
        self.sde_noise.assign(D.sde_std(self.log_std, self.expln) * self.tf_rng.normal(tf.shape(self.sde_noise)))
        return tf.constant(0)

    @no_autograph
    def policy(self, obs):
        mean = self.sde_params(obs)[0] if self.sde else self.mean_log_std(obs)[0]
        return self.to_env(tf.tanh(mean))

    @no_autograph
    def sample_policy(self, obs, rng):
        return self.to_env(self.sample(obs, rng)[0])

    @no_autograph
    def q(self, critic, obs: tf.Tensor, actions: tf.Tensor, training: bool = False) -> tf.Tensor:
        return critic(tf.concat([tf.cast(obs, tf.float32), actions], axis=-1), training=training)[:, 0]

    # ----- learning ---------------------------------------------------------------------------------
    @no_autograph
    def critic_targets(self, rewards, next_obs, terminated, ent_coef) -> tf.Tensor:
        """r + gamma * (1 - terminated) * (min_i Q'_i(s', a') - ent_coef * log pi(a'|s')), a' ~ pi(s')."""
        next_actions, next_log_prob = self.sample(next_obs)
        next_q = tf.minimum(*[self.q(c, next_obs, next_actions) for c in self.target_critics])
        entropy_term = self.per_row(ent_coef, next_log_prob) * next_log_prob
        return rewards + self.per_row(self.gamma, rewards) * (1.0 - terminated) * (next_q - entropy_term)

    @no_autograph
    def critic_loss(self, obs, actions, targets) -> tf.Tensor:
        """Half the critics' summed squared TD errors (SB3's loss)."""
        return 0.5 * tf.add_n([self.row_mean(tf.square(self.q(c, obs, actions) - targets)) for c in self.critics])

    @no_autograph
    def actor_q(self, obs, actions) -> tf.Tensor:
        """The value the actor ascends: the smaller of the two critics'."""
        return tf.minimum(*[self.q(c, obs, actions) for c in self.critics])

    @no_autograph
    def critic_step(self, obs, actions, rewards, next_obs, terminated) -> tf.Tensor:
        """One gradient step of the critics on `critic_loss`."""
        ent_coef = tf.exp(self.log_ent_coef)
        targets = tf.stop_gradient(self.critic_targets(rewards, next_obs, terminated, ent_coef))
        variables = self.trainable_variables("critic")
        with tf.GradientTape() as tape:
            loss = self.critic_loss(obs, actions, targets)
        self.optimizer_step(self.critic_optimizer, tape.gradient(loss, variables), variables)
        self.updates.assign_add(1)
        return loss

    @no_autograph
    def actor_step(self, obs, target_updates: bool = True) -> tf.Tensor:
        """One actor step on mean(ent_coef * log pi(a|s) - actor_q(s, a)), then the entropy coefficient's
        step on -log(ent_coef) * (log pi(a|s) + target_entropy) with the same samples, and (by default) the
        critics' soft target updates."""
        ent_coef = tf.exp(self.log_ent_coef)  # this step's coefficient, before its own update
        variables = self.trainable_variables("actor")
        with tf.GradientTape() as tape:
            actions, log_prob = self.sample(obs, training=True)
            loss = self.row_mean(self.per_row(ent_coef, log_prob) * log_prob - self.actor_q(obs, actions))
        self.optimizer_step(self.actor_optimizer, tape.gradient(loss, variables), variables)
        if self.learn_ent_coef:
            with tf.GradientTape() as tape:
                log_ent_coef = self.per_row(self.log_ent_coef, log_prob)
                ent_coef_loss = -self.row_mean(log_ent_coef * tf.stop_gradient(log_prob + self.target_entropy))
            grads = [tape.gradient(ent_coef_loss, self.log_ent_coef)]
            self.optimizer_step(self.ent_coef_optimizer, grads, [self.log_ent_coef])
        if target_updates:
            self.target_updates()
        return loss

    @no_autograph
    def target_updates(self) -> None:
        for target, critic in zip(self.target_critics, self.critics):
            self.update_targets(target.variables, critic.variables, self.tau)

    def train_iteration(self) -> dict[str, float]:
        metrics = super().train_iteration()
        if not metrics:
            return metrics
        log_ent_coef = self.log_ent_coef.numpy()
        if self.members is None:
            return metrics | {"ent_coef": math.exp(float(log_ent_coef))}
        return metrics | {"ent_coef": np.exp(log_ent_coef.astype(np.float64))}  # one per member
