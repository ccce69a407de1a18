"""Stepping a `GraphVectorEnv` inside a graph: the env state handed to TF variables around a graph call,
and the episode bookkeeping of `Agent.env_step` done from a log of each step's rewards and episode ends."""
from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from rlexp.agents.distributions import no_autograph
from rlexp.envs.graph import GraphVectorEnv


class GraphSteps:
    """`Agent`'s part that steps a `GraphVectorEnv` inside a graph loop (see `steps_in_graph`)."""

    @property
    def steps_in_graph(self) -> bool:
        """Whether graph loops step the envs with TF ops: a `GraphVectorEnv` and no (NumPy) normaliser."""
        return isinstance(self.envs, GraphVectorEnv) and not (self.normalizer.normalize_obs or
                                                              self.normalizer.normalize_reward)

    def graph_steps_begin(self, max_steps: int) -> None:
        """Before a graph call with at most `max_steps` `graph_env_step`s: hand the env state to TF variables."""
        if not hasattr(self, "_graph_log"):
            self._graph_log = tf.Variable(tf.zeros((max_steps, 2, self.n_envs), tf.float64))  # rewards, dones
            self._graph_log_rows = tf.Variable(0)
        if max_steps > self._graph_log.shape[0]:
            raise ValueError(f"{max_steps} env steps per graph call, more than the log's "
                             f"{self._graph_log.shape[0]} rows (sized by the first call)")
        self._graph_log_rows.assign(0)
        self.envs.to_graph()

    def graph_steps_end(self) -> None:
        """After that call: env state, step count and episode bookkeeping back in Python, as `env_step` does
        them (returns are summed in the same order)."""
        self.envs.from_graph()
        log = self._graph_log[: int(self._graph_log_rows)].numpy()
        rewards, dones = log[:, 0], log[:, 1] > 0
        finished = []
        for i in range(self.n_envs):
            start, running = 0, self._episode_returns[i]
            for t in np.flatnonzero(dones[:, i]):
                ret = np.cumsum(np.concatenate([[running], rewards[start:t + 1, i]]))[-1]
                E = self.member_envs  # a population's steps are each member's
                finished.append((self.steps + int(t) * E + i % E + 1, float(ret), i // E))
                start, running = t + 1, 0.0
            self._episode_returns[i] = np.cumsum(np.concatenate([[running], rewards[start:, i]]))[-1]
        self._finished.extend(sorted(finished))
        self.steps += len(log) * self.member_envs

    def call_graph_loop(self, fn, *args: Any, max_steps: int) -> dict[str, tf.Tensor]:
        """fn(obs, *args) -> {"obs": final observations, ...}, a graph loop of at most `max_steps` vector env
        steps from `self._obs`. With `steps_in_graph` the env state goes in and out around the call and the
        final observations become `self._obs` (otherwise the Python env steps set it). Returns the rest."""
        if self.steps_in_graph:
            self.graph_steps_begin(max_steps)
        outputs = dict(fn(tf.convert_to_tensor(self._obs), *args))
        obs = outputs.pop("obs")
        if self.steps_in_graph:
            self.graph_steps_end()
            self._obs = obs.numpy()
        return outputs

    @no_autograph
    def graph_env_step(self, actions: tf.Tensor) -> tuple[tf.Tensor, ...]:
        """`env_step` inside a graph (see `steps_in_graph`): obs, float32 rewards, terminated, truncated,
        next_obs. Each step's rewards and episode ends go to a log that `graph_steps_end` reads (~5 ops a step:
        tracking the episodes here took ~0.2 ms per TD3 Pendulum step)."""
        if self.action_kind == "continuous":
            actions = tf.minimum(tf.maximum(actions, self.action_space.low), self.action_space.high)
        obs, rewards, terminated, truncated, next_obs = self.envs.graph_step(actions)
        dones = terminated | truncated
        row = self._graph_log_rows.read_value()
        self._graph_log.scatter_nd_update([[row]], tf.stack([rewards, tf.cast(dones, tf.float64)])[None])
        self._graph_log_rows.assign(row + 1)
        rewards = tf.cast(rewards, tf.float32)
        if self.clip_rewards:
            rewards = tf.sign(rewards)
        if not self.bootstrap_truncation:
            terminated, truncated = dones, tf.zeros_like(truncated)
        return obs, rewards, terminated, truncated, next_obs
