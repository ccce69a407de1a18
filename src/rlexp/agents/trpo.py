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
    population_support = True
    member_keys = ("lr", "gamma", "lam", "entropy_coef")  # lr: the critic's
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
        rollout = self.n_steps * self.member_envs  # a member's rollout
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
        kl = self.row_mean(self.kl(old, new))  # a population's: each member's
        if self.kl_reduction == "mean" and self.action_kind == "continuous":
            kl /= float(self.n_actions)
        return kl

    # ----- update ---------------------------------------------------------------------------------
    @no_autograph
    def surrogate(self, obs, actions, old_log_probs, advantages) -> tuple[tf.Tensor, tf.Tensor]:
        """(mean importance-weighted advantage + entropy bonus, policy outputs)."""
        out = self.actor_out(obs)
        log_probs, entropy = self.log_prob_entropy(out, actions)
        gain = self.row_mean(tf.exp(log_probs - old_log_probs) * advantages)
        return gain + self.entropy_coef * self.row_mean(entropy), out

    @no_autograph
    def fisher_vector_product(self, obs: tf.Tensor, old: tuple[tf.Tensor, ...], vector: tf.Tensor) -> tf.Tensor:
        """(F + cg_damping I) v, with F the Hessian of `policy_kl` at the current parameters."""
        variables = self.actor_variables()
        if self.members is not None:  # each member's Hessian-vector product: the members' KLs summed
            with tf.GradientTape() as outer:
                with tf.GradientTape() as inner:
                    kl = tf.reduce_sum(self.policy_kl(old, self.dist_params(self.actor_out(obs))))
                grad_dot_v = tf.reduce_sum(self.members.dot(self.members.flat(inner.gradient(kl, variables)), vector))
            return self.members.flat(outer.gradient(grad_dot_v, variables)) + self.cg_damping * vector
        with tf.GradientTape() as outer:
            with tf.GradientTape() as inner:
                kl = self.policy_kl(old, self.dist_params(self.actor_out(obs)))
            grad_dot_v = tf.tensordot(flat_concat(inner.gradient(kl, variables)), vector, 1)
        return flat_concat(outer.gradient(grad_dot_v, variables)) + self.cg_damping * vector

    def update_actor(self, obs, actions, old_log_probs, advantages) -> dict[str, tf.Tensor]:
        if self.members is not None:
            return self.update_members_actors(obs, actions, old_log_probs, advantages)
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

    def update_members_actors(self, obs, actions, old_log_probs, advantages) -> dict[str, tf.Tensor]:
        """`update_actor` for a population: each member's natural gradient, step and line search its own (a member
        keeps the first step fraction it accepts while the others search on)."""
        members, variables = self.members, self.actor_variables()
        old = tuple(tf.stop_gradient(p) for p in self.dist_params(self.actor_out(obs)))
        with tf.GradientTape() as tape:
            objective, _ = self.surrogate(obs, actions, old_log_probs, advantages)
            summed = tf.reduce_sum(objective)  # each member's gradient its own
        gradient = members.flat(tape.gradient(summed, variables))
        every = lambda x: members.unblock(members.blocks(x)[:, ::self.fvp_n_steps])  # noqa: E731  (each member's)
        fvp_obs, fvp_old = every(obs), tuple(every(p) for p in old)
        direction = members.conjugate_gradient(lambda v: self.fisher_vector_product(fvp_obs, fvp_old, v), gradient,
                                               self.cg_iterations, self.cg_residual_tolerance)
        shs = 0.5 * members.dot(direction, self.fisher_vector_product(fvp_obs, fvp_old, direction))
        full_step = direction * tf.sqrt(self.max_kl / tf.maximum(shs, 1e-12))[:, None]
        old_params = members.flat(variables)
        accepted = tf.zeros([members.count], tf.bool)
        kl, step_fraction = tf.zeros([members.count]), tf.ones([members.count])
        for _ in tf.range(self.actor_iterations):
            members.assign_flat(variables, old_params + step_fraction[:, None] * full_step)
            new_objective, out = self.surrogate(obs, actions, old_log_probs, advantages)
            new_kl = self.policy_kl(old, self.dist_params(out))
            kl = tf.where(accepted, kl, new_kl)
            accepted = accepted | ((new_kl <= self.max_kl) & (new_objective > objective))
            if tf.reduce_all(accepted):
                break
            step_fraction = tf.where(accepted, step_fraction, step_fraction * self.line_search_shrink)
        accepted &= members.active > 0  # a member that accepted none, or has stopped, keeps its weights
        step_fraction = tf.where(accepted, step_fraction, 0.0)
        members.assign_flat(variables, old_params + step_fraction[:, None] * full_step)
        kl = tf.where(accepted, kl, 0.0)
        return dict(surrogate=objective, kl=kl, step_accepted=tf.cast(accepted, tf.float32))

    def update_critic(self, obs, returns) -> tf.Tensor:
        size = self.n_steps * self.n_envs
        mb = size // self.mini_batches
        variables = self.critic.trainable_variables
        total = self.metric_zero()
        for _ in tf.range(self.critic_iterations):
            draws = self.tf_rng.uniform([size])
            if self.members is not None:  # each member's rows in its own order, its own minibatches
                order = tf.argsort(self.members.blocks(draws), axis=-1)
                epoch_obs = self.members.shuffle(obs, order, self.mini_batches)
                epoch_returns = self.members.shuffle(returns, order, self.mini_batches)
            else:
                order = tf.argsort(draws)
                # the epoch's minibatches gathered at once (mini_batches divides the rollout): of a minibatch
                # gathered inside the loop, XLA computed the first layer on the whole rollout
                epoch_obs = tf.reshape(tf.gather(obs, order), [self.mini_batches, mb, *obs.shape[1:]])
                epoch_returns = tf.reshape(tf.gather(returns, order), [self.mini_batches, mb])
            for i in tf.range(self.mini_batches):
                batch_obs, batch_returns = epoch_obs[i], epoch_returns[i]
                with tf.GradientTape() as tape:
                    loss = 0.5 * self.row_mean(tf.square(batch_returns - self.value(batch_obs)))
                    summed = tf.reduce_sum(loss)  # a population's members' losses: each gradient its own
                if self.members is not None:
                    self.members_minimize(tape.gradient(summed, variables), variables, None, self.critic_optimizer)
                else:
                    self.critic_optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
                total += loss
        return total / float(max(self.critic_iterations * self.mini_batches, 1))

    def update(self, batch: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        advantages, returns = compute_gae(batch["rewards"], batch["values"], batch["dones"], batch["last_values"],
                                          self.gamma, self.lam)
        rows = flatten_time if self.members is None else self.members.member_major  # a population's: member-major
        obs, actions = rows(batch["obs"]), rows(batch["actions"])
        advantages, returns = rows(advantages), rows(returns)
        advantages = self.standardize_rows(advantages, self.advantage_epsilon)
        metrics = self.update_actor(obs, actions, rows(batch["log_probs"]), advantages)
        metrics["value_loss"] = self.update_critic(obs, returns)
        return metrics
