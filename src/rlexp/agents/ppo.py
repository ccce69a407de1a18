"""Proximal Policy Optimization (Schulman et al. 2017), clipped surrogate, discrete and continuous actions."""
from __future__ import annotations

import tensorflow as tf

from rlexp.agents.on_policy import OnPolicyAgent, compute_gae
from rlexp.agents.distributions import no_autograph
from rlexp.errors import UserError


@no_autograph
def clipped_surrogate(log_probs: tf.Tensor, old_log_probs: tf.Tensor, advantages: tf.Tensor, clip: float,
                      mean=tf.reduce_mean) -> tf.Tensor:
    """PPO's policy loss: -mean(min(r A, clip(r, 1-eps, 1+eps) A)) with r = pi / pi_old (`mean`: over the rows,
    or each member's in a population)."""
    ratio = tf.exp(log_probs - old_log_probs)
    clipped = tf.clip_by_value(ratio, 1.0 - clip, 1.0 + clip)
    return -mean(tf.minimum(ratio * advantages, clipped * advantages))


class PPO(OnPolicyAgent):
    """PPO with GAE, minibatch epochs in one graph call, optional value clipping and KL early stop.

    Args (besides `OnPolicyAgent`'s):
        lam: GAE lambda.
        clip_norm: surrogate clipping range (epsilon).
        clip_schedule: 'constant', or 'linear': clip_norm decays to 0 at the fit's max_steps, like RL Zoo's
            `clip_range: lin_0.2` (set per rollout).
        ppo_epochs: passes over each rollout.
        mini_batches: minibatches per pass (rollout size n_steps * n_envs must divide evenly).
        entropy_coef, value_loss_coef: loss weights.
        grad_norm: global gradient-norm clip (None: off).
        advantage_epsilon: added to the advantage std when normalising per minibatch.
        value_clip: clip the new value to +-value_clip around the old one (None: off).
        kl_threshold: stop an update at the first minibatch whose approximate KL, mean((r - 1) - log r), exceeds
            it, before that minibatch's gradient step (None: off). SB3's `target_kl` is kl_threshold / 1.5.
        kl_target: with lr_schedule=kl_adaptive, the learning rate is divided by 1.5 when an update's KL
            exceeds 2 * kl_target and multiplied by 1.5 when it is below kl_target / 2.
    """

    action_spaces = ("discrete", "continuous", "multi_discrete", "multi_binary")
    recurrent_models = mixed_precision_support = float16_support = True
    population_support = True
    member_keys = ("lr", "gamma", "lam", "clip_norm", "entropy_coef", "value_loss_coef")
    lr_schedules = ("constant", "linear", "kl_adaptive")

    def __init__(self, envs, model=None, buffer=None, *, lam: float = 0.95, clip_norm: float = 0.1,
                 clip_schedule: str = "constant", ppo_epochs: int = 4, mini_batches: int = 4, entropy_coef: float = 0.01,
                 value_loss_coef: float = 0.5, grad_norm: float | None = 0.5, advantage_epsilon: float = 1e-8,
                 value_clip: float | None = None, kl_threshold: float | None = None, kl_target: float = 0.01,
                 **kwargs) -> None:
        self.lam, self.clip_norm = float(lam), float(clip_norm)
        if clip_schedule not in ("constant", "linear"):
            raise UserError(f"agent.clip_schedule={clip_schedule!r} must be 'constant' or 'linear'")
        self.clip_schedule = clip_schedule
        self.clip_range = tf.Variable(self.clip_norm, trainable=False, name="clip_range")  # set per rollout
        self.ppo_epochs, self.mini_batches = int(ppo_epochs), int(mini_batches)
        self.entropy_coef, self.value_loss_coef = float(entropy_coef), float(value_loss_coef)
        self.grad_norm = None if grad_norm is None else float(grad_norm)
        self.advantage_epsilon = float(advantage_epsilon)
        self.value_clip = None if value_clip is None else float(value_clip)
        self.kl_threshold = None if kl_threshold is None else float(kl_threshold)
        self.kl_target = float(kl_target)
        super().__init__(envs, model, buffer, **kwargs)
        units = self.n_sequences if self.recurrent else self.n_steps * self.member_envs  # a member's rollout
        if self.mini_batches < 1 or units % self.mini_batches:
            what = (f"the number of sequences n_envs*n_steps/sequence_length={units}" if self.recurrent else
                    f"the rollout size n_steps*n_envs={units}")
            raise UserError(f"agent.mini_batches={self.mini_batches} must divide {what}")

    def schedules(self):
        if self.clip_schedule == "constant":  # the constant stays a graph constant
            return {}
        return {"clip_range": (self.clip_range,
                               lambda steps: self.clip_norm * self.schedule_fraction(self.clip_schedule, steps))}

    # ----- update ---------------------------------------------------------------------------------
    @no_autograph
    def loss(self, obs, actions, old_log_probs, advantages, returns, old_values):
        """Clipped surrogate + value loss + entropy bonus on one minibatch; returns (loss, metrics). In a
        population every term is per member ([N]), the mean over its own rows."""
        out, values = self.forward(obs)
        log_probs, entropy = self.log_prob_entropy(out, actions)
        advantages = self.standardize_rows(advantages, self.advantage_epsilon)
        clip = self.per_row(self.clip_range if self.clip_schedule != "constant" else self.clip_norm, log_probs)
        policy_loss = clipped_surrogate(log_probs, old_log_probs, advantages, clip, self.row_mean)
        value_error = tf.square(returns - values)
        if self.value_clip is not None:
            clipped_values = old_values + tf.clip_by_value(values - old_values, -self.value_clip, self.value_clip)
            value_error = tf.maximum(value_error, tf.square(returns - clipped_values))
        value_loss = 0.5 * self.row_mean(value_error)
        entropy = self.row_mean(entropy)
        loss = policy_loss + self.value_loss_coef * value_loss - self.entropy_coef * entropy
        log_ratio = log_probs - old_log_probs
        approx_kl = self.row_mean(tf.exp(log_ratio) - 1.0 - log_ratio)
        return loss, dict(policy_loss=policy_loss, value_loss=value_loss, entropy=entropy, approx_kl=approx_kl)

    @no_autograph
    def update(self, batch: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        """`ppo_epochs` passes of `mini_batches` gradient steps over one rollout (explicit `tf.while_loop`s:
        AutoGraph's conversion of this method cost ~0.5 s per run). With `kl_threshold`, as SB3's PPO: the first
        minibatch whose approximate KL exceeds it takes no gradient step and ends the update (all epochs); the
        metrics are the means over the minibatches evaluated, that one included."""
        advantages, returns = compute_gae(batch["rewards"], batch["values"], batch["dones"], batch["last_values"],
                                          self.gamma, self.lam)
        size, select = self.training_units(batch, [batch["actions"], batch["log_probs"], advantages, returns,
                                                   batch["values"]])
        mb = size // self.mini_batches
        variables = self.trainable_variables()
        keys = ("policy_loss", "value_loss", "entropy", "approx_kl")

        def minimize_then_0(tape, loss):  # a `tf.cond` branch returns a tensor
            self.minimize(tape, loss, variables, self.grad_norm)
            return tf.constant(0)

        def gradient_step(minibatch, totals):
            """The minibatch's loss and its gradient step, unless its KL exceeds `kl_threshold` (then: stop)."""
            with tf.GradientTape() as tape:
                loss, metrics = self.loss(*minibatch)
                loss = tf.reduce_sum(loss)  # a population's members' losses summed: each gradient its own
            totals = [t + metrics[k] for t, k in zip(totals, keys)]
            if self.kl_threshold is None:
                self.minimize(tape, loss, variables, self.grad_norm)
                return totals, tf.constant(False)
            stop = metrics["approx_kl"] > self.kl_threshold
            tf.cond(stop, lambda: tf.constant(0), lambda: minimize_then_0(tape, loss))
            return totals, stop

        def epoch(n_epochs, evaluated, totals, _):
            if self.mini_batches == 1:  # the minibatch is the whole rollout: its mean loss needs no shuffle
                totals, stop = gradient_step(select(None), totals)
                evaluated += 1
            else:
                draws = self.tf_rng.uniform([size])
                if self.members is not None:  # each member's rows in its own order, its own minibatches
                    order = tf.argsort(self.members.blocks(draws), axis=-1)
                    shuffled = [self.members.shuffle(x, order, self.mini_batches) for x in select(None)]
                    take = lambda i: [x[i] for x in shuffled]  # noqa: E731
                elif self.recurrent:  # minibatches of whole sequences
                    order = tf.argsort(draws)
                    take = lambda i: select(order[i * mb:(i + 1) * mb])  # noqa: E731
                else:  # the epoch's minibatches gathered at once, [mini_batches, rows, ...]: of a minibatch
                    # gathered inside the loop, XLA computed the first layer on the whole rollout (~30x slower)
                    order = tf.argsort(draws)
                    shuffled = [tf.reshape(x, tf.concat([[self.mini_batches, mb], tf.shape(x)[1:]], 0))
                                for x in select(order)]
                    take = lambda i: [x[i] for x in shuffled]  # noqa: E731

                def minibatch(i, evaluated, totals, _):
                    return (i + 1, evaluated + 1, *gradient_step(take(i), totals))

                _, evaluated, totals, stop = tf.while_loop(
                    lambda i, _, __, stop: (i < self.mini_batches) & ~stop, minibatch,
                    (tf.constant(0), evaluated, totals, tf.constant(False)))
            return n_epochs + 1, evaluated, totals, stop

        n_epochs, evaluated, totals, _ = tf.while_loop(
            lambda n, _, __, stop: (n < self.ppo_epochs) & ~stop, epoch,
            (tf.constant(0), tf.constant(0), [self.metric_zero()] * len(keys), tf.constant(False)))
        evaluated = tf.cast(evaluated, tf.float32)
        return {k: t / evaluated for k, t in zip(keys, totals)} | {"epochs": tf.cast(n_epochs, tf.float32)}

    def train_iteration(self) -> dict[str, float]:
        metrics = super().train_iteration()
        if self.lr_schedule == "kl_adaptive":
            if metrics["approx_kl"] > 2.0 * self.kl_target:
                self.adaptive_scale = max(self.adaptive_scale / 1.5, 1e-3)
            elif metrics["approx_kl"] < 0.5 * self.kl_target:
                self.adaptive_scale = min(self.adaptive_scale * 1.5, 1e2)
        return metrics
