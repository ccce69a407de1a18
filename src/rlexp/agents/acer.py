"""Actor-Critic with Experience Replay (Wang et al. 2017), discrete actions.

Each graph call collects an on-policy rollout, learns from it, stores it, then learns from a
Poisson(replay_ratio) number of stored rollouts: Retrace Q targets, truncated importance weights with
bias correction, and an optional trust region around an exponential moving average of the policy.
"""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from rlexp.agents import distributions as D
from rlexp.agents.on_policy import OnPolicyAgent, flatten_time
from rlexp.errors import UserError


def retrace_targets(rewards: tf.Tensor, dones: tf.Tensor, q_actions: tf.Tensor, values: tf.Tensor,
                    rho_bar: tf.Tensor, last_values: tf.Tensor, gamma: float) -> tf.Tensor:
    """Retrace Q targets over [T, N]: Q_ret(t) = r_t + gamma (1 - done_t) Q'(t+1), where
    Q'(t+1) = rho_bar(t+1) (Q_ret(t+1) - Q(t+1, a)) + V(t+1) and Q'(T) = V(s_T)."""
    n_steps = tf.shape(rewards)[0]
    targets = tf.TensorArray(tf.float32, n_steps)
    q_ret = last_values
    for t in tf.range(n_steps - 1, -1, -1):
        q_ret = rewards[t] + gamma * q_ret * (1.0 - dones[t])
        targets = targets.write(t, q_ret)
        q_ret = rho_bar[t] * (q_ret - q_actions[t]) + values[t]
    return targets.stack()


def trust_region_projection(g: tf.Tensor, k: tf.Tensor, delta: float, epsilon: float = 1e-6) -> tf.Tensor:
    """ACER's linearised KL constraint: g - max(0, (k.g - delta) / |k|^2) k, per row."""
    scale = tf.nn.relu((tf.reduce_sum(k * g, axis=-1) - delta) / (tf.reduce_sum(tf.square(k), axis=-1) + epsilon))
    return g - scale[..., None] * k


class ACER(OnPolicyAgent):
    """ACER with a shared model (policy logits and Q-values heads) and an averaged copy of it.

    Args (besides `OnPolicyAgent`'s):
        buffer: a `RolloutBuffer` of whole rollouts.
        ema_alpha: decay of the average policy network (average = ema_alpha * average + (1 - ema_alpha) * model).
        replay_ratio: mean of the Poisson number of replayed rollouts per on-policy rollout.
        importance_c: truncation of the importance weights rho = pi / mu.
        delta: trust region bound; trust_region: use it.
        epsilon: numerical floor in probabilities and ratios.
        entropy_coef, value_loss_coef: loss weights; grad_norm: global gradient-norm clip.
    """

    action_spaces = ("discrete",)
    off_policy = True
    jit_update = False  # the update stores and samples rollouts through NumPy; `learn` is compiled instead
    numpy_acting = False  # its rollout also records the behaviour policy's probabilities (graph rollout)

    def __init__(self, envs, model=None, buffer=None, *, n_steps: int = 20, ema_alpha: float = 0.99,
                 replay_ratio: float = 4, importance_c: float = 10.0, delta: float = 1.0, epsilon: float = 1e-6,
                 trust_region: bool = True, entropy_coef: float = 0.01, value_loss_coef: float = 0.5,
                 grad_norm: float | None = 10.0, **kwargs) -> None:
        if buffer is None:
            from rlexp.buffers import RolloutBuffer

            buffer = RolloutBuffer()
        self.ema_alpha, self.replay_ratio = float(ema_alpha), float(replay_ratio)
        self.importance_c, self.delta, self.epsilon = float(importance_c), float(delta), float(epsilon)
        self.trust_region = bool(trust_region)
        self.entropy_coef, self.value_loss_coef = float(entropy_coef), float(value_loss_coef)
        self.grad_norm = None if grad_norm is None else float(grad_norm)
        for key in ("normalize_obs", "normalize_reward"):
            if kwargs.get(key):  # stored rollouts would mix statistics from different times
                raise UserError(f"agent.{key}=true is not supported by ACER, which replays stored rollouts; "
                                "leave it false")
        super().__init__(envs, model, buffer, n_steps=n_steps, **kwargs)

    def build(self) -> None:
        heads = {"policy": self.n_actions, "q": self.n_actions}
        self.model = self.build_model(heads)
        self.average = self.build_model(heads, name="average")
        self.average.set_weights(self.model.get_weights())
        self.optimizer = self.make_optimizer()
        self.optimizer.build(self.model.trainable_variables)

    def models(self):
        return {"model": self.model, "average": self.average}

    def forward(self, obs):
        logits, q = self.model(obs)
        return logits, tf.reduce_sum(tf.nn.softmax(logits) * q, axis=-1)

    def step_dtypes(self):
        return dict(actions=tf.int64, values=tf.float32, mu=tf.float32)

    def sample_action(self, obs):
        logits, q = self.model(obs)
        probs = tf.nn.softmax(logits)
        return dict(actions=D.categorical_sample(logits, self.tf_rng), values=tf.reduce_sum(probs * q, axis=-1),
                    mu=probs)

    # ----- learning ---------------------------------------------------------------------------------
    def learn(self, obs, actions, rewards, dones, mu) -> dict[str, tf.Tensor]:
        """One gradient step on a rollout: obs [T+1, N, ...], actions/rewards/dones [T, N], mu [T, N, A]."""
        n_steps, n_envs = self.n_steps, self.n_envs
        flat_obs = flatten_time(obs)
        average_probs = tf.reshape(tf.nn.softmax(self.average(flat_obs)[0]), [n_steps + 1, n_envs, -1])[:-1]
        variables = self.model.trainable_variables
        with tf.GradientTape(persistent=True) as tape:
            logits, q = self.model(flat_obs)
            probs = tf.nn.softmax(logits)
            probs, q = (tf.reshape(x, [n_steps + 1, n_envs, -1]) for x in (probs, q))
            values = tf.reduce_sum(probs * q, axis=-1)
            f, q_t, v_t = probs[:-1], q[:-1], values[:-1]
            q_a = tf.gather(q_t, actions, batch_dims=2)
            f_a = tf.gather(f, actions, batch_dims=2)
            rho = f / (mu + self.epsilon)
            rho_a = tf.gather(rho, actions, batch_dims=2)
            # Retrace truncates the importance weights at 1, the policy gradient at importance_c
            q_ret = tf.stop_gradient(retrace_targets(rewards, dones, q_a, v_t, tf.minimum(1.0, rho_a), values[-1],
                                                     self.gamma))
            advantage = tf.stop_gradient((q_ret - v_t) * tf.minimum(self.importance_c, rho_a))
            policy_loss = -tf.reduce_mean(tf.math.log(f_a + self.epsilon) * advantage)
            # bias correction for the truncated weights, summed over all actions under the current policy
            correction = tf.stop_gradient(tf.nn.relu(1.0 - self.importance_c / (rho + self.epsilon)) * f
                                          * (q_t - v_t[..., None]))
            bias_loss = -tf.reduce_mean(tf.reduce_sum(correction * tf.math.log(f + self.epsilon), axis=-1))
            entropy = tf.reduce_mean(-tf.reduce_sum(f * tf.math.log(f + self.epsilon), axis=-1))
            actor_loss = policy_loss + bias_loss - self.entropy_coef * entropy
            value_loss = 0.5 * tf.reduce_mean(tf.square(q_ret - q_a))
            weighted_value_loss = self.value_loss_coef * value_loss  # on the tape: the trust-region path needs it
            loss = actor_loss + weighted_value_loss
        if self.trust_region:
            batch = float(n_steps * n_envs)
            g = -tape.gradient(actor_loss, f) * batch  # ascent direction per sample, w.r.t. the probabilities
            k = -average_probs / (f + self.epsilon)  # gradient of KL(average || current) w.r.t. the probabilities
            g = trust_region_projection(g, k, self.delta, self.epsilon)
            grads = [a if b is None else (b if a is None else a + b) for a, b in zip(
                tape.gradient(f, variables, output_gradients=-g / batch),
                tape.gradient(weighted_value_loss, variables))]
        else:
            grads = tape.gradient(loss, variables)
        del tape
        grads = [tf.zeros_like(v) if g is None else g for g, v in zip(grads, variables)]
        if self.grad_norm is not None:
            grads, _ = tf.clip_by_global_norm(grads, self.grad_norm)
        self.optimizer.apply_gradients(zip(grads, variables))
        for avg, var in zip(self.average.variables, self.model.variables):
            avg.assign(self.ema_alpha * avg + (1.0 - self.ema_alpha) * var)
        return dict(policy_loss=policy_loss, value_loss=value_loss, entropy=entropy)

    def _numpy_store(self, obs, actions, rewards, dones, mu) -> np.int64:
        """Store the rollout; draw how many stored rollouts to replay now."""
        self.buffer.add(obs=obs, actions=actions, rewards=rewards, dones=dones, mu=mu)
        return np.int64(self.rng.poisson(self.replay_ratio) if self.buffer.ready else 0)

    def _numpy_sample(self):
        rollout = self.buffer.sample()
        return [rollout[k] for k in self.buffer.KEYS]

    def update(self, batch: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        obs = tf.concat([batch["obs"], batch["last_obs"][None]], axis=0)
        data = [obs, batch["actions"], batch["rewards"], batch["dones"], batch["mu"]]
        if not hasattr(self, "_learn_fn"):
            self._learn_fn = tf.function(self.learn, jit_compile=self.jit_compile)
        metrics = self._learn_fn(*data)
        replays = tf.numpy_function(self._numpy_store, data, tf.int64, stateful=True)
        dtypes = [x.dtype for x in data]
        for _ in tf.range(replays):
            rollout = tf.numpy_function(self._numpy_sample, [], dtypes, stateful=True)
            for x, like in zip(rollout, data):
                x.set_shape(like.shape)
            self._learn_fn(*rollout)
        return metrics
