"""Algorithms: what every agent shares is in `base`, each family's machinery in `on_policy` and `off_policy`;
one file per algorithm."""
from rlexp.runtime.quiet import import_tensorflow

import_tensorflow()  # before the agents' modules import it: TensorFlow without its start-up noise
from rlexp.agents.a2c import A2C  # noqa: E402
from rlexp.agents.acer import ACER  # noqa: E402
from rlexp.agents.ars import ARS  # noqa: E402
from rlexp.agents.base import Agent  # noqa: E402
from rlexp.agents.crossq import CrossQ  # noqa: E402
from rlexp.agents.ddpg import DDPG  # noqa: E402
from rlexp.agents.dqfd import DQfD  # noqa: E402
from rlexp.agents.dqn import DQN  # noqa: E402
from rlexp.agents.naf import NAF  # noqa: E402
from rlexp.agents.off_policy import OffPolicyAgent  # noqa: E402
from rlexp.agents.on_policy import OnPolicyAgent  # noqa: E402
from rlexp.agents.ppo import PPO  # noqa: E402
from rlexp.agents.qrdqn import QRDQN  # noqa: E402
from rlexp.agents.sac import SAC  # noqa: E402
from rlexp.agents.td3 import TD3  # noqa: E402
from rlexp.agents.tqc import TQC  # noqa: E402
from rlexp.agents.trpo import TRPO  # noqa: E402
from rlexp.agents.vpg import VPG  # noqa: E402

AGENTS: dict[str, type[Agent]] = {"a2c": A2C, "acer": ACER, "ars": ARS, "crossq": CrossQ, "ddpg": DDPG, "dqfd": DQfD, "dqn": DQN, "naf": NAF, "ppo": PPO,
                                  "qrdqn": QRDQN, "sac": SAC, "td3": TD3, "tqc": TQC, "trpo": TRPO, "vpg": VPG}

__all__ = ["AGENTS", "Agent", "OffPolicyAgent", "OnPolicyAgent", "A2C", "ACER", "ARS", "CrossQ", "DDPG", "DQfD", "DQN", "NAF", "PPO", "QRDQN",
           "SAC", "TD3", "TQC", "TRPO", "VPG"]
