"""The on-policy family (A2C, PPO, TRPO, ACER, VPG): rollouts of `n_steps` per env, collected and learned from
in fused graph calls. See docs/performance.md for how the rollouts act (NumPy mirrors, graph envs).
"""
from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import tensorflow as tf

from rlexp.agents import distributions as D
from rlexp.agents.base import Agent
from rlexp.agents.distributions import no_autograph
from rlexp.envs import space_kind
from rlexp.errors import UserError
from rlexp.memory import Need, activation_floats, init_default, space_bytes


class OnPolicyAgent(Agent):
    """Agents that learn from fresh rollouts of `n_steps` per env (A2C, PPO, TRPO).

    The rollout runs in the graph: the policy acts in TensorFlow, the envs step through
    `tf.numpy_function`, and time-limit truncations are bootstrapped with the critic's value. Several
    rollout + update cycles run in one graph call (at least `STEPS_PER_CALL` env steps, each cycle with its
    own scheduled learning rate), so small rollouts (A2C's 5 steps) don't pay Python's per-call cost.
    Subclasses provide `forward(obs) -> (policy output, value)` and `update(batch) -> metrics` (graph code).

    Args (besides `Agent`'s):
        n_steps: transitions per env per rollout.
        log_std_init: continuous actions: initial log standard deviation of the Gaussian policy.
        state_dependent_std: continuous actions: the policy head outputs the log std too (clipped to
            [-20, 2]) instead of a learned state-independent vector.
        use_sde: continuous actions: generalised state-dependent exploration (Raffin et al. 2022): the
            noise is the policy's last hidden features times a random matrix drawn from N(0, std^2)
            every `sde_sample_freq` steps (-1: once per rollout); std is a learned [features, actions] matrix.
        sequence_length: recurrent models: the rollout is cut into sequences of this many steps per env
            (None: the whole rollout), each starting from the hidden state stored at its first step;
            minibatches are whole sequences (truncated backpropagation through time).
    Continuous actions are sampled unbounded and clipped to the action space when stepping; the
    unclipped sample is what the log-probabilities are computed for (as SB3 does). MultiDiscrete and
    MultiBinary actions use factorised categorical and Bernoulli distributions.
    """

    critic = True  # the model has a value head (VPG without a baseline has none)
    STEPS_PER_CALL = 2048  # target reward, early stopping and progress are checked between calls
    jit_update = True  # `update` is pure TensorFlow (XLA can compile it)
    numpy_acting = True  # act with NumPy mirrors of MLP models during rollouts (see `_numpy_rollout`)
    # With a GraphVectorEnv, roll out entirely in the graph (TensorFlow acting, the env stepped with TF ops)
    # instead of acting in NumPy: it pays where rollouts are most of the work (A2C CartPole 4.7 vs 5.4 s per
    # 200k steps) but not for PPO (4.7 vs 4.5 s per 100k: its bigger graph takes ~0.8 s longer to build).
    graph_env_rollouts = False

    def __init__(self, envs: gym.vector.VectorEnv, model=None, buffer=None, *, n_steps: int = 128,
                 log_std_init: float = 0.0, state_dependent_std: bool = False, use_sde: bool = False,
                 sde_sample_freq: int = -1, sequence_length: int | None = None, **kwargs) -> None:
        from rlexp.checks import whole

        self.n_steps = n_steps = whole("agent.n_steps", n_steps, 1)
        self.sequence_length = int(sequence_length or n_steps)
        if self.sequence_length < 1 or self.n_steps % self.sequence_length:
            raise UserError(f"agent.sequence_length={sequence_length} must divide agent.n_steps={n_steps}")
        self.rnn_states: list[tf.Variable] = []  # recurrent models: each state per env, carried across rollouts
        self.log_std_init, self.state_dependent_std = float(log_std_init), bool(state_dependent_std)
        self.sde = bool(use_sde) and space_kind(envs.single_action_space) == "continuous"
        self.sde_sample_freq = int(sde_sample_freq) if int(sde_sample_freq) > 0 else int(n_steps)
        if self.sde and self.state_dependent_std:
            raise UserError("agent.use_sde and agent.state_dependent_std exclude each other; pick one")
        super().__init__(envs, model, buffer, **kwargs)
        self.updates_per_call = max(1, -(-self.STEPS_PER_CALL // (self.n_steps * self.n_envs)))
        if self.lr_schedule == "kl_adaptive":  # the rate adapts to each update's KL: one cycle per call
            self.updates_per_call = 1

    @classmethod
    def memory_needs(cls, observation_space, action_space, n_envs, params, buffer, model) -> list[Need]:
        """The rollout's storage (observations, the final ones of vector observations, actions and five floats
        a transition) and the activations of the update's largest batch (a PPO minibatch, else the rollout),
        besides a replay buffer's storage (ACER)."""
        from rlexp.envs import is_image

        n_steps = int(params.get("n_steps") or init_default(cls, "n_steps", 1))
        rows = n_steps * n_envs
        image = is_image(observation_space)
        per_row = space_bytes(observation_space) * (1 if image else 2) + space_bytes(action_space) + 20
        batches = max(int(params.get("mini_batches") or init_default(cls, "mini_batches", 1)), 1)
        batch_rows = rows // batches
        floats = activation_floats(model, observation_space.shape, 2 if cls.critic else 1, image)
        keys = f"agent.n_steps={n_steps} x env.n_envs={n_envs}"
        fix = "agent.n_steps or env.n_envs"
        if init_default(cls, "mini_batches") is not None:
            fix += " (or raise agent.mini_batches)"
        return [*super().memory_needs(observation_space, action_space, n_envs, params, buffer, model),
                Need("rollout storage", rows * per_row, f"{rows:,} transitions x {per_row} bytes", keys, fix),
                Need("the update's activations", batch_rows * floats * 4, f"{batch_rows:,} rows x {floats * 4:,} "
                     "bytes", keys, fix)]

    @property
    def steps_in_graph(self) -> bool:
        return self.graph_env_rollouts and super().steps_in_graph

    # ----- the policy distribution ------------------------------------------------------------------
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
        self.log_std = tf.Variable(tf.fill(shape, self.log_std_init), name="log_std")

    @no_autograph
    def policy_head(self, outputs) -> tf.Tensor:
        """The policy output from a model's outputs; with gSDE the (gradient-stopped) features are appended."""
        if not self.sde:
            return outputs[0] if isinstance(outputs, (list, tuple)) else outputs
        return tf.concat([outputs[0], tf.stop_gradient(outputs[-1])], axis=-1)

    def model_kwargs(self) -> dict[str, Any]:
        """build_model options for the model holding the policy head."""
        return {"latent_of": "policy"} if self.sde else {}

    def build(self) -> None:
        """One model with policy and value heads (A2C, PPO); TRPO builds separate actor and critic."""
        heads = {"policy": self.policy_units} | ({"value": 1} if self.critic else {})
        self.model = self.build_model(heads, **self.model_kwargs())
        self.make_recurrent_state(self.model)
        self.make_log_std()
        self.optimizer = self.make_optimizer()
        self.optimizer.build(self.trainable_variables())

    def make_optimizer(self):
        """The family's optimizer; under a float16 policy wrapped in Keras's LossScaleOptimizer (see `minimize`)."""
        optimizer = super().make_optimizer()
        if self.precision == "mixed_float16":
            import keras

            optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
        return optimizer

    @no_autograph
    def minimize(self, tape: tf.GradientTape, loss: tf.Tensor, variables: list[tf.Variable],
                 grad_norm: float | None = None) -> None:
        """One optimizer step on `loss` (recorded on `tape`), gradients clipped to the global norm `grad_norm`.
        Under float16 the gradients are those of the loss times the loss scale (clipped at the scaled norm);
        the LossScaleOptimizer unscales them, skips steps with non-finite ones and adapts the scale."""
        scale = getattr(self.optimizer, "dynamic_scale", None)
        if scale is None:
            grads = tape.gradient(loss, variables)
        else:
            scale = tf.convert_to_tensor(scale)
            grads = tape.gradient(loss, variables, output_gradients=tf.cast(scale, loss.dtype))
        if grad_norm is not None:
            grads, _ = tf.clip_by_global_norm(grads, grad_norm if scale is None else grad_norm * scale)
        self.optimizer.apply_gradients(zip(grads, variables))

    def std_variables(self) -> list[tf.Variable]:
        """The learned log std (continuous actions with a state-independent or gSDE std)."""
        return [self.log_std] if self.action_kind == "continuous" and not self.state_dependent_std else []

    def trainable_variables(self, optimizer_name: str = "model") -> list[tf.Variable]:
        return self.model.trainable_variables + self.std_variables()

    @no_autograph
    def forward(self, obs: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """(policy head output, state values [batch]). A recurrent model reads the envs' current states (or,
        given `sequence_inputs`, runs over the sequences and returns outputs flattened time-major)."""
        if self.recurrent:
            return self.recurrent_forward(obs)[:2]
        outputs = self.model(obs)
        return self.policy_head(outputs), self.head_values(outputs)

    @no_autograph
    def head_values(self, outputs) -> tf.Tensor:
        """State values [batch] from the model's outputs (zeros for a model without a value head)."""
        if not self.critic:
            out = outputs[0] if isinstance(outputs, (list, tuple)) else outputs
            return tf.zeros(tf.shape(out)[:1])
        return outputs[1][:, 0]

    # ----- recurrent models ---------------------------------------------------------------------------
    def make_recurrent_state(self, model) -> None:
        """Per-env state variables of a recurrent model, and which envs start an episode at the next step."""
        from rlexp.models import recurrent_state_sizes

        self.rnn_states = [tf.Variable(tf.zeros([self.n_envs, units]), trainable=False, name=f"rnn_state_{i}")
                           for i, units in enumerate(recurrent_state_sizes(model))]
        self.episode_starts = tf.Variable(tf.ones([self.n_envs]), trainable=False, name="episode_starts")

    @no_autograph
    def recurrent_forward(self, obs, starts=None, states=None) -> tuple[tf.Tensor, tf.Tensor, list[tf.Tensor]]:
        """(policy head output, values, new states) of the recurrent model for one step of `obs` [batch, ...]
        from `states` (default: the envs' current ones) with `starts` flagging episode starts; or, for
        `sequence_inputs` (a dict), over [time, batch] sequences, outputs flattened time-major."""
        sequences = isinstance(obs, dict)
        if sequences:
            obs, starts, states = swap_time(obs["obs"]), swap_time(obs["starts"]), obs["states"]
        else:
            starts = self.episode_starts if starts is None else starts
            states = self.rnn_states if states is None else states
            obs, starts = obs[:, None], starts[:, None]
        outputs = self.model([obs, starts, *states])
        n_heads = len(outputs) - len(self.rnn_states)
        heads, new_states = outputs[:n_heads], outputs[n_heads:]
        heads = [flatten_time(swap_time(h)) if sequences else h[:, 0] for h in heads]
        return self.policy_head(heads), self.head_values(heads), new_states

    @no_autograph
    def recurrent_policy(self, obs, starts, states, deterministic: bool = True) -> tuple[tf.Tensor, list[tf.Tensor]]:
        out, _, states = self.recurrent_forward(obs, starts, states)
        return (self.mode(out) if deterministic else self.draw_actions(out, self.eval_rng)), states

    def policy_actions(self, obs: np.ndarray, episode_starts: np.ndarray | None,
                       deterministic: bool = True) -> np.ndarray:
        """A recurrent policy carries its state from call to call (one per env of the batch, zeroed where
        `episode_starts` is set, and for all envs on the first call)."""
        if not self.recurrent:
            return super().policy_actions(obs, episode_starts, deterministic)
        states = getattr(self, "_act_states", None)
        if states is None or len(states[0]) != len(obs):
            states = [np.zeros((len(obs), int(v.shape[-1])), np.float32) for v in self.rnn_states]
            episode_starts = np.ones(len(obs))
        if not deterministic:
            _ = self.eval_rng  # the generator is made here, outside the graph
        if not hasattr(self, "_recurrent_policy_fn"):
            self._recurrent_policy_fn = tf.function(self.recurrent_policy)
        starts = np.zeros(len(obs), np.float32) if episode_starts is None else np.asarray(episode_starts, np.float32)
        actions, states = self._recurrent_policy_fn(tf.convert_to_tensor(obs), tf.convert_to_tensor(starts),
                                                    [tf.convert_to_tensor(s) for s in states], deterministic)
        self._act_states = [s.numpy() for s in states]
        return actions.numpy()

    @property
    def n_sequences(self) -> int:
        """Sequences a recurrent model's rollout is cut into (n_envs per `sequence_length` steps)."""
        return self.n_steps // self.sequence_length * self.n_envs

    @no_autograph
    def to_sequences(self, x: tf.Tensor) -> tf.Tensor:
        """[T, N, ...] -> [L, S, ...]: each env's rollout cut into T/L sequences of L steps, S = T/L * N."""
        T, N, L = self.n_steps, self.n_envs, self.sequence_length
        if L == T:
            return x
        rest = tf.shape(x)[2:]
        x = tf.reshape(x, tf.concat([[T // L, L, N], rest], 0))
        x = tf.transpose(x, [1, 0, 2, *range(3, x.shape.rank)])
        return tf.reshape(x, tf.concat([[L, T // L * N], rest], 0))

    @no_autograph
    def training_units(self, batch: dict[str, tf.Tensor], tensors: list[tf.Tensor]):
        """The rollout as the units minibatches are drawn from: (count, select), where select(rows) gives
        [model input, *tensors] for those units (None: all), the tensors flattened to rows. Units are
        transitions for feed-forward models, whole sequences (see `sequence_length`) for recurrent ones."""
        if not self.recurrent:
            flat = [flatten_time(batch["obs"])] + [flatten_time(x) for x in tensors]
            return self.n_steps * self.n_envs, lambda rows: flat if rows is None else [tf.gather(x, rows) for x in flat]
        L = self.sequence_length
        columns = [self.to_sequences(batch["obs"]), self.to_sequences(batch["starts"])] + [
            self.to_sequences(x) for x in tensors]
        states = [tf.reshape(batch[f"state_{i}"][::L], [self.n_sequences, -1]) for i in range(len(self.rnn_states))]

        def select(rows):
            cols = columns if rows is None else [tf.gather(x, rows, axis=1) for x in columns]
            picked = states if rows is None else [tf.gather(x, rows) for x in states]
            return [dict(obs=cols[0], starts=cols[1], states=picked)] + [flatten_time(x) for x in cols[2:]]

        return self.n_sequences, select

    def update(self, batch: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        """Learn from one rollout ([T, N, ...] tensors plus `last_values`); graph code."""
        raise NotImplementedError  # abstract

    @no_autograph
    def gaussian(self, out: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """(mean, log_std) from the policy head output."""
        if self.state_dependent_std:
            mean, log_std = tf.split(out, 2, axis=-1)
            return mean, tf.clip_by_value(log_std, -20.0, 2.0)
        if self.sde:  # var_k = sum_j features_j^2 std_jk^2
            mean, features = out[:, :self.n_actions], out[:, self.n_actions:]
            variance = tf.matmul(tf.square(features), tf.exp(2.0 * self.log_std))
            return mean, 0.5 * tf.math.log(variance + 1e-6)
        return out, self.log_std

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
            noise = tf.exp(self.log_std) * rng.normal(tf.concat([tf.shape(features)[:1], tf.shape(self.log_std)], 0))
            return out[:, :self.n_actions] + tf.einsum("nd,nda->na", features, noise)
        mean, log_std = self.gaussian(out)
        return D.gaussian_sample(mean, log_std, rng)

    @no_autograph
    def sample_policy(self, obs: tf.Tensor, rng: tf.random.Generator) -> tf.Tensor:
        return self.draw_actions(self.forward(obs)[0], rng)

    def resample_sde_noise(self) -> None:
        self.sde_noise.assign(self.tf_rng.normal(tf.shape(self.sde_noise)) * tf.exp(self.log_std))

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

    def extra_variables(self) -> dict[str, tf.Variable]:
        if self.action_kind == "continuous" and not self.state_dependent_std:
            return {"log_std": self.log_std}
        return {}

    def resume_variables(self) -> dict[str, tf.Variable]:
        return {"sde_noise": self.sde_noise} if self.sde else {}

    def _reset_envs(self, seed: int | None, update_statistics: bool = True) -> np.ndarray:
        """Envs reset (at the start, and on resume): a recurrent model's states restart with their episodes."""
        obs = super()._reset_envs(seed, update_statistics)
        self.reset_recurrent_state()
        return obs

    def reset_recurrent_state(self) -> None:
        """Zero states, and every env at an episode start (as after `make_recurrent_state`)."""
        for state in self.rnn_states:
            state.assign(tf.zeros_like(state))
        if hasattr(self, "episode_starts"):
            self.episode_starts.assign(tf.ones_like(self.episode_starts))

    # ----- collection -------------------------------------------------------------------------------
    def _numpy_step(self, actions: np.ndarray):
        obs, rewards, terminated, truncated, next_obs = self.env_step(actions)
        return obs, rewards, terminated, truncated & ~terminated, next_obs

    def numpy_models(self) -> list[Any]:
        """The models `numpy_forward` evaluates, in the order their weights are passed."""
        return [self.model]

    def numpy_forward(self, weights: list[list[np.ndarray]], obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """NumPy twin of `forward`: (policy head output, values), from each model's weight arrays."""
        outputs = self._mirrors[0](weights[0], obs)
        return outputs[0], outputs[1][:, 0] if self.critic else np.zeros(len(obs), np.float32)

    @no_autograph
    def _use_numpy_rollout(self) -> bool:
        """Roll out with NumPy mirrors when every model has one (MLPs on vector observations, no gSDE)."""
        if not hasattr(self, "_mirrors"):
            from rlexp.numpy_models import NumpyModel

            ok = (self.numpy_acting and not self.sde and not self.image_obs and not self.steps_in_graph
                  and not self.recurrent and self.action_kind in ("discrete", "continuous"))
            mirrors = [NumpyModel.mirror(m) for m in self.numpy_models()] if ok else [None]
            self._mirrors = mirrors if all(m is not None for m in mirrors) else None
        return self._mirrors is not None

    def _numpy_sample(self, out: np.ndarray, log_std: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """NumPy twin of `sample_action`'s sampling: (actions, log probs), drawn from `self.rng`."""
        rows = np.arange(len(out))
        if self.action_kind == "discrete":
            u = np.maximum(self.rng.random(out.shape, dtype=np.float32), 1e-9)
            actions = np.argmax(out - np.log(-np.log(u)), axis=-1)
            shifted = out - out.max(axis=-1, keepdims=True)
            log_p = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
            return actions, log_p[rows, actions]
        mean = out
        if self.state_dependent_std:
            mean, log_std = np.split(out, 2, axis=-1)
            log_std = np.clip(log_std, -20.0, 2.0)
        actions = mean + np.exp(log_std) * self.rng.standard_normal(mean.shape, dtype=np.float32)
        z = (actions - mean) * np.exp(-log_std)
        return actions, np.sum(-0.5 * np.square(z) - log_std - 0.5 * D.LOG_2PI, axis=-1, dtype=np.float32)

    def _numpy_rollout(self, *weights: np.ndarray) -> tuple[np.ndarray, ...]:
        """A whole rollout in NumPy from the current weights (all models' weights, then the log std)."""
        sizes = [len(m.weights) for m in self.numpy_models()]
        splits = np.cumsum([0, *sizes])
        model_weights = [list(weights[a:b]) for a, b in zip(splits[:-1], splits[1:])]
        log_std = weights[splits[-1]] if len(weights) > splits[-1] else None
        T, N = self.n_steps, self.n_envs
        action_shape = () if self.action_kind == "discrete" else (self.n_actions,)
        obs_buf = np.empty((T, N, *self.obs_shape), np.float32)
        actions_buf = np.empty((T, N, *action_shape), np.int64 if self.action_kind == "discrete" else np.float32)
        log_probs, values, rewards, dones = (np.empty((T, N), np.float32) for _ in range(4))
        obs = self._obs
        for t in range(T):
            out, values[t] = self.numpy_forward(model_weights, obs)
            actions, log_probs[t] = self._numpy_sample(out, log_std)
            obs_buf[t], actions_buf[t] = obs, actions
            obs, reward, terminated, truncated, next_obs = self._numpy_step(actions)
            if truncated.any():  # time-limit truncation is not terminal: bootstrap with the final obs's value
                ended = np.flatnonzero(truncated)
                reward[ended] += self.gamma * self.numpy_forward(model_weights, next_obs[ended])[1]
            rewards[t], dones[t] = reward, terminated | truncated
        last_values = self.numpy_forward(model_weights, obs)[1]
        return obs_buf, actions_buf, log_probs, values, rewards, dones, last_values, obs

    @no_autograph
    def acting_variables(self) -> list[tf.Variable]:
        """What a rollout reads: every model's weights (`numpy_models` order), then the log std."""
        return [w for m in self.numpy_models() for w in m.weights] + self.std_variables()

    @no_autograph
    def numpy_rollout(self, obs: tf.Tensor) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        """`rollout` through `_numpy_rollout`, from the graph, with the acting variables' current values;
        the observations are the envs' own, `self._obs`."""
        keys = ("obs", "actions", "log_probs", "values", "rewards", "dones", "last_values", "last_obs")
        dtypes = self.step_dtypes() | dict(obs=tf.float32, rewards=tf.float32, dones=tf.float32,
                                           last_values=tf.float32, last_obs=tf.float32)
        weights = [tf.convert_to_tensor(v) for v in self.acting_variables()]
        outputs = tf.numpy_function(self._numpy_rollout, weights, [dtypes[k] for k in keys], stateful=True)
        T, N = self.n_steps, self.n_envs
        action_shape = () if self.action_kind == "discrete" else (self.n_actions,)
        shapes = dict(obs=(T, N, *self.obs_shape), actions=(T, N, *action_shape), last_values=(N,),
                      last_obs=(N, *self.obs_shape))
        batch = {}
        for key, x in zip(keys, outputs):
            x.set_shape(shapes.get(key, (T, N)))
            batch[key] = x
        return batch["last_obs"], batch

    @no_autograph
    def _resample_sde_noise_then_0(self) -> tf.Tensor:
        self.resample_sde_noise()
        return tf.constant(0)

    @no_autograph
    def rollout_step(self, t: tf.Tensor, obs: tf.Tensor) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        """One acting step of `rollout` (graph code): the next obs and this step's obs, actions, log probs,
        values, rewards, dones (and, for vector observations, `truncated` with the final `next_obs`)."""
        n_envs, obs_shape = self.n_envs, self.obs_shape
        if self.sde:
            tf.cond(t % self.sde_sample_freq == 0, self._resample_sde_noise_then_0, lambda: tf.constant(0))
        if self.recurrent:  # act from the envs' states, then carry the new ones (stored: the states before)
            starts, states = self.episode_starts.read_value(), [v.read_value() for v in self.rnn_states]
            out, value, new_states = self.recurrent_forward(obs, starts, states)
            outputs = self.sample_from(out, value) | {"obs": obs, "starts": starts}
            outputs |= {f"state_{i}": state for i, state in enumerate(states)}
            for variable, state in zip(self.rnn_states, new_states):
                variable.assign(state)
        else:
            outputs = self.sample_action(obs) | {"obs": obs}
        if self.steps_in_graph:
            obs, rewards, terminated, truncated, next_obs = self.graph_env_step(outputs["actions"])
            truncated = truncated & ~terminated
        else:
            obs_dtype = tf.as_dtype(self.obs_dtype)
            obs, rewards, terminated, truncated, next_obs = tf.numpy_function(
                self._numpy_step, [outputs["actions"]], [obs_dtype, tf.float32, tf.bool, tf.bool, obs_dtype],
                stateful=True)
        obs.set_shape((n_envs, *obs_shape))
        next_obs.set_shape((n_envs, *obs_shape))
        for x in (rewards, terminated, truncated):
            x.set_shape((n_envs,))
        outputs |= dict(rewards=rewards, dones=tf.cast(terminated | truncated, tf.float32))
        if self.recurrent:
            self.episode_starts.assign(outputs["dones"])
            final_value = lambda: self.recurrent_forward(next_obs, tf.zeros((n_envs,)), new_states)[1]  # noqa: E731
        else:
            final_value = lambda: self.value(next_obs)  # noqa: E731
        if self.per_step_bootstrap:  # time-limit truncation is not terminal: bootstrap with the final obs's value
            bootstrap = tf.cond(tf.reduce_any(truncated), final_value, lambda: tf.zeros((n_envs,)))
            outputs["rewards"] += self.gamma * bootstrap * tf.cast(truncated, tf.float32)
        else:  # bootstrapped by `rollout`, all steps at once
            outputs |= dict(next_obs=next_obs, truncated=tf.cast(truncated, tf.float32))
        return obs, outputs

    @property
    def per_step_bootstrap(self) -> bool:
        """Truncations bootstrapped in the step (images: no final-obs copies; recurrent: the step's state)."""
        return self.image_obs or self.recurrent

    @no_autograph
    def rollout(self, obs: tf.Tensor) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        """n_steps x n_envs transitions as [T, N, ...] tensors plus `last_values` (graph code: a
        `tf.while_loop`, no AutoGraph; unrolled, even A2C's 5 steps took longer to build than they saved)."""
        obs_dtype = tf.as_dtype(self.obs_dtype)
        dtypes = self.step_dtypes() | dict(obs=obs_dtype, rewards=tf.float32, dones=tf.float32)
        if not self.per_step_bootstrap:
            dtypes |= dict(next_obs=obs_dtype, truncated=tf.float32)
        arrays = {k: tf.TensorArray(dtype, self.n_steps) for k, dtype in dtypes.items()}

        def step(t, obs, arrays):
            obs, outputs = self.rollout_step(t, obs)
            return t + 1, obs, {k: arrays[k].write(t, outputs[k]) for k in arrays}

        _, obs, arrays = tf.while_loop(lambda t, *_: t < self.n_steps, step, (tf.constant(0), obs, arrays))
        batch = {k: v.stack() for k, v in arrays.items()}
        if not self.per_step_bootstrap:  # truncations bootstrapped in one pass (a condition per step: a slower first call)
            final_values = tf.reshape(self.value(flatten_time(batch.pop("next_obs"))), (self.n_steps, self.n_envs))
            batch["rewards"] += self.gamma * final_values * batch.pop("truncated")
        batch["last_values"] = self.value(obs)
        batch["last_obs"] = obs
        return obs, batch

    def collect(self) -> dict[str, tf.Tensor]:
        """One rollout from the current observations (for tests and subclasses)."""
        if not hasattr(self, "_rollout_fn"):
            rollout = self.rollout_function()
            self._rollout_fn = tf.function(lambda obs: dict(zip(("obs", "batch"), rollout(obs))), autograph=False)
        return self.call_graph_loop(self._rollout_fn, max_steps=self.updates_per_call * self.n_steps)["batch"]

    def rollout_function(self):
        """The graph's rollout, obs -> (obs, batch): NumPy acting when the models have mirrors, else
        TensorFlow's, step by step."""
        return self.numpy_rollout if self._use_numpy_rollout() else self.rollout

    def train_iteration(self) -> dict[str, float]:
        if not hasattr(self, "_train_fn"):
            self._update_fn = tf.function(self.update, jit_compile=self.jit_compile and self.jit_update)
            self._train_fn = tf.function(self._fused_iterations)
        rollout = self.n_steps * self.n_envs
        cycles = max(1, min(self.updates_per_call, -(-self.steps_left() // rollout)))
        scheduled = self.schedules()
        # fixed length: no retrace for the last, shorter call
        lrs = np.zeros(self.updates_per_call, np.float32)
        values = np.zeros((self.updates_per_call, len(scheduled)), np.float32)
        for k in range(cycles):
            lrs[k] = self.current_lr(self.steps + k * rollout)
            values[k] = [value_at(self.steps + k * rollout) for _, value_at in scheduled.values()]
        metrics = self.call_graph_loop(self._train_fn, tf.constant(cycles), tf.constant(lrs), tf.constant(values),
                                       max_steps=self.updates_per_call * self.n_steps)
        return {k: float(v) for k, v in metrics.items()}

    def schedules(self) -> dict[str, tuple[tf.Variable, Any]]:
        """Hyperparameters on a schedule besides the learning rate (e.g. PPO's clip range), name -> (variable,
        value at a step count): each cycle of a fused call assigns the variable its value at the cycle's start."""
        return {}

    @no_autograph
    def _fused_iterations(self, obs: tf.Tensor, cycles: tf.Tensor, lrs: tf.Tensor,
                          scheduled: tf.Tensor) -> dict[str, tf.Tensor]:
        """`cycles` rollout + update cycles in one graph call, cycle i with learning rate `lrs[i]` and the
        `schedules` variables set to `scheduled[i]`; returns the mean metrics.

        Written with `tf.while_loop` rather than AutoGraph: converting the loop (and the updates it calls)
        cost ~0.7 s of every run's first call."""
        rollout = self.rollout_function()
        schedule_variables = [variable for variable, _ in self.schedules().values()]

        def cycle(i, obs, totals=None):
            for optimizer in self.optimizers().values():
                optimizer.learning_rate.assign(lrs[i])
            for j, variable in enumerate(schedule_variables):
                variable.assign(scheduled[i, j])
            obs, batch = rollout(obs)
            metrics = self._update_fn(batch)
            return i + 1, obs, metrics if totals is None else {k: totals[k] + metrics[k] for k in totals}

        _, obs, totals = cycle(tf.constant(0), obs)
        _, obs, totals = tf.while_loop(lambda i, *_: i < cycles, cycle, (tf.constant(1), obs, totals))
        return {k: v / tf.cast(cycles, tf.float32) for k, v in totals.items()} | {"obs": obs}


GAE_UNROLL_STEPS = 64  # rollouts up to this length get GAE's recursion unrolled in the graph


@no_autograph
def swap_time(x: tf.Tensor) -> tf.Tensor:
    """[T, N, ...] <-> [N, T, ...]."""
    return tf.transpose(x, [1, 0, *range(2, x.shape.rank)])


@no_autograph
def flatten_time(x: tf.Tensor) -> tf.Tensor:
    """[T, N, ...] -> [T * N, ...]."""
    return tf.reshape(x, tf.concat([[-1], tf.shape(x)[2:]], 0))


@no_autograph
def compute_gae(rewards: tf.Tensor, values: tf.Tensor, dones: tf.Tensor, last_values: tf.Tensor,
                gamma: float, lam: float) -> tuple[tf.Tensor, tf.Tensor]:
    """Generalised advantage estimation over [T, N] tensors. Returns (advantages, returns).

    dones[t] marks that the episode ended at step t (no bootstrap from t+1).
    """
    not_done = 1.0 - dones
    next_values = tf.concat([values[1:], last_values[None]], 0)
    deltas = rewards + gamma * next_values * not_done - values
    n_steps = deltas.shape[0]
    if n_steps is not None and n_steps <= GAE_UNROLL_STEPS:  # a few ops per step instead of a loop's overhead
        gae, advantages = tf.zeros_like(last_values), [None] * n_steps
        for t in reversed(range(n_steps)):
            gae = advantages[t] = deltas[t] + gamma * lam * not_done[t] * gae
        advantages = tf.stack(advantages)
    else:
        advantages = tf.scan(lambda gae, step: step[0] + gamma * lam * step[1] * gae, (deltas, not_done),
                             initializer=tf.zeros_like(last_values), reverse=True)
    return advantages, advantages + values
