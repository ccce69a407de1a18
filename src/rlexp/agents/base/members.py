"""The member axis of a population: N independent agents trained as one, their rows laid out member-major.

A population of N members with E envs each is one agent over N * E env columns, member n's columns being
n * E ... n * E + E - 1. Every tensor of rows (observations, actions, returns) holds the members' rows one block
after the other, in the order a single run holds its own; models stack the members' weights on a first axis
(`rlexp.models.stacked`). What couples rows in a single run is done per member here:

- a loss's means over rows become per-member means, and the members' losses are summed, so each member's gradient
  is its own (`mean`, `standardize`);
- gradient-norm clipping is per member (`clip_gradients`);
- random draws come from each member's own generator, seeded as its single run seeds it (`MemberGenerators`);
- a member whose training stopped takes no optimizer step (`active`, see `OnPolicyAgent.minimize`).
"""
from __future__ import annotations

from typing import Sequence

import tensorflow as tf

from rlexp.agents.distributions import no_autograph


class MemberGenerators:
    """One `tf.random.Generator` per member behind the Generator API the agents use: a draw of shape
    [N * B, ...] is member n's own draw of shape [B, ...] from its generator, for rows n * B ... n * B + B - 1."""

    def __init__(self, seeds: Sequence[int]) -> None:
        self.generators = [tf.random.Generator.from_seed(int(seed)) for seed in seeds]

    def _draw(self, method: str, shape, axis: int = 0, **kwargs) -> tf.Tensor:
        shape = tf.convert_to_tensor(shape)
        per_member = tf.tensor_scatter_nd_update(shape, [[axis]], [shape[axis] // len(self.generators)])
        return tf.concat([getattr(g, method)(per_member, **kwargs) for g in self.generators], axis)

    def uniform(self, shape, minval=0, maxval=None, dtype=tf.float32, name=None, axis: int = 0) -> tf.Tensor:
        """`tf.random.Generator.uniform`; `axis`: the member axis (the rows, by default)."""
        return self._draw("uniform", shape, axis, minval=minval, maxval=maxval, dtype=dtype)

    def normal(self, shape, mean=0.0, stddev=1.0, dtype=tf.float32, name=None, axis: int = 0) -> tf.Tensor:
        return self._draw("normal", shape, axis, mean=mean, stddev=stddev, dtype=dtype)

    @property
    def state(self) -> tf.Tensor:
        """The members' generator states, [N, state size]."""
        return tf.stack([g.state for g in self.generators])

    def reset(self, states) -> None:
        for g, state in zip(self.generators, states):
            g.reset(state)


class Members:
    """The seeds of a population's members and the maths of its member axis."""

    def __init__(self, seeds: Sequence[int], envs_per_member: int) -> None:
        self.seeds = [int(s) for s in seeds]
        self.count = len(self.seeds)
        self.envs = int(envs_per_member)
        self.active = tf.Variable(tf.ones([self.count]), trainable=False, name="members_active")
        self.lr_scale: tf.Tensor | None = None  # members' learning rates over the optimizer's (run.members.lr)

    @no_autograph
    def blocks(self, x: tf.Tensor) -> tf.Tensor:
        """[N * B, ...] rows -> [N, B, ...]."""
        return tf.reshape(x, tf.concat([[self.count, -1], tf.shape(x)[1:]], 0))

    @no_autograph
    def unblock(self, x: tf.Tensor) -> tf.Tensor:
        """[N, B, ...] -> [N * B, ...]."""
        return tf.reshape(x, tf.concat([[-1], tf.shape(x)[2:]], 0))

    @no_autograph
    def mean(self, x: tf.Tensor) -> tf.Tensor:
        """Each member's mean of its rows of `x` ([N * B] -> [N])."""
        return tf.reduce_mean(self.blocks(x), axis=1)

    @no_autograph
    def standardize(self, x: tf.Tensor, epsilon: float) -> tf.Tensor:
        """(x - mean) / (std + epsilon) over each member's rows."""
        rows = self.blocks(x)
        mean, var = tf.nn.moments(rows, axes=[1], keepdims=True)
        return self.unblock((rows - mean) / (tf.sqrt(var) + epsilon))

    @no_autograph
    def member_major(self, x: tf.Tensor) -> tf.Tensor:
        """A rollout tensor [T, N * E, ...] as rows [N * T * E, ...]: member n's rows are its T * E transitions in
        the order a single run flattens them (time-major)."""
        shape = tf.shape(x)
        split = tf.reshape(x, tf.concat([[shape[0], self.count, self.envs], shape[2:]], 0))
        swapped = tf.transpose(split, [1, 0, 2, *range(3, x.shape.rank + 1)])
        return tf.reshape(swapped, tf.concat([[-1], shape[2:]], 0))

    @no_autograph
    def time_major(self, rows: tf.Tensor, steps: int) -> tf.Tensor:
        """`member_major`'s inverse for per-row values: [N * T * E] -> [T, N * E]."""
        split = tf.reshape(rows, [self.count, steps, self.envs])
        return tf.reshape(tf.transpose(split, [1, 0, 2]), [steps, self.count * self.envs])

    @no_autograph
    def shuffle(self, x: tf.Tensor, order: tf.Tensor, mini_batches: int) -> tf.Tensor:
        """Member-major rows [N * S, ...] gathered in each member's own `order` ([N, S] indices into its S rows)
        and cut into minibatches: [mini_batches, N * S / mini_batches, ...], minibatch i holding every member's
        i-th minibatch, member-major."""
        rows = tf.gather(self.blocks(x), order, batch_dims=1)  # [N, S, ...]
        shape = tf.shape(rows)
        cut = tf.reshape(rows, tf.concat([[self.count, mini_batches, -1], shape[2:]], 0))
        swapped = tf.transpose(cut, [1, 0, 2, *range(3, x.shape.rank + 2)])
        return tf.reshape(swapped, tf.concat([[mini_batches, -1], shape[2:]], 0))

    @no_autograph
    def clip_gradients(self, grads: list[tf.Tensor], clip_norm: float) -> list[tf.Tensor]:
        """Each member's gradients scaled to its own global norm `clip_norm` at most, as
        `tf.clip_by_global_norm` scales a single run's (every gradient has the member axis first)."""
        squares = tf.add_n([tf.reduce_sum(tf.reshape(tf.square(g), [self.count, -1]), axis=1) for g in grads])
        norms = tf.sqrt(squares)
        scale = clip_norm * tf.minimum(1.0 / norms, 1.0 / clip_norm)  # tf.clip_by_global_norm's formula
        return [g * tf.reshape(scale, [self.count] + [1] * (g.shape.rank - 1)) for g in grads]

    # ----- flat parameter vectors, one per member (TRPO's natural gradient) --------------------------------
    @no_autograph
    def flat(self, tensors: list[tf.Tensor]) -> tf.Tensor:
        """Each member's parameters (or gradients) as one vector: [N, P]."""
        return tf.concat([tf.reshape(t, [self.count, -1]) for t in tensors], axis=1)

    @no_autograph
    def assign_flat(self, variables: list[tf.Variable], flat: tf.Tensor) -> None:
        """Write [N, P] vectors back into the stacked variables."""
        sizes = [int(v.shape.num_elements()) // self.count for v in variables]
        for v, part in zip(variables, tf.split(flat, sizes, axis=1)):
            v.assign(tf.reshape(part, v.shape))

    @no_autograph
    def dot(self, a: tf.Tensor, b: tf.Tensor) -> tf.Tensor:
        """Each member's dot product of two [N, P] vectors: [N]."""
        return tf.reduce_sum(a * b, axis=1)

    def conjugate_gradient(self, matrix_vector, b: tf.Tensor, iterations: int, residual_tolerance: float) -> tf.Tensor:
        """Each member's solution of A x = b ([N, P]) by conjugate gradient, as `rlexp.agents.trpo` solves a single
        run's: a member whose residual is below the tolerance takes no more steps (its single run stops there)."""
        x = tf.zeros_like(b)
        r, p = b, b
        r_dot_r = self.dot(r, r)
        going = r_dot_r >= residual_tolerance
        for _ in tf.range(iterations):
            if not tf.reduce_any(going):
                break
            z = matrix_vector(p)
            alpha = tf.where(going, r_dot_r / self.dot(p, z), 0.0)[:, None]
            x += alpha * p
            r -= alpha * z
            new_r_dot_r = self.dot(r, r)
            p = tf.where(going[:, None], r + (new_r_dot_r / r_dot_r)[:, None] * p, p)
            r_dot_r = tf.where(going, new_r_dot_r, r_dot_r)
            going = going & (r_dot_r >= residual_tolerance)
        return x

    @no_autograph
    def scale_steps(self, variables: list[tf.Variable], before: list[tf.Tensor]) -> None:
        """Each member's step since `before` scaled by its `lr_scale`: its own learning rate (the optimizers'
        steps are linear in the rate)."""
        for variable, old in zip(variables, before):
            scale = tf.reshape(self.lr_scale, [self.count] + [1] * (variable.shape.rank - 1))
            variable.assign(old + scale * (variable - old))

    @no_autograph
    def keep_stopped(self, variables: list[tf.Variable], before: list[tf.Tensor]) -> None:
        """Put back the values `before` an optimizer step for the members that have stopped."""
        active = self.active.read_value() > 0
        for variable, old in zip(variables, before):
            mask = tf.reshape(active, [self.count] + [1] * (variable.shape.rank - 1))
            variable.assign(tf.where(mask, variable, old))
