"""mode=autotune benchmark, written to benchmarks/results/autotune.md: for each pair without a tuned preset,
`python -m rlexp mode=autotune` from a fresh directory (a study within the pair's training budget, then a training
run with the tuned preset it wrote, on the first seed), its cost (wall seconds, env steps the study's trials
trained), then the command autotune printed on the other seeds: the tuned preset's final evaluations next to the
fallback preset's at the same budget and seeds (learning.md's `fallback-<agent>-<env>` commands, trained here with
the same code) and RL Zoo's score (benchmark.md).

Usage: python benchmarks/autotune.py [PAIR ...] [--seeds 0 1 2] [--budgets 1 3 10]   (PAIR names: see PAIRS; each
budget is autotune.budget, the study's env steps as a multiple of the pair's run.max_steps, tried from the smallest
up until the tuned preset beats the fallback; rows are kept in results/autotune.json, a row run again replaces it)
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
from current import RESULTS, commit, machine, now, same_code, write_table  # noqa: E402
from learning import CASES  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "benchmarks" / "runs" / "autotune"
ROWS = RESULTS / "autotune.json"  # every measured (pair, budget) row; a new run of a row replaces it
PAIRS = {  # name: (learning case of the fallback at the same budget, RL Zoo's score at that budget); pairs without a
    # tuned preset whose fallback scores far below RL Zoo
    "a2c-mountaincarcontinuous": ("fallback-a2c-mountaincarcontinuous", 91.166),
    "a2c-lunarlander": ("fallback-a2c-lunarlander", 155.8),
    "a2c-mountaincar": ("fallback-a2c-mountaincar", -111.263),
    "trpo-mountaincar": ("fallback-trpo-mountaincar", -107.278),
    "a2c-swimmer": ("fallback-a2c-swimmer", 200.627),
    "dqn-mountaincar": ("fallback-dqn-mountaincar", -100.8),
    "trpo-lunarlander": ("fallback-trpo-lunarlander", 133.166),
    "ppo-lunarlandercontinuous": ("fallback-ppo-lunarlandercontinuous", 270.863),
    # learning.md's other untuned pairs whose fallback reaches RL Zoo's threshold on no seed
    "ppo-swimmer": ("fallback-ppo-swimmer", 281.561),
    "sac-mountaincarcontinuous": ("fallback-sac-mountaincarcontinuous", 94.679),
    "trpo-swimmer": ("fallback-trpo-swimmer", 365.663),
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


def measure(name: str, seeds: list[int], multiple: float, fallback: list[float]) -> dict:
    """One autotune run of `name` at `multiple` x its steps, and its tuned preset trained on the other seeds. Where
    the study kept trial 0 (the untuned values) and its training scored exactly the fallback's on the first seed,
    the tuned preset is the fallback's values: the other seeds' scores are the fallback's."""
    case, zoo = PAIRS[name]
    args = [a for a in CASES[case][0] if a != "run.target_reward=null"]  # null already: the command as a user types it
    args.append(f"autotune.budget={multiple:g}")  # given at every budget: the default is not one of them
    cwd = WORK / f"{name}-x{multiple:g}"
    shutil.rmtree(cwd / "tuned", ignore_errors=True)
    stdout, wall = rlexp(cwd / "tuned", "mode=autotune", *args, f"seed={seeds[0]}")
    (study,) = (cwd / "tuned" / "multirun").iterdir()
    results = yaml.safe_load((study / "optimization_results.yaml").read_text())
    tuned = [final_eval(stdout)]
    kept = results["best_trial"] == 0 and tuned[0] == fallback[0]
    tuned += fallback[1:] if kept else [final_eval(rlexp(cwd / "tuned", *reproduce_command(stdout, seed))[0])
                                        for seed in seeds[1:]]
    budget = float(next(a for a in args if a.startswith("run.max_steps=")).split("=")[1])
    return dict(pair=name, budget=int(budget), multiple=multiple, wall_s=round(wall, 1), study_steps=results["env_steps"],
                trials=results["trials"], best_trial=results["best_trial"], seeds=seeds, tuned=tuned,
                fallback=fallback, zoo=zoo, command=" ".join(["mode=autotune", *args]), date=now(), commit=commit(),
                machine=machine().split(",")[0])


def beats(row: dict) -> bool:
    return statistics.mean(row["tuned"]) > statistics.mean(row["fallback"])


def scores(values: list[float]) -> str:
    """`mean (seed values)`."""
    return f"{statistics.mean(values):.1f} ({' / '.join(f'{v:.1f}' for v in values)})"


def markdown(rows: list[dict]) -> str:
    lines = ["`python -m rlexp <command> seed=<first seed>` with autotune's defaults but the budget (at most 10 trials "
             "x 2 seeds, trial 0 the fallback's values, trials 1-4 the portfolio: the agent's tuned presets for other "
             "envs of the kind, successive halving at 3 lengths L, 3L, 9L, no trial longer than the pair's "
             "run.max_steps, evaluations of 5 episodes with actions drawn from the policy; budget: the study's env "
             "steps as a multiple of run.max_steps): wall time of the whole command (the study and the training with "
             "the tuned preset), "
             "the study's env steps, its trials and the best (trial 0: the untuned values); then the mean (and each "
             "seed's) final evaluation, 20 episodes, of the training with the tuned preset (the command autotune "
             "printed, on each seed), of the fallback preset at the same steps and seeds (learning.md's `fallback-*` "
             "commands, trained again with the row's code) and RL Zoo's score. Each pair's budgets run from the "
             "smallest up, stopping at the first whose preset beats the fallback (`--budgets 1 3 10`); where 1x beat "
             "it, a larger budget was measured too (`--budgets 3` or `--budgets 10`). Rows name their machine where it is "
             "not the Intel Xeon (AMX) the table was first measured on.", "",
             "| pair | budget | command | autotune wall s | study env steps | trials | best | seeds | tuned | fallback "
             "| RL Zoo | tuned beats fallback | measured |",
             "|---|---:|---|---:|---:|---|---:|---|---|---|---:|---|---|"]
    for r in rows:
        trials = ", ".join(f"{n} {state.lower()}" for state, n in r["trials"].items())
        lines.append(f"| {r['pair']} | {r.get('multiple', 1.0):g}x | `{r['command']}` | {r['wall_s']:,.0f} | "
                     f"{r['study_steps']:,} ({r['study_steps'] / r['budget']:.2f}x) | {trials} | {r['best_trial']} | "
                     f"{', '.join(map(str, r['seeds']))} | {scores(r['tuned'])} | {scores(r['fallback'])} | "
                     f"{r['zoo']:.1f} | {'yes' if beats(r) else 'no'} | {r.get('date', '')} {r.get('commit', '')}"
                     f"{', ' + r['machine'] if r.get('machine') else ''}"
                     f"{fallback_note(r)}{'; ' + r['note'] if r.get('note') else ''} |")
    verdicts = []
    for pair in dict.fromkeys(r["pair"] for r in rows):
        tried = [r for r in rows if r["pair"] == pair]
        won = next((r for r in tried if beats(r)), None)
        largest = max(r["multiple"] for r in tried)
        verdicts.append(f"- {pair}: " + (f"beats the fallback at {won['multiple']:g}x" if won else
                                         f"does not beat the fallback up to {largest:g}x"))
    return "\n".join(lines + ["", *verdicts])


def fallback_note(row: dict) -> str:
    """Where the fallback column was trained at another commit (`--reuse-fallback`)."""
    trained = row.get("fallback_commit", row.get("commit"))
    return f" (fallback: {trained})" if trained != row.get("commit") else ""


# Commits whose src/ or conf/ change no row's command reads: each row sets autotune.budget on its command line.
NEUTRAL = ("de7866a",)  # autotune.budget's default, 1 -> 3


def other_spaces(pair: str) -> tuple[str, ...]:
    """The search spaces of the other agents (conf/sweep/<agent>*.yaml): a pair's study reads its agent's only."""
    agent = pair.split("-")[0]
    return tuple(f"conf/sweep/{path.name}" for path in sorted((ROOT / "conf" / "sweep").glob("*.yaml"))
                 if path.stem.split("_")[0] != agent)


def load_rows() -> list[dict]:
    return json.loads(ROWS.read_text()) if ROWS.exists() else []


def save_row(rows: list[dict], row: dict) -> list[dict]:
    """`rows` with `row` in place of the same pair's row at the same budget, in PAIRS' then the budgets' order."""
    rows = [r for r in rows if (r["pair"], r["multiple"]) != (row["pair"], row["multiple"])] + [row]
    rows.sort(key=lambda r: (list(PAIRS).index(r["pair"]) if r["pair"] in PAIRS else len(PAIRS), r["multiple"]))
    tmp = ROWS.with_suffix(".tmp")
    tmp.write_text(json.dumps(rows, indent=1) + "\n")
    tmp.replace(ROWS)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pairs", nargs="*", metavar="PAIR", help=", ".join(PAIRS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--budgets", nargs="+", type=float, default=[1.0],
                        help="tried from the smallest up, stopping at the first that beats the fallback")
    parser.add_argument("--reuse-fallback", action="store_true",
                        help="take the pair's fallback scores from its recorded rows (trained with the same seeds) "
                             "instead of training the fallback again: for runs where only tuning code changed")
    parser.add_argument("--rewrite", action="store_true", help="only write the table again from the recorded rows")
    args = parser.parse_args()
    if args.rewrite:
        body = markdown(load_rows())
        print(write_table("autotune", "mode=autotune: cost and result against the fallback and RL Zoo", body))
        return
    unknown = sorted(set(args.pairs) - set(PAIRS))
    if unknown:
        parser.error(f"unknown pair {unknown[0]}; use {', '.join(PAIRS)}")
    started, rows = now(), load_rows()
    for name in args.pairs or PAIRS:
        recorded = [r for r in rows if r["pair"] == name and r["seeds"] == args.seeds]
        # the newest such row: rows are kept in budget order, and an older budget's row can be of other code
        reused = max(recorded, key=lambda r: r["date"]) if args.reuse_fallback and recorded else None
        fallback = reused["fallback"] if reused else fallback_evals(PAIRS[name][0], args.seeds, WORK / name)
        for index, multiple in enumerate(sorted(args.budgets)):
            row = measure(name, args.seeds, multiple, fallback)
            row["fallback_commit"] = reused.get("fallback_commit", reused["commit"]) if reused else row["commit"]
            print(json.dumps(row), flush=True)
            if index == 0:  # the pair's rows of other code go: the table shows what this code does
                rows = [r for r in rows if r["pair"] != name or same_code(r["commit"], other_spaces(name), NEUTRAL)]
            rows = save_row(rows, row)
            if beats(row):
                break
    body = markdown(rows)
    print(body)
    print(write_table("autotune", "mode=autotune: cost and result against the fallback and RL Zoo", body, started))


if __name__ == "__main__":
    main()
