"""Running observation normalisation and reward scaling (as SB3's VecNormalize), in NumPy."""
from __future__ import annotations

import numpy as np


class RunningMeanStd:
    """Running mean and variance of batches (parallel Welford update)."""

    def __init__(self, shape: tuple[int, ...] = ()) -> None:
        self.mean, self.var, self.count = np.zeros(shape), np.ones(shape), 1e-4

    def update(self, batch: np.ndarray) -> None:
        mean, var, n = batch.mean(axis=0), batch.var(axis=0), batch.shape[0]
        delta, total = mean - self.mean, self.count + n
        self.mean = self.mean + delta * n / total
        self.var = (self.var * self.count + var * n + np.square(delta) * self.count * n / total) / total
        self.count = total

    def state_dict(self) -> dict[str, np.ndarray]:
        return {"mean": self.mean, "var": self.var, "count": np.float64(self.count)}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        self.mean, self.var, self.count = np.array(state["mean"]), np.array(state["var"]), float(state["count"])


class Normalizer:
    """Normalises observations to ~N(0, 1) and scales rewards by the std of the discounted return.

    Statistics update only while training (`update=True`); play and eval use the frozen ones.
    """

    def __init__(self, obs_shape: tuple[int, ...], n_envs: int, gamma: float, obs: bool, reward: bool,
                 clip: float = 10.0, epsilon: float = 1e-8) -> None:
        self.normalize_obs, self.normalize_reward = obs, reward
        self.gamma, self.clip, self.epsilon = gamma, clip, epsilon
        self.obs_rms, self.return_rms = RunningMeanStd(obs_shape), RunningMeanStd()
        self.returns = np.zeros(n_envs)

    def obs(self, obs: np.ndarray, update: bool = False) -> np.ndarray:
        if not self.normalize_obs:
            return obs
        if update:
            self.obs_rms.update(obs)
        scaled = (obs - self.obs_rms.mean) / np.sqrt(self.obs_rms.var + self.epsilon)
        return np.clip(scaled, -self.clip, self.clip).astype(np.float32)

    def reward(self, rewards: np.ndarray, dones: np.ndarray) -> np.ndarray:
        if not self.normalize_reward:
            return rewards
        self.returns = self.returns * self.gamma + rewards
        self.return_rms.update(self.returns)
        self.returns[dones] = 0.0
        return self.scale_reward(rewards)

    def scale_reward(self, rewards: np.ndarray) -> np.ndarray:
        """Rewards divided by the current std of the discounted return, clipped (statistics unchanged)."""
        if not self.normalize_reward:
            return rewards
        return np.clip(rewards / np.sqrt(self.return_rms.var + self.epsilon), -self.clip, self.clip).astype(np.float32)

    def state_dict(self) -> dict[str, np.ndarray]:
        return {f"obs/{k}": v for k, v in self.obs_rms.state_dict().items()} | {
            f"return/{k}": v for k, v in self.return_rms.state_dict().items()}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        self.obs_rms.load_state_dict({k[4:]: v for k, v in state.items() if k.startswith("obs/")})
        self.return_rms.load_state_dict({k[7:]: v for k, v in state.items() if k.startswith("return/")})


class MemberNormalizers:
    """A population's normalisation: each member's own `Normalizer` (its statistics, its discount, its running
    returns) on its block of the env columns, the members' blocks one after the other (member-major)."""

    def __init__(self, members: list[Normalizer]) -> None:
        self.members = members
        self.normalize_obs, self.normalize_reward = members[0].normalize_obs, members[0].normalize_reward

    def _blocks(self, x: np.ndarray) -> list[np.ndarray]:
        return np.split(np.asarray(x), len(self.members))

    def obs(self, obs: np.ndarray, update: bool = False) -> np.ndarray:
        if not self.normalize_obs:
            return obs
        return np.concatenate([m.obs(part, update) for m, part in zip(self.members, self._blocks(obs))])

    def reward(self, rewards: np.ndarray, dones: np.ndarray) -> np.ndarray:
        if not self.normalize_reward:
            return rewards
        return np.concatenate([m.reward(r, d) for m, r, d in zip(self.members, self._blocks(rewards), self._blocks(dones))])

    def scale_reward(self, rewards: np.ndarray) -> np.ndarray:
        if not self.normalize_reward:
            return rewards
        return np.concatenate([m.scale_reward(part) for m, part in zip(self.members, self._blocks(rewards))])

    def reset_returns(self) -> None:
        for member in self.members:
            member.returns[:] = 0.0
