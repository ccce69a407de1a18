"""Advantage Actor-Critic (Mnih et al. 2016, synchronous), discrete and continuous actions."""
from __future__ import annotations

import tensorflow as tf

from rlexp.agents.on_policy import OnPolicyAgent, compute_gae
from rlexp.agents.distributions import no_autograph


@no_autograph
def a2c_loss(log_probs: tf.Tensor, entropy: tf.Tensor, values: tf.Tensor, advantages: tf.Tensor,
             returns: tf.Tensor, entropy_coef: float, value_loss_coef: float,
             mean=tf.reduce_mean) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
    """Policy gradient -mean(log pi(a|s) A) + value_loss_coef * mean((R - V)^2) / 2 - entropy_coef * H (`mean`:
    over the rows, or each member's in a population).

    The value term is half the MSE: SB3's `vf_coef` c (plain MSE) is value_loss_coef 2c."""
    policy_loss = -mean(log_probs * tf.stop_gradient(advantages))
    value_loss = 0.5 * mean(tf.square(returns - values))
    entropy = mean(entropy)
    loss = policy_loss + value_loss_coef * value_loss - entropy_coef * entropy
    return loss, dict(policy_loss=policy_loss, value_loss=value_loss, entropy=entropy)


class A2C(OnPolicyAgent):
    """A2C: one gradient step per `n_steps` rollout on n-step (or GAE) advantages, one shared-trunk model.

    Args (besides `OnPolicyAgent`'s):
        lam: GAE lambda (1.0: plain n-step returns, as in A2C).
        entropy_coef, value_loss_coef: loss weights.
        grad_norm: global gradient-norm clip (None: off).
        normalize_advantage: standardise advantages per rollout.
        optimizer, opt_epsilon: RMSprop, as in the A2C paper and SB3; Keras adds epsilon inside the square
            root, so 1e-10 here is SB3's 1e-5 outside it.
    """

    action_spaces = ("discrete", "continuous", "multi_discrete", "multi_binary")
    recurrent_models = mixed_precision_support = float16_support = True
    population_support = True
    member_keys = ("lr", "gamma", "lam", "entropy_coef", "value_loss_coef")
    graph_env_rollouts = True  # rollouts are most of A2C's work: stepping a graph env in the graph pays

    def __init__(self, envs, model=None, buffer=None, *, n_steps: int = 5, lam: float = 1.0,
                 entropy_coef: float = 0.01, value_loss_coef: float = 0.5, grad_norm: float | None = 0.5,
                 normalize_advantage: bool = False, optimizer: str = "rmsprop", opt_epsilon: float = 1e-10,
                 **kwargs) -> None:
        self.lam = float(lam)
        self.entropy_coef, self.value_loss_coef = float(entropy_coef), float(value_loss_coef)
        self.grad_norm = None if grad_norm is None else float(grad_norm)
        self.normalize_advantage = bool(normalize_advantage)
        super().__init__(envs, model, buffer, n_steps=n_steps, optimizer=optimizer, opt_epsilon=opt_epsilon, **kwargs)

    @no_autograph
    def update(self, batch: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        advantages, returns = compute_gae(batch["rewards"], batch["values"], batch["dones"], batch["last_values"],
                                          self.gamma, self.lam)
        _, select = self.training_units(batch, [batch["actions"], advantages, returns])
        inputs, actions, advantages, returns = select(None)
        if self.normalize_advantage:
            advantages = self.standardize_rows(advantages, 1e-8)
        variables = self.trainable_variables()
        with tf.GradientTape() as tape:
            out, values = self.forward(inputs)
            log_probs, entropy = self.log_prob_entropy(out, actions)
            loss, metrics = a2c_loss(log_probs, entropy, values, advantages, returns, self.entropy_coef,
                                     self.value_loss_coef, self.row_mean)
            loss = tf.reduce_sum(loss)  # a population's members' losses summed: each gradient its own
        self.minimize(tape, loss, variables, self.grad_norm)
        return metrics
