"""mode=autotune benchmark, written to benchmarks/results/autotune.md: for each pair without a tuned preset,
`python -m rlexp mode=autotune` from a fresh directory (a study within the pair's training budget, then a training
run with the tuned preset it wrote, on the first seed), its cost (wall seconds, env steps the study's trials
trained), then the command autotune printed on the other seeds: the tuned preset's final evaluations next to the
fallback preset's at the same budget and seeds (learning.md's `fallback-<agent>-<env>` commands, trained here with
the same code) and RL Zoo's score (benchmark.md).

Usage: python benchmarks/autotune.py [PAIR ...] [--seeds 0 1 2] [--budgets 1 3]   (PAIR names: see PAIRS; each
budget is autotune.budget, the study's env steps as a multiple of the pair's run.max_steps)
"""
from __future__ import annotations

import argparse
import json
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from current import RESULTS, now, write_table  # noqa: E402
from learning import CASES  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "benchmarks" / "runs" / "autotune"
PAIRS = {  # name: (learning case of the fallback at the same budget, RL Zoo's score at that budget)
    "a2c-lunarlander": ("fallback-a2c-lunarlander", 155.8),
    "a2c-acrobot": ("fallback-a2c-acrobot", -83.4),
    "dqn-mountaincar": ("fallback-dqn-mountaincar", -100.8),
    "a2c-mountaincar": ("fallback-a2c-mountaincar", -111.263),
    "a2c-mountaincarcontinuous": ("fallback-a2c-mountaincarcontinuous", 91.166),
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


def reproduce_command(stdout: str, seed: int) -> list[str]:
    """The training command autotune printed last, on `seed`."""
    words = shlex.split(re.findall(r"reproduce this training: (.+)", stdout)[-1])
    return [w for w in words[3:] if not w.startswith("seed=")] + [f"seed={seed}"]  # after `python -m rlexp`


def fallback_evals(case: str, seeds: list[int], cwd: Path) -> list[float]:
    """Final evaluations of the fallback preset (the learning case's command) on `seeds`, trained now with the
    code the tuned side runs: recorded rows of an earlier commit can differ."""
    args = [a for a in CASES[case][0] if a != "run.target_reward=null"]
    return [final_eval(rlexp(cwd / "fallback", *args, f"seed={seed}")[0]) for seed in seeds]


def measure(name: str, seeds: list[int], multiple: float = 1.0) -> dict:
    case, zoo = PAIRS[name]
    args = [a for a in CASES[case][0] if a != "run.target_reward=null"]  # null already: the command as a user types it
    if multiple != 1.0:
        args.append(f"autotune.budget={multiple:g}")
    cwd = WORK / f"{name}-x{multiple:g}"
    shutil.rmtree(cwd, ignore_errors=True)
    stdout, wall = rlexp(cwd / "tuned", "mode=autotune", *args, f"seed={seeds[0]}")
    (study,) = (cwd / "tuned" / "multirun").iterdir()
    results = yaml.safe_load((study / "optimization_results.yaml").read_text())
    tuned = [final_eval(stdout)] + [final_eval(rlexp(cwd / "tuned", *reproduce_command(stdout, seed))[0])
                                    for seed in seeds[1:]]
    budget = float(next(a for a in args if a.startswith("run.max_steps=")).split("=")[1])
    return dict(pair=name, budget=int(budget), multiple=multiple, wall_s=round(wall, 1), study_steps=results["env_steps"],
                trials=results["trials"], best_trial=results["best_trial"], seeds=seeds, tuned=tuned,
                fallback=fallback_evals(case, seeds, cwd), zoo=zoo, command=" ".join(["mode=autotune", *args]))


def scores(values: list[float]) -> str:
    """`mean (seed values)`."""
    return f"{statistics.mean(values):.1f} ({' / '.join(f'{v:.1f}' for v in values)})"


def markdown(rows: list[dict]) -> str:
    lines = ["`python -m rlexp <command> seed=<first seed>` with autotune's defaults (budget 1.0 x run.max_steps, "
             "at most 10 trials x 2 seeds, successive halving at 3 lengths L, 3L, 9L, evaluations of 5 episodes with "
             "actions drawn from the policy): wall time of the whole command (the study and the training with the "
             "tuned preset), the study's env steps, its trials and the best (trial 0: the untuned values); then the mean "
             "(and each seed's) final evaluation, 20 episodes, of the training with the tuned preset (the command "
             "autotune printed, on each seed), of the fallback preset at the same budget and seeds (learning.md's "
             "`fallback-*` commands, trained again with this code) and RL Zoo's score.", "",
             "| pair | budget | command | autotune wall s | study env steps | trials | best | seeds | tuned | fallback "
             "| RL Zoo | tuned beats fallback |",
             "|---|---:|---|---:|---:|---|---:|---|---|---|---:|---|"]
    for r in rows:
        trials = ", ".join(f"{n} {state.lower()}" for state, n in r["trials"].items())
        beats = "yes" if statistics.mean(r["tuned"]) > statistics.mean(r["fallback"]) else "no"
        lines.append(f"| {r['pair']} | {r.get('multiple', 1.0):g}x | `{r['command']}` | {r['wall_s']:,.0f} | "
                     f"{r['study_steps']:,} ({r['study_steps'] / r['budget']:.2f}x) | {trials} | {r['best_trial']} | "
                     f"{', '.join(map(str, r['seeds']))} | "
                     f"{scores(r['tuned'])} | {scores(r['fallback'])} | {r['zoo']:.1f} | {beats} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pairs", nargs="*", metavar="PAIR", help=", ".join(PAIRS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--budgets", nargs="+", type=float, default=[1.0])
    args = parser.parse_args()
    unknown = sorted(set(args.pairs) - set(PAIRS))
    if unknown:
        parser.error(f"unknown pair {unknown[0]}; use {', '.join(PAIRS)}")
    started = now()
    rows = []
    for name in args.pairs or PAIRS:
        for multiple in args.budgets:
            rows.append(measure(name, args.seeds, multiple))
            print(json.dumps(rows[-1]), flush=True)
    body = markdown(rows)
    print(body)
    print(write_table("autotune", "mode=autotune: cost and result against the fallback and RL Zoo", body, started))


if __name__ == "__main__":
    main()
