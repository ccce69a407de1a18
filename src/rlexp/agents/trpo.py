"""Trust Region Policy Optimization (Schulman et al. 2015), discrete and continuous actions.

The actor takes natural-gradient steps (conjugate gradient on Fisher-vector products, then a
backtracking line search under a KL bound); the critic regresses returns with Adam.
"""
from __future__ import annotations

from typing import Callable

import tensorflow as tf

from rlexp.agents.on_policy import OnPolicyAgent, compute_gae, flatten_time
from rlexp.agents.distributions import no_autograph
from rlexp.errors import UserError


@no_autograph
def flat_concat(tensors: list[tf.Tensor]) -> tf.Tensor:
    return tf.concat([tf.reshape(t, [-1]) for t in tensors], axis=0)


@no_autograph
def assign_flat(variables: list[tf.Variable], flat: tf.Tensor) -> None:
    sizes = [tf.size(v) for v in variables]
    for v, part in zip(variables, tf.split(flat, sizes)):
        v.assign(tf.reshape(part, v.shape))


def conjugate_gradient(matrix_vector: Callable[[tf.Tensor], tf.Tensor], b: tf.Tensor, iterations: int,
                       residual_tolerance: float) -> tf.Tensor:
    """Solve A x = b for symmetric positive-definite A given only x -> A x."""
    x = tf.zeros_like(b)
    r, p = b, b
    r_dot_r = tf.tensordot(r, r, 1)
    for _ in tf.range(iterations):
        if r_dot_r < residual_tolerance:
            break
        z = matrix_vector(p)
        alpha = r_dot_r / tf.tensordot(p, z, 1)
        x += alpha * p
        r -= alpha * z
        new_r_dot_r = tf.tensordot(r, r, 1)
        p = r + new_r_dot_r / r_dot_r * p
        r_dot_r = new_r_dot_r
    return x


class TRPO(OnPolicyAgent):
    """TRPO with GAE; actor and critic are separate models.

    Args (besides `OnPolicyAgent`'s):
        lam: GAE lambda.
        max_kl: bound on the mean KL(old || new) of an actor step, in `kl_reduction`'s units.
        kl_reduction: a Gaussian policy's KL over its action dimensions: "mean" (SB3's TRPO: its target_kl and
            cg_damping, RL Zoo's tuned values among them, mean the same here) or "sum" (the joint
            distribution's KL, as Schulman et al.); the same for one-dimensional and discrete actions.
        cg_iterations, cg_residual_tolerance: conjugate gradient limits.
        cg_damping: added to the Fisher-vector product (F + damping I) v.
        actor_iterations: backtracking line-search steps (the step shrinks by line_search_shrink each time).
        line_search_shrink: the line search's step factor (SB3's line_search_shrinking_factor 0.8).
        critic_iterations: critic epochs per rollout, in `mini_batches` minibatches each.
        fvp_n_steps: use every n-th transition for Fisher-vector products (cheaper, as in xagents).
        entropy_coef: entropy bonus in the surrogate.
        advantage_epsilon: added to the advantage std when normalising.
    """

    action_spaces = ("discrete", "continuous")
    xla_auto_with_sde = True  # RL Zoo's gSDE Pendulum row, 10 seeds: XLA loop -160.0, plain graph -157.8 (learning.md)

    def __init__(self, envs, model=None, buffer=None, *, n_steps: int = 512, lam: float = 1.0, max_kl: float = 1e-3,
                 cg_iterations: int = 10, cg_damping: float = 1e-3, cg_residual_tolerance: float = 1e-10,
                 actor_iterations: int = 10, critic_iterations: int = 3, fvp_n_steps: int = 5,
                 entropy_coef: float = 0.0, mini_batches: int = 4, advantage_epsilon: float = 1e-8,
                 kl_reduction: str = "mean", line_search_shrink: float = 0.5, **kwargs) -> None:
        if kl_reduction not in ("mean", "sum"):
            raise UserError(f"agent.kl_reduction={kl_reduction} must be mean or sum")
        self.lam, self.max_kl, self.kl_reduction = float(lam), float(max_kl), kl_reduction
        if not 0.0 < float(line_search_shrink) < 1.0:
            raise UserError(f"agent.line_search_shrink={line_search_shrink} must be between 0 and 1 (exclusive)")
        self.line_search_shrink = float(line_search_shrink)
        self.cg_iterations, self.cg_damping = int(cg_iterations), float(cg_damping)
        self.cg_residual_tolerance = float(cg_residual_tolerance)
        self.actor_iterations, self.critic_iterations = int(actor_iterations), int(critic_iterations)
        self.fvp_n_steps, self.entropy_coef = max(int(fvp_n_steps), 1), float(entropy_coef)
        self.mini_batches, self.advantage_epsilon = int(mini_batches), float(advantage_epsilon)
        super().__init__(envs, model, buffer, n_steps=n_steps, **kwargs)
        rollout = self.n_steps * self.n_envs
        if self.mini_batches < 1 or rollout % self.mini_batches:
            raise UserError(f"agent.mini_batches={self.mini_batches} must divide the rollout size "
                            f"n_steps*n_envs={rollout}")

    def build(self) -> None:
        self.actor = self.build_model({"policy": self.policy_units}, name="actor", **self.model_kwargs())
        self.critic = self.build_model({"value": 1}, name="critic")
        self.make_log_std(self.actor)
        self.critic_optimizer = self.make_optimizer()
        self.critic_optimizer.build(self.critic.trainable_variables)

    def models(self):
        return {"actor": self.actor, "critic": self.critic}

    def optimizers(self):
        return {"critic": self.critic_optimizer}

    def actor_variables(self) -> list[tf.Variable]:
        return self.actor.trainable_variables + self.std_variables()

    @no_autograph
    def actor_out(self, obs: tf.Tensor) -> tf.Tensor:
        return self.policy_head(self.actor(obs))

    @no_autograph
    def forward(self, obs):
        return self.actor_out(obs), self.critic(obs)[:, 0]

    @no_autograph
    def value(self, obs):
        return self.critic(obs)[:, 0]

    def numpy_models(self):
        return [self.actor, self.critic]

    def numpy_forward(self, weights, obs):
        return self._mirrors[0](weights[0], obs)[0], self._mirrors[1](weights[1], obs)[0][:, 0]

    @no_autograph
    def policy_kl(self, old: tuple[tf.Tensor, ...], new: tuple[tf.Tensor, ...]) -> tf.Tensor:
        """Mean KL(old || new) over the batch, as `max_kl` bounds it (`kl_reduction`)."""
        kl = tf.reduce_mean(self.kl(old, new))
        if self.kl_reduction == "mean" and self.action_kind == "continuous":
            kl /= float(self.n_actions)
        return kl

    # ----- update ---------------------------------------------------------------------------------
    @no_autograph
    def surrogate(self, obs, actions, old_log_probs, advantages) -> tuple[tf.Tensor, tf.Tensor]:
        """(mean importance-weighted advantage + entropy bonus, policy outputs)."""
        out = self.actor_out(obs)
        log_probs, entropy = self.log_prob_entropy(out, actions)
        gain = tf.reduce_mean(tf.exp(log_probs - old_log_probs) * advantages)
        return gain + self.entropy_coef * tf.reduce_mean(entropy), out

    @no_autograph
    def fisher_vector_product(self, obs: tf.Tensor, old: tuple[tf.Tensor, ...], vector: tf.Tensor) -> tf.Tensor:
        """(F + cg_damping I) v, with F the Hessian of `policy_kl` at the current parameters."""
        variables = self.actor_variables()
        with tf.GradientTape() as outer:
            with tf.GradientTape() as inner:
                kl = self.policy_kl(old, self.dist_params(self.actor_out(obs)))
            grad_dot_v = tf.tensordot(flat_concat(inner.gradient(kl, variables)), vector, 1)
        return flat_concat(outer.gradient(grad_dot_v, variables)) + self.cg_damping * vector

    def update_actor(self, obs, actions, old_log_probs, advantages) -> dict[str, tf.Tensor]:
        variables = self.actor_variables()
        old = tuple(tf.stop_gradient(p) for p in self.dist_params(self.actor_out(obs)))
        with tf.GradientTape() as tape:
            objective, _ = self.surrogate(obs, actions, old_log_probs, advantages)
        gradient = flat_concat(tape.gradient(objective, variables))
        fvp_obs = obs[::self.fvp_n_steps]
        fvp_old = tuple(p[::self.fvp_n_steps] for p in old)
        direction = conjugate_gradient(lambda v: self.fisher_vector_product(fvp_obs, fvp_old, v), gradient,
                                       self.cg_iterations, self.cg_residual_tolerance)
        # largest step along `direction` whose quadratic KL estimate equals max_kl
        shs = 0.5 * tf.tensordot(direction, self.fisher_vector_product(fvp_obs, fvp_old, direction), 1)
        full_step = direction * tf.sqrt(self.max_kl / tf.maximum(shs, 1e-12))
        old_params = flat_concat(variables)
        accepted, kl, step_fraction = tf.constant(False), tf.constant(0.0), tf.constant(1.0)
        for _ in tf.range(self.actor_iterations):
            assign_flat(variables, old_params + step_fraction * full_step)
            new_objective, out = self.surrogate(obs, actions, old_log_probs, advantages)
            kl = self.policy_kl(old, self.dist_params(out))
            if kl <= self.max_kl and new_objective > objective:
                accepted = tf.constant(True)
                break
            step_fraction *= self.line_search_shrink
        if not accepted:
            assign_flat(variables, old_params)
            kl = tf.constant(0.0)
        return dict(surrogate=objective, kl=kl, step_accepted=tf.cast(accepted, tf.float32))

    def update_critic(self, obs, returns) -> tf.Tensor:
        size = self.n_steps * self.n_envs
        mb = size // self.mini_batches
        variables = self.critic.trainable_variables
        total = tf.constant(0.0)
        for _ in tf.range(self.critic_iterations):
            order = tf.argsort(self.tf_rng.uniform([size]))
            # the epoch's minibatches gathered at once (mini_batches divides the rollout): of a minibatch gathered
            # inside the loop, XLA computed the first layer on the whole rollout
            epoch_obs = tf.reshape(tf.gather(obs, order), [self.mini_batches, mb, *obs.shape[1:]])
            epoch_returns = tf.reshape(tf.gather(returns, order), [self.mini_batches, mb])
            for i in tf.range(self.mini_batches):
                batch_obs, batch_returns = epoch_obs[i], epoch_returns[i]
                with tf.GradientTape() as tape:
                    loss = 0.5 * tf.reduce_mean(tf.square(batch_returns - self.value(batch_obs)))
                self.critic_optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
                total += loss
        return total / float(max(self.critic_iterations * self.mini_batches, 1))

    def update(self, batch: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        advantages, returns = compute_gae(batch["rewards"], batch["values"], batch["dones"], batch["last_values"],
                                          self.gamma, self.lam)
        obs, actions = flatten_time(batch["obs"]), flatten_time(batch["actions"])
        advantages, returns = flatten_time(advantages), flatten_time(returns)
        mean, var = tf.nn.moments(advantages, axes=[0])
        advantages = (advantages - mean) / (tf.sqrt(var) + self.advantage_epsilon)
        metrics = self.update_actor(obs, actions, flatten_time(batch["log_probs"]), advantages)
        metrics["value_loss"] = self.update_critic(obs, returns)
        return metrics
