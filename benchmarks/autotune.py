"""mode=autotune benchmark, written to benchmarks/results/autotune.md: for each pair without a tuned preset,
`python -m rlexp mode=autotune` from a fresh directory (a study within the pair's training budget, then a training
run with the tuned preset it wrote), its cost (wall seconds, env steps the study's trials trained) and that run's
final evaluation, next to the same training with the fallback preset and RL Zoo's score (benchmark.md).

Usage: python benchmarks/autotune.py [PAIR ...] [--seed 0]   (PAIR names: see PAIRS)
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from current import now, write_table  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "benchmarks" / "runs" / "autotune"
PAIRS = {  # name: (CLI args, RL Zoo's score at that budget)
    "a2c-lunarlander": (["agent=a2c", "env=lunarlander", "run.max_steps=2e5", "run.target_reward=null"], 155.8),
    "a2c-acrobot": (["agent=a2c", "env=generic", "env.id=Acrobot-v1", "run.max_steps=5e5"], -83.4),
    "dqn-mountaincar": (["agent=dqn", "env=generic", "env.id=MountainCar-v0", "run.max_steps=1.2e5"], -100.8),
}


def rlexp(cwd: Path, *args: str) -> tuple[str, float]:
    """Run the CLI in `cwd`: (its stdout, wall seconds)."""
    cwd.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "rlexp", *args], cwd=cwd, capture_output=True, text=True)
    if result.returncode:
        raise SystemExit(f"rlexp {' '.join(args)} failed:\n{result.stdout[-3000:]}{result.stderr[-3000:]}")
    return result.stdout, time.perf_counter() - start


def final_eval(stdout: str) -> float:
    """The final evaluation of the last training run the output names."""
    run_dir = Path(re.findall(r"\| run dir: (\S+)", stdout)[-1])
    return json.loads((run_dir / "summary.json").read_text())["final_eval"]["mean_return"]


def study_steps(study: Path) -> int:
    """Env steps the study's trials trained, every seed: a finished one's total, a pruned one's last episode."""
    steps = 0
    for history in study.glob("trial_*/**/history.parquet"):
        summary = history.parent / "summary.json"
        steps += (json.loads(summary.read_text())["steps"] if summary.is_file()
                  else int(pd.read_parquet(history)["step"].max()))
    return steps


def measure(name: str, seed: int) -> dict:
    args, zoo = PAIRS[name]
    cwd = WORK / name
    shutil.rmtree(cwd, ignore_errors=True)
    stdout, wall = rlexp(cwd / "tuned", "mode=autotune", *args, f"seed={seed}")
    (study,) = (cwd / "tuned" / "multirun").iterdir()
    results = yaml.safe_load((study / "optimization_results.yaml").read_text())
    fallback, _ = rlexp(cwd / "fallback", *args, f"seed={seed}")
    budget = float(next(a for a in args if a.startswith("run.max_steps=")).split("=")[1])
    return dict(pair=name, budget=int(budget), wall_s=round(wall, 1), study_steps=study_steps(study),
                trials=results["trials"], best_trial=results["best_trial"], tuned=final_eval(stdout),
                fallback=final_eval(fallback), zoo=zoo)


def markdown(rows: list[dict]) -> str:
    lines = ["`python -m rlexp mode=autotune <pair> seed=<seed>` with autotune's defaults (budget 1.0 x run.max_steps, "
             "10 trials x 2 seeds, successive halving on 5 evaluations of 5 episodes); wall time of the whole command "
             "(study and the training with the tuned preset), the study's env steps, and 20 evaluation episodes of "
             "the final weights of the training with the tuned preset, with the fallback preset (same budget and "
             "seed) and RL Zoo's score.", "",
             "| pair | run.max_steps | autotune wall s | study env steps | trials | tuned | fallback | RL Zoo |",
             "|---|---:|---:|---:|---|---:|---:|---:|"]
    for r in rows:
        trials = ", ".join(f"{n} {state.lower()}" for state, n in r["trials"].items())
        lines.append(f"| {r['pair']} | {r['budget']:,} | {r['wall_s']:,.0f} | {r['study_steps']:,} "
                     f"({r['study_steps'] / r['budget']:.2f}x) | {trials} | {r['tuned']:.1f} | {r['fallback']:.1f} | "
                     f"{r['zoo']:.1f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pairs", nargs="*", metavar="PAIR", help=", ".join(PAIRS))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    unknown = sorted(set(args.pairs) - set(PAIRS))
    if unknown:
        parser.error(f"unknown pair {unknown[0]}; use {', '.join(PAIRS)}")
    started = now()
    rows = []
    for name in args.pairs or PAIRS:
        rows.append(measure(name, args.seed))
        print(json.dumps(rows[-1]), flush=True)
    body = markdown(rows)
    print(body)
    print(write_table("autotune", "mode=autotune: cost and result against the fallback and RL Zoo", body, started))


if __name__ == "__main__":
    main()
