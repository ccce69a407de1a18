"""Algorithms: the shared machinery lives in `base`; one file per algorithm."""
from rlexp.agents.base import Agent, OnPolicyAgent
from rlexp.agents.dqn import DQN
from rlexp.agents.ppo import PPO

AGENTS: dict[str, type[Agent]] = {"ppo": PPO, "dqn": DQN}

__all__ = ["AGENTS", "Agent", "OnPolicyAgent", "DQN", "PPO"]
