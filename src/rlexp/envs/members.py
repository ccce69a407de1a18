"""The envs of a population: each member's own vector env (seeded as its single run seeds its envs), stepped
as one vector env whose columns are the members' envs one after the other (member-major)."""
from __future__ import annotations

from typing import Any, Sequence

import types

import gymnasium as gym
import numpy as np

from rlexp.envs.graph import GraphVectorEnv


def _concat_infos(infos: list[dict[str, Any]], sizes: list[int]) -> dict[str, Any]:
    """The members' step infos as one: per-env arrays concatenated (a key one member lacks: empty there)."""
    keys = {k for info in infos for k in info}
    merged: dict[str, Any] = {}
    for key in keys:
        parts = []
        for info, n in zip(infos, sizes):
            if key in info:
                parts.append(np.asarray(info[key]) if not isinstance(info[key], np.ndarray) else info[key])
            else:
                like = next(i[key] for i in infos if key in i)
                parts.append(np.zeros((n, *np.shape(like)[1:]), np.asarray(like).dtype))
        try:
            merged[key] = np.concatenate(parts)
        except ValueError:  # not per-env arrays
            merged[key] = infos[0].get(key)
    return merged


class MemberEnvs(gym.vector.VectorEnv):
    """`members` vector envs of the same spaces as one vector env of all their copies, member-major."""

    def __init__(self, members: Sequence[gym.vector.VectorEnv]) -> None:
        self.members = list(members)
        first = self.members[0]
        self.envs_per_member = first.num_envs
        self.num_envs = sum(e.num_envs for e in self.members)
        self.single_observation_space, self.single_action_space = first.single_observation_space, first.single_action_space
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, self.num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, self.num_envs)
        self.metadata = dict(getattr(first, "metadata", {}))
        for attribute in ("structured_observation_space", "spec", "render_mode"):
            if hasattr(first, attribute):
                setattr(self, attribute, getattr(first, attribute))

    def reset(self, *, seed: Sequence[int | None] | int | None = None, options: dict | None = None):
        """Reset every member's envs; `seed`: one seed per member (an int: that seed for member 0 and the next
        ones for the others)."""
        seeds = seed if isinstance(seed, (list, tuple)) else [None if seed is None else seed + i
                                                               for i in range(len(self.members))]
        results = [env.reset(seed=s, options=options) for env, s in zip(self.members, seeds)]
        return np.concatenate([r[0] for r in results]), _concat_infos([r[1] for r in results],
                                                                       [e.num_envs for e in self.members])

    def step(self, actions):
        E = self.envs_per_member
        results = [env.step(actions[i * E:(i + 1) * E]) for i, env in enumerate(self.members)]
        obs, rewards, terminated, truncated = (np.concatenate([r[k] for r in results]) for k in range(4))
        return obs, rewards, terminated, truncated, _concat_infos([r[4] for r in results], [E] * len(self.members))

    def close(self, **kwargs) -> None:
        for env in self.members:
            env.close()

    def call(self, name: str, *args, **kwargs):
        return tuple(x for env in self.members for x in env.call(name, *args, **kwargs))

    def get_attr(self, name: str):
        return tuple(x for env in self.members for x in env.get_attr(name))


class MemberGraphEnvs(GraphVectorEnv):
    """Members' graph envs (`rlexp.envs.graph`) as one, also inside a graph. In a graph all copies step as one
    batch (one set of ops, however many members), and each member's restarts are drawn from its own env's generator
    (seeded as its single run seeds it), its block of the envs' last axis: a member's episodes are its single
    run's."""

    def __init__(self, members: Sequence[GraphVectorEnv]) -> None:
        self.members = list(members)
        first = self.members[0]
        self.envs_per_member = first.num_envs
        self.single_observation_space, self.single_action_space = first.single_observation_space, first.single_action_space
        self.num_envs, self.max_episode_steps = sum(e.num_envs for e in self.members), first.max_episode_steps
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, self.num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, self.num_envs)
        self.spec = getattr(first, "spec", None)
        self.state_size = first.state_size
        self._tf = None

    reset = MemberEnvs.reset
    step = MemberEnvs.step
    close = MemberEnvs.close

    def initial_state(self, xp, uniform, n):
        return self.members[0].initial_state(xp, uniform, n)

    def dynamics(self, xp, state, actions):
        return self.members[0].dynamics(xp, state, actions)

    def observe(self, xp, state):
        return self.members[0].observe(xp, state)

    def to_graph(self) -> None:
        import tensorflow as tf

        for env in self.members:  # each member's generator, made and seeded as its single run's
            env.to_graph()
        state = np.concatenate([env.state for env in self.members], axis=1)
        elapsed = np.concatenate([env.elapsed for env in self.members])
        if self._tf is None:
            from rlexp.envs.graph import _tensorflow_ops

            self._tf = types.SimpleNamespace(ops=_tensorflow_ops(), state=tf.Variable(state, dtype=tf.float64),
                                             elapsed=tf.Variable(elapsed), rng=_MemberUniform(self.members))
        else:
            self._tf.state.assign(state)
            self._tf.elapsed.assign(elapsed)

    def from_graph(self) -> None:
        state, elapsed = self._tf.state.numpy(), self._tf.elapsed.numpy()
        E = self.envs_per_member
        for i, env in enumerate(self.members):
            env.state, env.elapsed = state[:, i * E:(i + 1) * E].copy(), elapsed[i * E:(i + 1) * E].copy()


class _MemberUniform:
    """`uniform` draws for all members' envs: each member's block of the last axis from its env's generator."""

    def __init__(self, members: Sequence[GraphVectorEnv]) -> None:
        self.members = members

    def uniform(self, shape, low, high, dtype):
        import tensorflow as tf

        own = tuple(shape[:-1]) + (self.members[0].num_envs,)
        return tf.concat([env._tf.rng.uniform(own, low, high, dtype) for env in self.members], axis=-1)


def member_envs(members: Sequence[gym.vector.VectorEnv]) -> gym.vector.VectorEnv:
    """The members' vector envs as one (graph envs stay steppable inside a graph)."""
    if all(isinstance(env, GraphVectorEnv) for env in members):
        return MemberGraphEnvs(members)
    return MemberEnvs(members)


def make_member_envs(env_id: str, n_envs: int, seeds: Sequence[int], **kwargs: Any) -> gym.vector.VectorEnv:
    """`n_envs` copies of `env_id` for each seed, built as `rlexp.envs.make_envs` builds a single run's."""
    from rlexp.envs.make import make_envs

    return member_envs([make_envs(env_id, n_envs, seed, **kwargs) for seed in seeds])
