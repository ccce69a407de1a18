"""rlexp: reinforcement-learning experiments from YAML presets (TensorFlow 2, gymnasium, Hydra).

Python API (no Hydra needed)::

    from rlexp import make_envs, PPO
    envs = make_envs("CartPole-v1", n_envs=8, seed=0)
    agent = PPO(envs, n_steps=32, mini_batches=1)
    agent.fit(max_steps=100_000, target_reward=475)
"""
from importlib import import_module
from typing import Any

__version__ = "0.1.0"
_LAZY = {"make_envs": "rlexp.envs.make", "make_member_envs": "rlexp.envs.members", **{name: "rlexp.agents" for name in ("A2C", "ACER", "ARS", "CrossQ", "DDPG", "DQfD", "DQN", "NAF", "PPO", "QRDQN", "SAC", "TD3", "TQC",
                                                                 "TRPO", "VPG")},
         "ReplayBuffer": "rlexp.buffers", "FrameBuffer": "rlexp.buffers", "RolloutBuffer": "rlexp.buffers", "UserError": "rlexp.errors"}


def _find_plugins() -> None:
    """Make Hydra's plugin scan see rlexp's plugins (hydra_plugins.rlexp_*) also in an editable install,
    whose import hook maps them to src/ without putting src/hydra_plugins on the namespace path that Hydra
    walks. The namespace path is recomputed from sys.path whenever sys.path changes, so src/ goes on
    sys.path (its rlexp package is the one the hook maps to anyway)."""
    import importlib.util
    import sys
    from pathlib import Path

    try:
        spec = importlib.util.find_spec("hydra_plugins.rlexp_sweeper")
    except ImportError:
        return
    if spec and spec.origin:
        root = str(Path(spec.origin).parent.parent.parent)
        if root not in sys.path:
            sys.path.append(root)


_find_plugins()


def __getattr__(name: str) -> Any:  # lazy: `import rlexp` must not pay TensorFlow's import time
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(name)
