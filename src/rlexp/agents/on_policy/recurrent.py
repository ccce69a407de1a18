"""Recurrent models of the on-policy family: each env's state carried across steps and rollouts, and
rollouts cut into sequences for truncated backpropagation through time."""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from rlexp.agents.distributions import no_autograph
from rlexp.agents.on_policy.gae import flatten_time, swap_time


class RecurrentState:
    """`OnPolicyAgent`'s recurrent state (lstm/gru model presets) and the training units it learns from."""

    def make_recurrent_state(self, model) -> None:
        """Per-env state variables of a recurrent model, and which envs start an episode at the next step."""
        from rlexp.models.networks import recurrent_state_sizes

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
            rows = flatten_time if self.members is None else self.members.member_major  # member-major rows
            flat = [rows(batch["obs"])] + [rows(x) for x in tensors]
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
