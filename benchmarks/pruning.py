"""Pruning benchmark: the same 20-trial PPO CartPole study with the median pruner and without.

Usage: python benchmarks/pruning.py [--trials 20] [--max-steps 5e4]
Runs both sweeps through the CLI (one after the other, same seed and search space), then prints one
JSON line per sweep and a Markdown table: total wall time, best value, and trials complete/pruned/failed.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import optuna

ROOT = Path(__file__).resolve().parents[1]
SPACE = ["agent=ppo", "env=cartpole", "agent.lr=tag(log,interval(1e-5,1e-2))", "agent.n_steps=choice(16,32,64,128)"]


def sweep(pruner: str, trials: int, max_steps: str, cwd: Path) -> dict:
    study = f"pruning_{pruner}"
    shutil.rmtree(cwd / "multirun" / study, ignore_errors=True)
    command = [sys.executable, "-m", "rlexp", "-m", *SPACE, f"run.max_steps={max_steps}",
               f"hydra.sweeper.n_trials={trials}", f"hydra.sweeper.pruner={pruner}", f"hydra.sweeper.study_name={study}"]
    start = time.perf_counter()
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if result.returncode:
        raise SystemExit(result.stdout[-3000:] + result.stderr[-3000:])
    done = optuna.load_study(study_name=study, storage=f"sqlite:///{cwd}/multirun/{study}/optuna.db").trials
    states = {s: sum(t.state.name == s for t in done) for s in ("COMPLETE", "PRUNED", "FAIL")}
    best = max(t.value for t in done if t.state.name == "COMPLETE")
    return dict(pruner=pruner, trials=len(done), wall_s=round(wall, 1), best_value=best, **states,
                trial_seconds=round(sum(t.user_attrs.get("seconds", 0) for t in done), 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--max-steps", default="5e4")
    args = parser.parse_args()
    cwd = ROOT / "benchmarks" / "runs"
    cwd.mkdir(exist_ok=True)
    rows = []
    for pruner in ("none", "median"):
        rows.append(sweep(pruner, args.trials, args.max_steps, cwd))
        print(json.dumps(rows[-1]), flush=True)
    print("| pruner | trials | complete | pruned | failed | sweep wall time (s) | best value |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['pruner']} | {r['trials']} | {r['COMPLETE']} | {r['PRUNED']} | {r['FAIL']} | {r['wall_s']} | "
              f"{r['best_value']:.1f} |")


if __name__ == "__main__":
    main()
