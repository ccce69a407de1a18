"""The on-policy family (A2C, PPO, TRPO, ACER, VPG): rollouts of `n_steps` per env, collected and learned from
in fused graph calls. See docs/performance.md for how the rollouts act (NumPy mirrors, graph envs).

`OnPolicyAgent` (`agent`) is made of parts, one module each: the policy distribution (`policy`), recurrent
state (`recurrent`) and rollouts (`rollouts`); `gae` holds the maths on rollout tensors.
"""
from rlexp.agents.on_policy.agent import OnPolicyAgent
from rlexp.agents.on_policy.gae import GAE_UNROLL_STEPS, compute_gae, flatten_time, swap_time

__all__ = ["GAE_UNROLL_STEPS", "OnPolicyAgent", "compute_gae", "flatten_time", "swap_time"]
