"""Proximal Policy Optimization (Schulman et al. 2017), clipped surrogate, discrete and continuous actions."""
from __future__ import annotations

import tensorflow as tf

from rlexp.agents import distributions as D
from rlexp.agents.base import OnPolicyAgent, compute_gae
from rlexp.errors import UserError


class PPO(OnPolicyAgent):
    """PPO with GAE, minibatch epochs in one graph call, optional value clipping.

    Args (besides `Agent`'s):
        n_steps: transitions per env per rollout.
        lam: GAE lambda.
        clip_norm: surrogate clipping range (epsilon).
        ppo_epochs: passes over each rollout.
        mini_batches: minibatches per pass (rollout size n_steps * n_envs must divide evenly).
        entropy_coef, value_loss_coef: loss weights.
        grad_norm: global gradient-norm clip (None: off).
        advantage_epsilon: added to the advantage std when normalising per minibatch.
        value_clip: clip the new value to +-value_clip around the old one (None: off).
        log_std_init: initial log std of the (state-independent) Gaussian policy, continuous actions.
    """

    action_spaces = ("discrete", "continuous")

    def __init__(self, envs, model=None, buffer=None, *, lam: float = 0.95, clip_norm: float = 0.1,
                 ppo_epochs: int = 4, mini_batches: int = 4, entropy_coef: float = 0.01,
                 value_loss_coef: float = 0.5, grad_norm: float | None = 0.5, advantage_epsilon: float = 1e-8,
                 value_clip: float | None = None, log_std_init: float = 0.0, **kwargs) -> None:
        self.lam, self.clip_norm = float(lam), float(clip_norm)
        self.ppo_epochs, self.mini_batches = int(ppo_epochs), int(mini_batches)
        self.entropy_coef, self.value_loss_coef = float(entropy_coef), float(value_loss_coef)
        self.grad_norm = None if grad_norm is None else float(grad_norm)
        self.advantage_epsilon = float(advantage_epsilon)
        self.value_clip = None if value_clip is None else float(value_clip)
        self.log_std_init = float(log_std_init)
        super().__init__(envs, model, buffer, **kwargs)
        rollout = self.n_steps * self.n_envs
        if self.mini_batches < 1 or rollout % self.mini_batches:
            raise UserError(f"agent.mini_batches={self.mini_batches} must divide the rollout size "
                            f"n_steps*n_envs={rollout}")

    def build(self) -> None:
        self.model = self.build_model({"policy": self.n_actions, "value": 1})
        self.optimizer = self.make_optimizer()
        self.log_std = tf.Variable(tf.fill([self.n_actions], self.log_std_init), name="log_std")
        self.optimizer.build(self.trainable_variables("model"))
        self._update_fn = tf.function(self._update)

    def extra_variables(self) -> dict[str, tf.Variable]:
        return {"log_std": self.log_std} if self.action_kind == "continuous" else {}

    def trainable_variables(self, optimizer_name: str = "model") -> list[tf.Variable]:
        extra = [self.log_std] if self.action_kind == "continuous" else []
        return self.model.trainable_variables + extra

    # ----- policy ---------------------------------------------------------------------------------
    def _log_prob_entropy(self, out: tf.Tensor, actions: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        if self.action_kind == "discrete":
            return D.categorical_log_prob(out, actions), D.categorical_entropy(out)
        return D.gaussian_log_prob(out, self.log_std, actions), D.gaussian_entropy(self.log_std, tf.shape(out)[0])

    def sample_action(self, obs):
        out, value = self.model(obs)
        if self.action_kind == "discrete":
            actions = D.categorical_sample(out, self.tf_rng)
        else:
            actions = D.gaussian_sample(out, self.log_std, self.tf_rng)
        log_probs, _ = self._log_prob_entropy(out, actions)
        return actions, log_probs, value[:, 0]

    def value(self, obs):
        return self.model(obs)[1][:, 0]

    def policy(self, obs):
        out = self.model(obs)[0]
        return tf.argmax(out, axis=-1) if self.action_kind == "discrete" else out

    # ----- update ---------------------------------------------------------------------------------
    def loss(self, obs, actions, old_log_probs, advantages, returns, old_values):
        """Clipped surrogate + value loss + entropy bonus on one minibatch; returns (loss, metrics)."""
        out, values = self.model(obs)
        values = values[:, 0]
        log_probs, entropy = self._log_prob_entropy(out, actions)
        mean, var = tf.nn.moments(advantages, axes=[0])
        advantages = (advantages - mean) / (tf.sqrt(var) + self.advantage_epsilon)
        ratio = tf.exp(log_probs - old_log_probs)
        clipped = tf.clip_by_value(ratio, 1.0 - self.clip_norm, 1.0 + self.clip_norm)
        policy_loss = -tf.reduce_mean(tf.minimum(ratio * advantages, clipped * advantages))
        value_error = tf.square(returns - values)
        if self.value_clip is not None:
            clipped_values = old_values + tf.clip_by_value(values - old_values, -self.value_clip, self.value_clip)
            value_error = tf.maximum(value_error, tf.square(returns - clipped_values))
        value_loss = 0.5 * tf.reduce_mean(value_error)
        entropy = tf.reduce_mean(entropy)
        loss = policy_loss + self.value_loss_coef * value_loss - self.entropy_coef * entropy
        approx_kl = tf.reduce_mean((ratio - 1.0) - (log_probs - old_log_probs))
        return loss, dict(policy_loss=policy_loss, value_loss=value_loss, entropy=entropy, approx_kl=approx_kl)

    def _update(self, batch: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        advantages, returns = compute_gae(batch["rewards"], batch["values"], batch["dones"], batch["last_values"],
                                          self.gamma, self.lam)
        flat = lambda x: tf.reshape(x, tf.concat([[-1], tf.shape(x)[2:]], 0))
        data = [flat(batch[k]) for k in ("obs", "actions", "log_probs")] + [flat(advantages), flat(returns),
                                                                              flat(batch["values"])]
        size = self.n_steps * self.n_envs
        mb = size // self.mini_batches
        variables = self.trainable_variables()
        totals = {k: tf.constant(0.0) for k in ("policy_loss", "value_loss", "entropy", "approx_kl")}
        for _ in tf.range(self.ppo_epochs):
            order = tf.argsort(self.tf_rng.uniform([size]))
            for start in tf.range(0, size, mb):
                idx = order[start:start + mb]
                with tf.GradientTape() as tape:
                    loss, metrics = self.loss(*[tf.gather(x, idx) for x in data])
                grads = tape.gradient(loss, variables)
                if self.grad_norm is not None:
                    grads, _ = tf.clip_by_global_norm(grads, self.grad_norm)
                self.optimizer.apply_gradients(zip(grads, variables))
                totals = {k: totals[k] + metrics[k] for k in totals}
        n = tf.cast(self.ppo_epochs * self.mini_batches, tf.float32)
        return {k: v / n for k, v in totals.items()}

    def train_iteration(self) -> dict[str, float]:
        metrics = self._update_fn(self.collect())
        return {k: float(v) for k, v in metrics.items()}
