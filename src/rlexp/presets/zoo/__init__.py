"""RL Zoo's tuned rows as rlexp presets: the row RL Zoo trains an agent+env pair with (rl-baselines3-zoo's own
files, shipped in hyperparams/ with their licence, or the user's `zoo.file`), translated with SB3's semantics."""
from __future__ import annotations

from typing import Any

from rlexp.presets.zoo.rows import ZOO_FILES, ZooRow, ZooRowError, find_row, load_file
from rlexp.presets.zoo.translate import AGENT_OF, SB3_DEFAULTS, translate

__all__ = ["ZOO_FILES", "ZooRow", "ZooRowError", "find_row", "load_file", "translate", "SB3_DEFAULTS",
           "zoo_file_of", "row_for"]
RECURRENT = ("lstm", "gru")


def zoo_file_of(agent: str, model: Any) -> str | None:
    """The RL Zoo file an rlexp agent trains from: ppo_lstm.yml for PPO with a recurrent model."""
    recurrent = any(str(layer.get("type")) in RECURRENT for layer in (model or {}).get("layers") or [])
    if agent == "ppo" and recurrent:
        return "ppo_lstm"
    return agent if agent in SB3_DEFAULTS and agent not in AGENT_OF else None


def masks_velocity(env_cfg: Any) -> bool:
    return any(str(w.get("_target_", "")).endswith("MaskVelocity") for w in (env_cfg.get("wrappers") or []))


def row_for(agent: str, cfg: Any) -> ZooRow | None:
    """The RL Zoo row for the run's agent and env id (`zoo.file` / `zoo.row` when the user gives them)."""
    from rlexp.envs.spaces import is_atari

    algo = zoo_file_of(agent, cfg.get("model"))
    zoo = cfg.get("zoo") or {}
    if algo is None:
        if zoo.get("file") or zoo.get("row"):
            raise ZooRowError(f"zoo.file / zoo.row: RL Zoo has no {agent.upper()} file; its rows are for "
                              f"{', '.join(sorted(set(SB3_DEFAULTS) - set(AGENT_OF)))} (ppo with model=lstm: "
                              "ppo_lstm.yml)")
        return None
    env_id = str(cfg.env.id)
    found = find_row(algo, env_id, is_atari(env_id), masks_velocity(cfg.env), path=zoo.get("file"),
                     row=zoo.get("row"))
    if found is None and algo in AGENT_OF and not (zoo.get("file") or zoo.get("row")):
        # a recurrent PPO on an env ppo_lstm.yml does not tune: ppo.yml's row (the recurrent model stays)
        found = find_row(AGENT_OF[algo], env_id, is_atari(env_id), masks_velocity(cfg.env))
    return found
