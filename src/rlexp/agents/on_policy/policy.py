"""The on-policy family's policy distribution: categorical, factorised (MultiDiscrete, MultiBinary) or
Gaussian (with a learned, state-dependent or gSDE std) from the policy head output; sampling, log
probabilities, entropy, KL and the deterministic action."""
from __future__ import annotations

import tensorflow as tf

from rlexp.agents import distributions as D
from rlexp.agents.distributions import no_autograph


class PolicyDistribution:
    """`OnPolicyAgent`'s policy distribution, from the output of the policy head."""

    @property
    def policy_units(self) -> int:
        """Units of the policy head: logits (per sub-action for MultiDiscrete, per bit for MultiBinary),
        Gaussian means, or means and log stds."""
        if self.action_kind == "multi_discrete":
            return int(sum(self.nvec))
        continuous = self.action_kind == "continuous"
        return self.n_actions * (2 if continuous and self.state_dependent_std else 1)

    @property
    def nvec(self) -> list[int]:
        """MultiDiscrete: the number of choices of each sub-action."""
        return [int(n) for n in self.action_space.nvec]

    def make_log_std(self, policy_model=None) -> None:
        """The learned log std: a vector, or with gSDE a [features, actions] matrix (plus its noise draw)."""
        shape = [self.n_actions]
        if self.sde:
            shape = [int((policy_model or self.model).outputs[-1].shape[-1]), self.n_actions]
            self.sde_noise = tf.Variable(tf.zeros([self.n_envs, *shape]), name="sde_noise")  # one matrix per env
        if self.members is not None:  # each member's own
            shape = [self.members.count, *shape]
        self.log_std = tf.Variable(tf.fill(shape, self.log_std_init), name="log_std")

    @no_autograph
    def policy_head(self, outputs) -> tf.Tensor:
        """The policy output from a model's outputs; with gSDE the (gradient-stopped) features are appended."""
        if not self.sde:
            return outputs[0] if isinstance(outputs, (list, tuple)) else outputs
        return tf.concat([outputs[0], tf.stop_gradient(outputs[-1])], axis=-1)

    @no_autograph
    def gaussian(self, out: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """(mean, log_std) from the policy head output."""
        if self.state_dependent_std:
            mean, log_std = tf.split(out, 2, axis=-1)
            return mean, tf.clip_by_value(log_std, -20.0, 2.0)
        if self.sde:  # var_k = sum_j features_j^2 std_jk^2
            mean, features = out[:, :self.n_actions], out[:, self.n_actions:]
            variance = tf.matmul(tf.square(features), tf.square(D.sde_std(self.log_std, self.expln)))
            return mean, 0.5 * tf.math.log(variance + 1e-6)
        return out, self.member_rows(self.log_std, out)

    @no_autograph
    def log_prob_entropy(self, out: tf.Tensor, actions: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        if self.action_kind == "discrete":
            return D.categorical_log_prob(out, actions), D.categorical_entropy(out)
        if self.action_kind == "multi_discrete":
            return D.multi_categorical_log_prob(out, self.nvec, actions), D.multi_categorical_entropy(out, self.nvec)
        if self.action_kind == "multi_binary":
            return D.bernoulli_log_prob(out, actions), D.bernoulli_entropy(out)
        mean, log_std = self.gaussian(out)
        return D.gaussian_log_prob(mean, log_std, actions), D.gaussian_entropy(mean, log_std)

    @no_autograph
    def dist_params(self, out: tf.Tensor) -> tuple[tf.Tensor, ...]:
        """The distribution's parameters: (logits,) or (mean, log_std broadcast to the batch)."""
        if self.action_kind == "discrete":
            return (out,)
        mean, log_std = self.gaussian(out)
        return mean, tf.broadcast_to(log_std, tf.shape(mean))

    @no_autograph
    def kl(self, old: tuple[tf.Tensor, ...], new: tuple[tf.Tensor, ...]) -> tf.Tensor:
        """KL(old policy || new policy) per row, from two `dist_params` tuples."""
        return D.categorical_kl(*old, *new) if self.action_kind == "discrete" else D.gaussian_kl(*old, *new)

    @no_autograph
    def step_dtypes(self) -> dict[str, tf.DType]:
        """What `sample_action` returns per step (stored in the rollout besides obs, rewards, dones)."""
        action_dtype = tf.float32 if self.action_kind == "continuous" else tf.int64
        recurrent = {}
        if self.recurrent:  # each step's episode-start flags and the states it started from
            recurrent = {"starts": tf.float32} | {f"state_{i}": tf.float32 for i in range(len(self.rnn_states))}
        return dict(actions=action_dtype, log_probs=tf.float32, values=tf.float32) | recurrent

    @no_autograph
    def sample_action(self, obs: tf.Tensor) -> dict[str, tf.Tensor]:
        """Sampled actions with their log probs and the state values, for a batch of observations."""
        return self.sample_from(*self.forward(obs))

    @no_autograph
    def sample_from(self, out: tf.Tensor, value: tf.Tensor) -> dict[str, tf.Tensor]:
        """Actions sampled from the policy head output, with their log probs, and the values."""
        if self.sde:  # noise = features @ this env's exploration matrix
            actions = out[:, :self.n_actions] + tf.einsum("nd,nda->na", out[:, self.n_actions:], self.sde_noise)
        else:
            actions = self.draw_actions(out, self.tf_rng)
        log_probs, _ = self.log_prob_entropy(out, actions)
        return dict(actions=actions, log_probs=log_probs, values=value)

    @no_autograph
    def draw_actions(self, out: tf.Tensor, rng: tf.random.Generator) -> tf.Tensor:
        """Actions drawn from the policy head output with `rng` (gSDE: a fresh exploration matrix per row)."""
        if self.action_kind == "discrete":
            return D.categorical_sample(out, rng)
        if self.action_kind == "multi_discrete":
            return D.multi_categorical_sample(out, self.nvec, rng)
        if self.action_kind == "multi_binary":
            return D.bernoulli_sample(out, rng)
        if self.sde:
            features = out[:, self.n_actions:]
            std = D.sde_std(self.log_std, self.expln)
            noise = std * rng.normal(tf.concat([tf.shape(features)[:1], tf.shape(self.log_std)], 0))
            return out[:, :self.n_actions] + tf.einsum("nd,nda->na", features, noise)
        mean, log_std = self.gaussian(out)
        return D.gaussian_sample(mean, log_std, rng)

    @no_autograph
    def sample_policy(self, obs: tf.Tensor, rng: tf.random.Generator) -> tf.Tensor:
        return self.draw_actions(self.forward(obs)[0], rng)

    def resample_sde_noise(self) -> None:
        self.sde_noise.assign(self.tf_rng.normal(tf.shape(self.sde_noise)) * D.sde_std(self.log_std, self.expln))

    @no_autograph
    def value(self, obs: tf.Tensor) -> tf.Tensor:
        return self.forward(obs)[1]

    @no_autograph
    def policy(self, obs: tf.Tensor) -> tf.Tensor:
        return self.mode(self.forward(obs)[0])

    @no_autograph
    def mode(self, out: tf.Tensor) -> tf.Tensor:
        """The policy's deterministic action from its head output."""
        if self.action_kind == "discrete":
            return tf.argmax(out, axis=-1)
        if self.action_kind == "multi_discrete":
            return D.multi_categorical_mode(out, self.nvec)
        if self.action_kind == "multi_binary":
            return tf.cast(out > 0, tf.int64)
        return self.gaussian(out)[0]
