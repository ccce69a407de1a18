"""Shared training machinery: env stepping, episode bookkeeping, the fit loop, checkpoints, evaluation.

Algorithms subclass a family's base (`on_policy.OnPolicyAgent`, `off_policy.OffPolicyAgent`), which subclass
`Agent`, and implement only their own maths:
`build` (models, optimizers), `train_iteration` (collect + update) and `policy` (actions for play).

`Agent` (`agent`) is made of parts, one module each: the fit loop (`loop`), acting and evaluation (`acting`),
checkpoints (`checkpointing`) and stepping a graph env inside a graph (`graph_steps`).
"""
from rlexp.agents.base.agent import MIXED_PRECISION, Agent, dtype_policy, load_model_preset, precision_policy
from rlexp.agents.base.loop import TrainingDiverged, stop_on_interrupt

__all__ = ["MIXED_PRECISION", "Agent", "TrainingDiverged", "dtype_policy", "load_model_preset", "precision_policy",
           "stop_on_interrupt"]
