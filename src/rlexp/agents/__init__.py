"""Algorithms: what every agent shares is in `base`, each family's machinery in `on_policy` and `off_policy`;
one file per algorithm."""
from rlexp.agents.a2c import A2C
from rlexp.agents.acer import ACER
from rlexp.agents.base import Agent
from rlexp.agents.ddpg import DDPG
from rlexp.agents.dqfd import DQfD
from rlexp.agents.dqn import DQN
from rlexp.agents.naf import NAF
from rlexp.agents.off_policy import OffPolicyAgent
from rlexp.agents.on_policy import OnPolicyAgent
from rlexp.agents.ppo import PPO
from rlexp.agents.sac import SAC
from rlexp.agents.td3 import TD3
from rlexp.agents.trpo import TRPO
from rlexp.agents.vpg import VPG

AGENTS: dict[str, type[Agent]] = {"a2c": A2C, "acer": ACER, "ddpg": DDPG, "dqfd": DQfD, "dqn": DQN, "naf": NAF, "ppo": PPO,
                                  "sac": SAC, "td3": TD3, "trpo": TRPO, "vpg": VPG}

__all__ = ["AGENTS", "Agent", "OffPolicyAgent", "OnPolicyAgent", "A2C", "ACER", "DDPG", "DQfD", "DQN", "NAF", "PPO", "SAC",
           "TD3", "TRPO", "VPG"]
