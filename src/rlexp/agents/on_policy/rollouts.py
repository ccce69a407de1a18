"""Rollouts of the on-policy family: `n_steps` per env collected in the graph, acting with NumPy mirrors of MLP
models or TensorFlow, the envs stepped through `tf.numpy_function` or, for a graph env, with TF ops."""
from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from rlexp.agents import distributions as D
from rlexp.agents.distributions import no_autograph
from rlexp.agents.on_policy.gae import flatten_time


class Rollouts:
    """`OnPolicyAgent`'s collection of rollouts (see docs/performance.md for how they act)."""

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
            from rlexp.models.numpy_mirror import NumpyModel

            self.decide_xla()  # whether the env steps in the graph

            ok = (self.numpy_acting and self.members is None and not self.sde and not self.image_obs and not self.steps_in_graph
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

    @no_autograph
    def values_of_steps(self, obs: tf.Tensor) -> tf.Tensor:
        """The critic's values of [T, N, ...] observations as [T, N] (a population's rows go to its stacked models
        member-major, each member's block its own, and come back time-major)."""
        if self.members is None:
            return tf.reshape(self.value(flatten_time(obs)), (self.n_steps, self.n_envs))
        return self.members.time_major(self.value(self.members.member_major(obs)), self.n_steps)

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
            final_values = self.values_of_steps(batch.pop("next_obs"))
            batch["rewards"] += self.gamma * final_values * batch.pop("truncated")
        batch["last_values"] = self.value(obs)
        batch["last_obs"] = obs
        return obs, batch

    def collect(self) -> dict[str, tf.Tensor]:
        """One rollout from the current observations (for tests and subclasses)."""
        if not hasattr(self, "_rollout_fn"):
            self.decide_xla()
            rollout = self.rollout_function()
            self._rollout_fn = tf.function(lambda obs: dict(zip(("obs", "batch"), rollout(obs))), autograph=False)
        return self.call_graph_loop(self._rollout_fn, max_steps=self.updates_per_call * self.n_steps)["batch"]

    def rollout_function(self):
        """The graph's rollout, obs -> (obs, batch): NumPy acting when the models have mirrors, else
        TensorFlow's, step by step."""
        return self.numpy_rollout if self._use_numpy_rollout() else self.rollout
