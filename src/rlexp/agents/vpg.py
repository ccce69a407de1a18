"""Vanilla policy gradient (REINFORCE, Williams 1992) with an optional learned baseline, as TensorForce's VPG."""
from __future__ import annotations

from rlexp.agents.a2c import A2C
from rlexp.errors import UserError


class VPG(A2C):
    """REINFORCE: one gradient step per rollout on -mean(log pi(a|s) A) - entropy_regularization * H, where A
    is the discounted return (`baseline: none`) or the return minus a learned value baseline (`baseline:
    value`, whose half-MSE is added with weight `baseline_loss_coef`), optionally estimated with GAE.

    Returns run to the end of each rollout of `n_steps` per env and are bootstrapped there (and at
    time-limit truncations) with the baseline's value (0 without a baseline): long rollouts make them
    whole-episode Monte-Carlo returns. The loss is A2C's, so this class only maps TensorForce's options.

    Args (besides `OnPolicyAgent`'s; TensorForce's names):
        baseline: 'value' or 'none'.
        gae_lambda: GAE lambda for the advantages with a baseline (None: plain returns minus the baseline).
        entropy_regularization: entropy bonus coefficient.
        baseline_loss_coef: weight of half the baseline's MSE.
        normalize_advantage: standardise the advantages (returns without a baseline) per rollout.
        grad_norm: global gradient-norm clip (None: off).
    """

    member_keys = ("lr", "gamma")  # run.members (TensorForce's other names are not A2C's)

    def __init__(self, envs, model=None, buffer=None, *, baseline: str = "value", gae_lambda: float | None = None,
                 entropy_regularization: float = 0.0, baseline_loss_coef: float = 1.0, n_steps: int = 256,
                 normalize_advantage: bool = True, grad_norm: float | None = None, optimizer: str = "adam",
                 opt_epsilon: float = 1e-7, **kwargs) -> None:
        if baseline not in ("value", "none"):
            raise UserError(f"agent.baseline={baseline!r} must be 'value' or 'none'")
        if gae_lambda is not None and baseline == "none":
            raise UserError("agent.gae_lambda needs agent.baseline=value (GAE estimates advantages from the baseline)")
        self.baseline, self.critic = baseline, baseline == "value"
        super().__init__(envs, model, buffer, n_steps=n_steps, lam=1.0 if gae_lambda is None else float(gae_lambda),
                         entropy_coef=entropy_regularization, value_loss_coef=baseline_loss_coef if self.critic else 0.0,
                         grad_norm=grad_norm, normalize_advantage=normalize_advantage, optimizer=optimizer,
                         opt_epsilon=opt_epsilon, **kwargs)
