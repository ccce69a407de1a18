"""Demonstrations in Minari's dataset format (Farama's standard for offline RL data): `mode=play +demo_dir=DIR`
records the played episodes as the dataset `rlexp/demos-v0` under DIR, and DQfD's `agent.demos=DIR` (or the
path of any Minari dataset) loads them as transitions with n-step returns."""
from __future__ import annotations

import logging
import os
import shutil
import tempfile
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import gymnasium as gym
import numpy as np

from rlexp.errors import UserError

log = logging.getLogger("rlexp")
DATASET_ID = "rlexp/demos-v0"


@contextmanager
def _quiet():
    """Minari warns about optional extras it does not need here."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


@dataclass
class DemoRecorder:
    """Collects the episodes of a 1-env vector env as `play` steps it (observations, actions, rewards, ends)."""

    episodes: list[dict] = field(default_factory=list)
    current: dict | None = None

    def start(self, obs: np.ndarray) -> None:
        self.current = dict(observations=[obs[0]], actions=[], rewards=[], terminations=[], truncations=[])

    def step(self, actions, obs, rewards, terminated, truncated, info) -> None:
        episode = self.current
        ended = bool(terminated[0] or truncated[0])
        episode["observations"].append(info["final_obs"][0] if ended else obs[0])
        episode["actions"].append(actions[0])
        episode["rewards"].append(float(rewards[0]))
        episode["terminations"].append(bool(terminated[0]))
        episode["truncations"].append(bool(truncated[0]) and not bool(terminated[0]))
        if ended:
            self.episodes.append({k: np.asarray(v) for k, v in episode.items()})
            self.start(obs)

    def write(self, directory: str | os.PathLike, env_id: str, algorithm: str,
              observation_space: gym.Space | None = None, action_space: gym.Space | None = None) -> Path:
        """The dataset `rlexp/demos-v0` under `directory` (refused if one is there already: nothing is lost)."""
        import minari
        from minari.data_collector import EpisodeBuffer

        root = Path(directory).expanduser().resolve()
        target = root / DATASET_ID
        if target.exists():
            raise UserError(f"+demo_dir={directory} holds demonstrations already ({target}); pick a new directory")
        buffers = [EpisodeBuffer(id=i, observations=e["observations"], actions=e["actions"],
                                 rewards=list(e["rewards"]), terminations=list(e["terminations"]),
                                 truncations=list(e["truncations"]), infos={})
                   for i, e in enumerate(self.episodes)]
        # written into a temporary dir, then moved into place: a failure leaves no half-written dataset
        root.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=".demos-", dir=root))
        previous = os.environ.get("MINARI_DATASETS_PATH")
        os.environ["MINARI_DATASETS_PATH"] = str(scratch)
        try:
            with _quiet():
                minari.create_dataset_from_buffers(DATASET_ID, buffers, env=env_id, algorithm_name=algorithm,
                                                   author="rlexp", observation_space=observation_space,
                                                   action_space=action_space, jpeg_encoding=False)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(scratch / DATASET_ID, target)
        finally:
            if previous is None:
                os.environ.pop("MINARI_DATASETS_PATH")
            else:
                os.environ["MINARI_DATASETS_PATH"] = previous
            shutil.rmtree(scratch, ignore_errors=True)
        return target


@dataclass
class Demonstrations:
    """Transitions of demonstrated episodes, in order, with their n-step returns."""

    obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    next_obs: np.ndarray
    terminated: np.ndarray
    n_step_returns: np.ndarray  # sum_{k<m} gamma^k r_{t+k}, m = min(n, steps to the episode's end)
    n_step_obs: np.ndarray  # the observation after those m steps
    n_step_discounts: np.ndarray  # gamma^m, or 0 when the episode terminated within the m steps
    episodes: int

    def __len__(self) -> int:
        return len(self.actions)


def n_step_targets(rewards: np.ndarray, next_obs: np.ndarray, terminated: np.ndarray, gamma: float,
                   n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For one episode's T transitions: each step's n-step return, bootstrap observation and discount."""
    T = len(rewards)
    returns, discounts = np.zeros(T), np.zeros(T)
    bootstrap = np.empty_like(next_obs)
    for t in range(T):
        last = min(t + n, T) - 1
        steps = np.arange(t, last + 1)
        returns[t] = np.sum(gamma ** (steps - t) * rewards[steps])
        bootstrap[t] = next_obs[last]
        discounts[t] = 0.0 if terminated[last] else gamma ** (last - t + 1)
    return returns, bootstrap, discounts


def env_id_of(envs) -> str | None:
    """The gymnasium id of a vector env's envs, where it can be told."""
    for env in (envs, *getattr(envs, "envs", [])[:1]):
        spec = getattr(env, "spec", None)
        if spec is not None and getattr(spec, "id", None):
            return spec.id
    return None


def find_dataset(path: str | os.PathLike) -> Path:
    """The Minari dataset's data dir under `path` (a +demo_dir, a dataset dir, or its data dir)."""
    path = Path(path).expanduser()
    candidates = [path] if (path / "metadata.json").exists() else sorted(
        p.parent for p in path.glob("**/data/metadata.json"))
    if not path.exists() or not candidates:
        raise UserError(f"agent.demos={path}: no Minari dataset there; record one with "
                        "python -m rlexp mode=play +checkpoint=<run> play.episodes=20 +demo_dir=<dir>")
    if len(candidates) > 1:
        raise UserError(f"agent.demos={path} holds {len(candidates)} Minari datasets; name one of "
                        + ", ".join(str(c.parent) for c in candidates))
    return candidates[0]


def load_demonstrations(path: str | os.PathLike, env_id: str, observation_space: gym.Space,
                        action_space: gym.Space, gamma: float, n: int, capacity: int) -> Demonstrations:
    """Episodes of a Minari dataset as transitions (at most `capacity`, whole episodes first), checked against
    the env the agent trains on."""
    import minari

    data_dir = find_dataset(path)
    with _quiet():
        dataset = minari.MinariDataset(data_dir)
    recorded = dataset.env_spec.id if dataset.env_spec is not None else None
    if recorded is not None and recorded != env_id:
        raise UserError(f"agent.demos={path} was recorded on {recorded}, not {env_id}; record demonstrations "
                        "of this env")
    if dataset.observation_space != observation_space or dataset.action_space != action_space:
        raise UserError(f"agent.demos={path}: its spaces ({dataset.observation_space}, {dataset.action_space}) "
                        f"are not this env's ({observation_space}, {action_space})")
    parts: dict[str, list[np.ndarray]] = {k: [] for k in Demonstrations.__dataclass_fields__ if k != "episodes"}
    episodes = size = 0
    for episode in dataset.iterate_episodes():
        observations = np.asarray(episode.observations, np.float32)
        rewards = np.asarray(episode.rewards, np.float64)
        terminated = np.asarray(episode.terminations, bool)
        T = min(len(rewards), capacity - size)
        if T <= 0:
            break
        next_obs = observations[1:]
        returns, bootstrap, discounts = n_step_targets(rewards, next_obs, terminated, gamma, n)
        for key, value in dict(obs=observations[:-1], actions=np.asarray(episode.actions), rewards=rewards,
                               next_obs=next_obs, terminated=terminated, n_step_returns=returns,
                               n_step_obs=bootstrap, n_step_discounts=discounts).items():
            parts[key].append(value[:T])
        episodes, size = episodes + 1, size + T
    if not size:
        raise UserError(f"agent.demos={path}: the dataset holds no transitions")
    arrays = {k: np.concatenate(v) for k, v in parts.items()}
    floats = ("rewards", "terminated", "n_step_returns", "n_step_discounts")
    return Demonstrations(**{k: v.astype(np.float32) if k in floats else v for k, v in arrays.items()},
                          episodes=episodes)
