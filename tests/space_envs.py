"""Small envs with the spaces gymnasium's classic envs don't have, registered on import (env.imports)."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class SpacesEnv(gym.Env):
    """A target is drawn each step; the reward is how well the action matches it. Episodes last 20 steps
    (the registered time limit)."""

    def __init__(self, action: str = "discrete", observation: str = "box") -> None:
        self.action_kind, self.obs_kind = action, observation
        self.action_space = {"discrete": spaces.Discrete(3), "multi_discrete": spaces.MultiDiscrete([3, 2]),
                             "multi_binary": spaces.MultiBinary(3)}[action]
        vector = spaces.Box(-1.0, 1.0, (3,), np.float32)
        self.observation_space = {
            "box": vector,
            "dict": spaces.Dict({"image": spaces.Box(0, 255, (36, 36, 1), np.uint8), "vector": vector}),
            "tuple": spaces.Tuple((vector, spaces.Discrete(4))),
        }[observation]

    def _observe(self):
        self.target = self.np_random.uniform(-1, 1, 3).astype(np.float32)
        if self.obs_kind == "dict":
            image = np.zeros((36, 36, 1), np.uint8)
            image[:, :12] = 255 * (self.target[0] > 0)
            return {"image": image, "vector": self.target}
        if self.obs_kind == "tuple":
            return self.target, int(self.t % 4)
        return self.target

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._observe(), {}

    def step(self, action):
        signs = (self.target > 0).astype(int)
        if self.action_kind == "discrete":
            reward = float(action == signs[0])
        elif self.action_kind == "multi_discrete":
            reward = float(action[0] == signs[0]) + float(action[1] == signs[1])
        else:
            reward = float(np.sum(np.asarray(action) == signs))
        self.t += 1
        return self._observe(), reward, False, False, {}


for _action in ("discrete", "multi_discrete", "multi_binary"):
    for _obs in ("box", "dict", "tuple"):
        gym.register(f"Spaces-{_action}-{_obs}-v0", entry_point=SpacesEnv, max_episode_steps=20,
                     kwargs={"action": _action, "observation": _obs})


class BitFlipEnv(gym.Env):
    """Andrychowicz et al.'s bit flipping as a goal-conditioned env: flip one of n bits a step to reach the goal's
    bits; reward 0 when they match, -1 otherwise (`compute_reward`, batched); n steps an episode."""

    def __init__(self, n_bits: int = 4) -> None:
        self.n = n_bits
        bits = spaces.Box(0.0, 1.0, (n_bits,), np.float32)
        self.observation_space = spaces.Dict({"achieved_goal": bits, "desired_goal": bits, "observation": bits})
        self.action_space = spaces.Discrete(n_bits)

    def _observe(self):
        return {"achieved_goal": self.state.copy(), "desired_goal": self.goal.copy(), "observation": self.state.copy()}

    def compute_reward(self, achieved_goal, desired_goal, info):
        return -(np.abs(np.asarray(achieved_goal) - np.asarray(desired_goal)).sum(axis=-1) > 0).astype(np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.state = self.np_random.integers(0, 2, self.n).astype(np.float32)
        self.goal = self.np_random.integers(0, 2, self.n).astype(np.float32)
        return self._observe(), {}

    def step(self, action):
        self.state[int(action)] = 1.0 - self.state[int(action)]
        reward = float(self.compute_reward(self.state, self.goal, {}))
        return self._observe(), reward, reward == 0.0, False, {}


gym.register("BitFlip-v0", entry_point=BitFlipEnv, max_episode_steps=4)
