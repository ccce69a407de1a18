"""One TRPO update, rlexp's against sb3-contrib's, from the same weights and the same rollout.

Usage: python benchmarks/trpo_step.py --sb3-python <sb3 venv>/bin/python [--env LunarLanderContinuous-v3]
    [--warmup 0]
rlexp builds TRPO with RL Zoo's LunarLanderContinuous values on SB3's defaults (64-64 tanh, orthogonal
initialisation, normalised observations and rewards, KL bound 0.01, damping 0.1, 15 CG iterations), trains
`--warmup` updates, collects one rollout and updates on it with one full-batch critic step; the SB3 side
(benchmarks/sb3_trpo_step.py) loads the weights before the update into an sb3-contrib TRPO policy, fills its
rollout buffer with the same transitions, values and log-probs, and runs its `train()` (conjugate gradient started
from zeros as rlexp's, line search halving as rlexp's). Written: the GAE difference and, per parameter, the
relative difference of the two updates, for each of rlexp's `agent.kl_reduction` values, in
benchmarks/results/trpo_step.md.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from current import write_table  # noqa: E402

HERE = Path(__file__).resolve().parent
MODEL = dict(name="mlp", initializer="orthogonal", gain=float(np.sqrt(2)),
             layers=[dict(type="dense", units=64, activation="tanh"), dict(type="dense", units=64, activation="tanh"),
                     dict(type="dense", output=True)], heads=dict(policy=dict(gain=0.01), value=dict(gain=1.0)))
SETTINGS = dict(n_steps=1024, cg_iterations=15, cg_damping=0.1, max_kl=0.01, lam=0.95, gamma=0.99, lr=1e-3,
                opt_epsilon=1e-5, fvp_n_steps=1, normalize_obs=True, normalize_reward=True, log_std_init=0.0)


def rlexp_update(env_id: str, warmup: int, kl_reduction: str, path: Path) -> None:
    """rlexp's side: weights before and after one update, and the rollout, in `path` (.npz)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    from rlexp.agents import TRPO
    from rlexp.agents.on_policy import compute_gae
    from rlexp.envs.make import make_envs

    agent = TRPO(make_envs(env_id, n_envs=2, seed=0), model=MODEL, seed=0, mini_batches=1, critic_iterations=1,
                 kl_reduction=kl_reduction, jit_compile=False, **SETTINGS)
    for _ in range(warmup):
        agent.update(agent.collect())
    batch = {k: np.asarray(v) for k, v in agent.collect().items()}

    def weights() -> dict[str, np.ndarray]:
        out = {f"actor{i}": w.numpy() for i, w in enumerate(agent.actor.weights)}
        out |= {f"critic{i}": w.numpy() for i, w in enumerate(agent.critic.weights)}
        return out | {"log_std": agent.std_variables()[0].numpy()}

    before = weights()
    advantages, returns = compute_gae(batch["rewards"], batch["values"], batch["dones"], batch["last_values"],
                                      SETTINGS["gamma"], SETTINGS["lam"])
    agent.update(batch)
    np.savez(path, **{f"before_{k}": v for k, v in before.items()}, **{f"after_{k}": v for k, v in weights().items()},
             **{f"batch_{k}": v for k, v in batch.items()}, advantages=np.asarray(advantages),
             returns=np.asarray(returns), critic_fresh=np.array(warmup == 0))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sb3-python", required=True)
    parser.add_argument("--env", default="LunarLanderContinuous-v3")
    parser.add_argument("--warmup", type=int, default=0, help="rlexp updates before the compared one")
    opts = parser.parse_args()
    lines = ["| rlexp's agent.kl_reduction | GAE advantages, max abs diff | parameter | rlexp step (max abs) | "
             "SB3 step (max abs) | max abs diff of the steps / SB3's |", "|---|---:|---|---:|---:|---:|"]
    with tempfile.TemporaryDirectory() as work:
        for reduction in ("mean", "sum"):
            path = Path(work) / f"{reduction}.npz"
            rlexp_update(opts.env, opts.warmup, reduction, path)
            out = subprocess.run([opts.sb3_python, str(HERE / "sb3_trpo_step.py"), str(path), opts.env],
                                 capture_output=True, text=True)
            if out.returncode:
                raise SystemExit(out.stderr[-3000:])
            for row in out.stdout.strip().splitlines():
                lines.append(f"| {reduction} | {row}")
    note = (f"{opts.env}, 2 envs x 1024 steps, after {opts.warmup} rlexp updates; SB3's target_kl 0.01 and "
            "cg_damping 0.1 against rlexp's max_kl and cg_damping of the same values. The critic takes one "
            "full-batch Adam step on each side (Keras's Adam adds epsilon to the uncorrected sqrt(v), PyTorch's to "
            "the corrected one; rlexp's loss is half the MSE): its rows differ where gradients are near epsilon.\n\n")
    print(write_table("trpo_step", "One TRPO update: rlexp against sb3-contrib from the same weights and rollout",
                      note + "\n".join(lines)))


if __name__ == "__main__":
    main()
