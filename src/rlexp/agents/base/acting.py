"""Acting with a trained agent: actions for observations (deterministic or drawn with the evaluation
generator), evaluation episodes and play."""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import tensorflow as tf

from rlexp.envs.wrappers import with_lost_lives
from rlexp.errors import UserError


def fits(space: gym.Space, obs: Any, batched: bool) -> bool:
    """Whether `obs` is one observation of `space` (a batch of them with `batched`), by its parts' shapes."""
    if isinstance(space, gym.spaces.Dict):
        return isinstance(obs, Mapping) and set(obs) == set(space.spaces) and all(
            fits(space[key], obs[key], batched) for key in space.spaces)
    if isinstance(space, gym.spaces.Tuple):
        return isinstance(obs, (tuple, list)) and len(obs) == len(space.spaces) and all(
            fits(part, o, batched) for part, o in zip(space.spaces, obs))
    shape = np.shape(obs)
    return shape[1:] == space.shape and len(shape) == len(space.shape) + 1 if batched else shape == space.shape


def shapes(x: Any) -> Any:
    """The shapes of a space's or an observation's parts, as they print in an error message."""
    parts = x.spaces if isinstance(x, (gym.spaces.Dict, gym.spaces.Tuple)) else x
    if isinstance(parts, Mapping):
        return {key: shapes(part) for key, part in parts.items()}
    if isinstance(parts, tuple):
        return tuple(shapes(part) for part in parts)
    return x.shape if isinstance(x, gym.Space) else np.shape(x)


class Acting:
    """`Agent`'s acting and evaluation, apart from training's envs and generators."""

    def flat_obs(self, obs: Any) -> np.ndarray:
        """A batch of observations as the agent sees them (Dict/Tuple observations flattened)."""
        if self.structured_space is None or isinstance(obs, np.ndarray):
            return obs
        batched = gym.vector.utils.batch_space(self.structured_space, len(obs) if not isinstance(obs, dict) else
                                               len(next(iter(obs.values()))))
        return np.stack([gym.spaces.flatten(self.structured_space, o)
                         for o in gym.vector.utils.iterate(batched, obs)]).astype(np.float32)

    def act(self, obs: Any, episode_starts: np.ndarray | bool | None = None, deterministic: bool = True) -> np.ndarray:
        """Actions for a batch of observations, or one action for one observation (as SB3's `predict`): the
        policy's deterministic ones, or (`deterministic=False`) drawn from it with the evaluation generator.
        `episode_starts` flags the envs whose episode starts with this observation (recurrent policies reset
        their state there; None: all on the first call). Another shape raises `UserError` naming the shape."""
        obs, single = self.obs_batch(obs)
        if single and episode_starts is not None:
            episode_starts = np.reshape(episode_starts, (1,))
        obs = self.normalizer.obs(self.flat_obs(obs)).astype(self.obs_dtype, copy=False)
        actions = self.policy_actions(obs, episode_starts, deterministic)
        if self.action_kind == "continuous":
            actions = np.clip(actions, self.action_space.low, self.action_space.high)
        return actions[0] if single else actions

    def obs_batch(self, obs: Any) -> tuple[Any, bool]:
        """(a batch of observations, whether `obs` was one observation): one gets a batch axis. Dict/Tuple
        observations may come as their parts or flattened (as rlexp's envs give them)."""
        space = self.structured_space
        if space is not None and fits(space, obs, batched=False):
            return gym.spaces.flatten(space, obs)[None].astype(np.float32), True
        if space is not None and fits(space, obs, batched=True):
            return obs, False
        if not isinstance(obs, (Mapping, tuple)):
            array = np.asarray(obs)
            if fits(self.observation_space, array, batched=False):
                return array[None], True
            if fits(self.observation_space, array, batched=True):
                return array, False
        shape = self.observation_space.shape
        batch = f"(n, {', '.join(map(str, shape))})" if shape else "(n,)"
        expected = (f"one of shape {shape} or a batch of shape {batch}" if space is None else
                    f"one with parts of shapes {shapes(space)} or flattened to {shape}, or a batch of either")
        raise UserError(f"act: an observation of shape {shapes(obs)}; {type(self).__name__} takes {expected}")

    def policy_actions(self, obs: np.ndarray, episode_starts: np.ndarray | None,
                       deterministic: bool = True) -> np.ndarray:
        """`policy` (or `sample_policy`) on a batch of (normalised) observations, as NumPy actions."""
        functions = self.__dict__.setdefault("_acting_functions", {})
        if not deterministic:
            _ = self.eval_rng  # the generator is made here, outside the graph
        if deterministic not in functions:
            functions[deterministic] = tf.function(
                self.policy if deterministic else lambda obs: self.sample_policy(obs, self.eval_rng))
        return functions[deterministic](tf.convert_to_tensor(obs)).numpy()

    @property
    def eval_rng(self) -> tf.random.Generator:
        """The generator of stochastic evaluation, apart from training's `tf_rng` (evaluating never shifts
        training's draws); `evaluate` restarts it from the evaluation seed."""
        if "_eval_rng" not in self.__dict__:
            self._eval_rng = tf.random.Generator.from_seed(self.eval_seed)
        return self._eval_rng

    @property
    def eval_seed(self) -> int:
        """Seed of the evaluation envs and generator: apart from training's (without a seed, the OS's entropy)."""
        if "_eval_seed" not in self.__dict__:
            entropy = int(np.random.SeedSequence().entropy % 2**31)
            self._eval_seed = self.seed + 10_000 if self.seed is not None else entropy
        return self._eval_seed

    def play(self, envs: gym.vector.VectorEnv, episodes: int = 1, video_dir: str | Path | None = None,
             frame_dir: str | Path | None = None, fps: int = 30, name: str = "play",
             deterministic: bool = True) -> list[float]:
        """Episodes in a 1-env vector env (make it with render_mode="rgb_array" to record
        `video_dir/<name>.mp4` or jpg frames). Returns each episode's return."""
        from rlexp.envs.playback import play

        return play(self, envs, episodes=episodes, video_dir=video_dir, frame_dir=frame_dir, fps=fps, name=name,
                    deterministic=deterministic)

    def evaluate(self, envs: gym.vector.VectorEnv, episodes: int, deterministic: bool = True) -> list[float]:
        """Run `episodes` episodes, spread over the given envs (each env's first episodes), with the
        deterministic policy or (`deterministic=False`) actions drawn from it. With a seed, each call starts
        from the same env seeds and generator state, so evaluations differ only by the weights. A recurrent
        policy's state restarts at episode starts and lost lives, as in training."""
        from rlexp.checks.values import whole

        episodes = whole("run.eval_episodes", episodes, 0)
        n = envs.num_envs
        quota = np.array([episodes // n + (i < episodes % n) for i in range(n)])
        returns: list[float] = []
        counted = np.zeros(n, int)
        running = np.zeros(n)
        obs, _ = envs.reset(seed=None if self.seed is None else self.eval_seed)
        if not deterministic:
            self.eval_rng.reset_from_seed(self.eval_seed)
        starts = np.ones(n, bool)
        while (counted < quota).any():
            obs, rewards, terminated, truncated, info = envs.step(self.act(obs, starts, deterministic))
            starts = with_lost_lives(terminated | truncated, info)  # a recurrent state restarts as in training
            running += rewards
            for i in np.flatnonzero(terminated | truncated):
                if counted[i] < quota[i]:
                    returns.append(float(running[i]))
                    counted[i] += 1
                running[i] = 0.0
        return returns
