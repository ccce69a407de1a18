"""Algorithms: the shared machinery lives in `base`; one file per algorithm."""
from rlexp.agents.a2c import A2C
from rlexp.agents.base import Agent, OnPolicyAgent
from rlexp.agents.dqn import DQN
from rlexp.agents.ppo import PPO
from rlexp.agents.trpo import TRPO

AGENTS: dict[str, type[Agent]] = {"a2c": A2C, "dqn": DQN, "ppo": PPO, "trpo": TRPO}

__all__ = ["AGENTS", "Agent", "OnPolicyAgent", "A2C", "DQN", "PPO", "TRPO"]
