"""Augmented Random Search (Mania et al. 2018): derivative-free search over a linear (or small MLP) policy's
weights. Each update draws n_delta Gaussian directions, runs one episode with the weights moved +delta_std and
-delta_std along each, keeps the n_top directions whose better return is highest and steps along
sum((r+ - r-) delta) scaled by lr / (n_top x the kept returns' std). Observations are normalised by running
statistics (ARS V2) where agent.normalize_obs is set. sb3-contrib's ARS is the reference.

The candidates run side by side: env copy i runs candidate i's episode (a batch of n_envs candidates at a time,
all 2 x n_delta of them where env.n_envs is that many), acting with their stacked weights in one NumPy einsum a
layer per step."""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import tensorflow as tf

from rlexp.agents.base import Agent
from rlexp.errors import UserError

ACTIVATIONS = {"relu": lambda x: np.maximum(x, 0.0), "tanh": np.tanh}
TF_ACTIVATIONS = {"relu": tf.nn.relu, "tanh": tf.tanh}


class ARS(Agent):
    """ARS with a policy of `net_arch` hidden layers (none: linear) acting on (normalised) observations.

    Args (besides `Agent`'s; `lr` is the step size, 0.02):
        n_delta: directions drawn per update (2 x n_delta episodes).
        n_top: directions kept for the step (None: all n_delta).
        delta_std: the exploration noise's scale.
        zero_policy: start from zero weights (else PyTorch's default init).
        alive_bonus_offset: added to each step's reward in the candidates' returns (e.g. -1 to cancel MuJoCo's
            alive bonus); the returns recorded as episodes stay the env's own.
        net_arch: hidden layer sizes ([]: linear, sb3-contrib's LinearPolicy).
        with_bias: layers with biases (LinearPolicy: no).
        squash_output: continuous actions: tanh, rescaled to the action bounds (else clipped to them).
        activation: relu or tanh between hidden layers.
    """

    action_spaces = ("discrete", "continuous")
    population_support = False
    default_models = {"image": "nature_cnn", "vector": "mlp"}  # (unused: the policy is net_arch)

    def __init__(self, envs, model=None, buffer=None, *, n_delta: int = 8, n_top: int | None = None,
                 lr: float = 0.02, delta_std: float = 0.05, zero_policy: bool = True, alive_bonus_offset: float = 0.0,
                 net_arch: Sequence[int] = (), with_bias: bool = False, squash_output: bool = False,
                 activation: str = "relu", **kwargs) -> None:
        whole = lambda value: not isinstance(value, bool) and float(value).is_integer()  # noqa: E731
        if not whole(n_delta) or int(n_delta) < 1:
            raise UserError(f"agent.n_delta={n_delta}: use a whole number of 1 or more (directions per update)")
        n_top = int(n_delta) if n_top is None else n_top
        if not whole(n_top) or not 1 <= int(n_top) <= int(n_delta):
            raise UserError(f"agent.n_top={n_top}: use a whole number from 1 to agent.n_delta={n_delta} (or null)")
        if not float(delta_std) > 0:
            raise UserError(f"agent.delta_std={delta_std}: use a positive noise scale, e.g. 0.05")
        if activation not in ACTIVATIONS:
            raise UserError(f"agent.activation={activation!r}: use {' or '.join(ACTIVATIONS)}")
        sizes = list(net_arch or [])
        if not all(whole(units) and int(units) > 0 for units in sizes):
            raise UserError(f"agent.net_arch={sizes}: use a list of layer sizes ([] for a linear policy)")
        self.n_delta, self.n_top, self.delta_std = int(n_delta), int(n_top), float(delta_std)
        self.zero_policy, self.alive_bonus_offset = bool(zero_policy), float(alive_bonus_offset)
        self.hidden, self.with_bias, self.activation = [int(units) for units in sizes], bool(with_bias), activation
        self.squash = bool(squash_output)
        super().__init__(envs, model, buffer, lr=lr, **kwargs)

    # ----- the policy: one flat weight vector ---------------------------------------------------------
    def build(self) -> None:
        if len(self.obs_shape) != 1:
            raise UserError(f"agent=ars acts on vector observations, got shape {self.obs_shape}; pick an env with vector "
                            "observations (a linear policy over pixels is not what ARS searches)")
        sizes = [self.obs_shape[0], *self.hidden, self.n_actions]
        self.layers = [(n_in, n_out) for n_in, n_out in zip(sizes[:-1], sizes[1:])]  # kernel, then bias, per layer
        self.n_params = sum(n_in * n_out + (n_out if self.with_bias else 0) for n_in, n_out in self.layers)
        initial = np.zeros(self.n_params, np.float32)
        if not self.zero_policy:  # PyTorch's Linear default: U(-1/sqrt(fan_in), 1/sqrt(fan_in)), weights and biases
            parts = []
            for n_in, n_out in self.layers:
                bound = 1.0 / math.sqrt(n_in)
                parts.append(self.rng.uniform(-bound, bound, n_in * n_out + (n_out if self.with_bias else 0)))
            initial = np.concatenate(parts).astype(np.float32)
        self.weights = tf.Variable(initial, name="weights")
        self.updates = tf.Variable(0, dtype=tf.int64, name="updates")

    def models(self):
        return {}

    def optimizers(self):
        return {}

    def extra_variables(self):
        return {"weights": self.weights, "updates": self.updates}

    def split(self, weights):
        """[(kernel [..., in, out], bias [..., out] or None)] of flat `weights` [..., n_params] (NumPy or TF)."""
        out, at = [], 0
        lead = list(weights.shape[:-1])
        reshape = tf.reshape if isinstance(weights, tf.Tensor | tf.Variable) else np.reshape
        for n_in, n_out in self.layers:
            kernel = reshape(weights[..., at:at + n_in * n_out], lead + [n_in, n_out])
            at += n_in * n_out
            bias = None
            if self.with_bias:
                bias, at = weights[..., at:at + n_out], at + n_out
            out.append((kernel, bias))
        return out

    def to_actions(self, outputs, xp):
        """The policy's outputs as actions: the argmax (discrete), tanh rescaled to the bounds (squash_output)
        or the outputs (continuous; clipped to the bounds where they are used)."""
        if self.action_kind == "discrete":
            return xp.argmax(outputs, axis=-1)
        if not self.squash:
            return outputs
        low, high = self.action_space.low, self.action_space.high
        return low + (xp.tanh(outputs) + 1.0) * 0.5 * (high - low)

    def candidate_actions(self, weights: np.ndarray, obs: np.ndarray) -> np.ndarray:
        """Each candidate's action on its env's observation: `weights` [n, n_params], `obs` [n, features]."""
        h = obs.astype(np.float32)
        for i, (kernel, bias) in enumerate(self.split(weights)):
            h = np.einsum("ni,nio->no", h, kernel)
            if bias is not None:
                h = h + bias
            if i < len(self.layers) - 1:
                h = ACTIVATIONS[self.activation](h)
        return self.to_actions(h, np)

    def policy(self, obs):
        h = tf.cast(obs, tf.float32)
        for i, (kernel, bias) in enumerate(self.split(tf.convert_to_tensor(self.weights))):
            h = tf.matmul(h, kernel) + (0.0 if bias is None else bias)
            if i < len(self.layers) - 1:
                h = TF_ACTIVATIONS[self.activation](h)
        if self.action_kind == "discrete":
            return tf.argmax(h, axis=-1)
        if not self.squash:
            return h
        low, high = (tf.constant(bound, tf.float32) for bound in (self.action_space.low, self.action_space.high))
        return low + (tf.tanh(h) + 1.0) * 0.5 * (high - low)

    # ----- the search -------------------------------------------------------------------------------
    def run_candidates(self, candidates: np.ndarray) -> np.ndarray:
        """One episode of each candidate's weights, n_envs at a time (env copy i runs candidate i of a batch from
        a fresh reset): their returns with alive_bonus_offset per step. The env steps of candidates still in their
        episode count; each finished episode is recorded with the env's own return."""
        returns = np.zeros(len(candidates))
        for start in range(0, len(candidates), self.n_envs):
            batch = candidates[start:start + self.n_envs]
            if self.__dict__.pop("_fresh", False):
                obs = self._raw_obs  # (the envs were reset with the run's seed when the agent was made)
            else:
                obs, _ = self.envs.reset()
            n = len(batch)
            active, own = np.ones(n, bool), np.zeros(n)
            while active.any():
                live = np.flatnonzero(active)
                normed = self.normalizer.obs(obs[live], update=True)
                actions = np.zeros((self.n_envs, *self.action_space.shape), self.action_space.dtype)
                actions[live] = self.candidate_actions(batch[live], normed)
                if self.action_kind == "continuous":
                    actions = np.clip(actions, self.action_space.low, self.action_space.high)
                obs, rewards, terminated, truncated, _ = self.envs.step(actions)
                self.steps += len(live)
                own[live] += rewards[live]
                returns[start + live] += rewards[live] + self.alive_bonus_offset
                for i in live[(terminated | truncated)[live]]:
                    active[i] = False
                    self._finished.append((self.steps, float(own[i]), 0))
        return returns

    def train_iteration(self) -> dict[str, float]:
        delta_std = self.delta_std
        deltas = self.tf_rng.normal([self.n_delta, self.n_params], dtype=tf.float32).numpy()
        weights = self.weights.numpy()
        candidates = np.concatenate([weights + delta_std * deltas, weights - delta_std * deltas])
        returns = self.run_candidates(candidates)
        plus, minus = returns[:self.n_delta], returns[self.n_delta:]
        top = np.argsort(-np.maximum(plus, minus), kind="stable")[:self.n_top]
        plus, minus = plus[top], minus[top]
        std = float(np.std(np.concatenate([plus, minus]), ddof=1))  # (PyTorch's std: unbiased)
        step_size = self.current_lr() / (self.n_top * std + 1e-6)
        self.weights.assign((weights + step_size * ((plus - minus) @ deltas[top])).astype(np.float32))
        self.updates.assign_add(1)
        return {"return_std": std, "step_size": step_size}

    def _reset_envs(self, seed, update_statistics: bool = True) -> np.ndarray:
        self._fresh = True
        return super()._reset_envs(seed, update_statistics=False)  # (the candidates' first steps update them)
