"""Speed benchmark: rlexp vs Stable-Baselines3 on the same work, alternating A B A B.

Usage: python benchmarks/speed.py --sb3-python /path/to/sb3-venv/bin/python [--reps 3] [CASE ...]
rlexp runs through the normal CLI with RL Zoo's hyperparameters (the tuned presets); SB3 runs
../shared/bench/sb3_cases.py (sb3-contrib's RecurrentPPO: benchmarks/sb3_extra_cases.py). Prints one JSON line per run and a Markdown table of medians. The runs are merged into
benchmarks/results/speed.json (a case measured again replaces that case's runs; each run keeps its date,
commit and machine) and benchmarks/results/speed.md is rewritten from it (`--no-write`: print only;
`--record LOG`: merge the JSON lines of an earlier run's output instead of running).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from current import RESULTS, command_line, commit, machine, now, write_table  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SB3_CASES = ROOT.parent / "shared" / "bench" / "sb3_cases.py"
CASES = {  # same hyperparameters, networks, env steps and gradient updates as sb3_cases.py
    "ppo-cartpole": ["agent=ppo", "env=cartpole", "run.max_steps=1e5", "run.target_reward=null"],
    "a2c-cartpole": ["agent=a2c", "env=cartpole", "run.max_steps=2e5", "run.target_reward=null"],
    "dqn-cartpole": ["agent=dqn", "env=cartpole", "run.max_steps=5e4", "run.target_reward=null", "agent.lr=2.3e-3"],
    "td3-pendulum": ["agent=td3", "env=pendulum", "run.max_steps=2e4", "run.target_reward=null"],
    "sac-pendulum": ["agent=sac", "env=pendulum", "run.max_steps=2e4", "run.target_reward=null"],
    # sb3-contrib's RecurrentPPO (benchmarks/sb3_extra_cases.py; the SB3 virtualenv needs sb3-contrib)
    "ppo-lstm-cartpole-novel": ["agent=ppo", "env=cartpole_novel", "model=lstm", "run.max_steps=2e4",
                                "run.target_reward=null"],
}
SB3_EXTRA_CASES = ROOT / "benchmarks" / "sb3_extra_cases.py"
EXTRA = ("ppo-lstm-cartpole-novel",)
SUMMARY = re.compile(r"done \(\w+\): ([\d,]+) steps in ([\d.]+) s .*\| eval (-?[\d.]+) ± ([\d.]+)")


def timed(command: list[str], cwd: Path | None = None) -> tuple[str, str, float, float]:
    """Run a command; (stdout, stderr, wall seconds, peak RSS in MB of that process)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(command, cwd=cwd, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0), err.seek(0)
        stdout, stderr = out.read(), err.read()
    if proc.returncode:
        raise SystemExit(f"{' '.join(command)} failed:\n{stdout[-2000:]}{stderr[-2000:]}")
    return stdout, stderr, wall, usage.ru_maxrss / 1024


def run_rlexp(case: str, seed: int) -> dict:
    cwd = ROOT / "benchmarks" / "runs"
    cwd.mkdir(exist_ok=True)
    stdout, stderr, wall, rss = timed([sys.executable, "-m", "rlexp", *CASES[case], f"seed={seed}",
                                       "run.progress=none"], cwd)
    m = SUMMARY.search(stdout)
    if not m:
        raise SystemExit(stdout[-2000:] + stderr[-2000:])
    steps, seconds, mean, std = m.groups()
    return dict(tool="rlexp", case=case, seed=seed, seconds=float(seconds), steps=int(steps.replace(",", "")),
                eval_mean=float(mean), eval_std=float(std), wall_s=round(wall, 2), peak_rss_mb=round(rss))


def run_sb3(python: str, case: str, seed: int) -> dict:
    stdout, _, wall, rss = timed([python, str(SB3_EXTRA_CASES if case in EXTRA else SB3_CASES), case, str(seed)])
    row = json.loads(stdout.strip().splitlines()[-1])
    return dict(tool="sb3", case=case, seed=seed, seconds=row["seconds"], steps=row["steps"],
                eval_mean=row["eval_mean"], eval_std=row["eval_std"], wall_s=round(wall, 2), peak_rss_mb=round(rss),
                versions=sb3_versions(python))


def sb3_versions(python: str) -> str:
    """The peer's library versions, as its interpreter reports them."""
    code = ("from importlib.metadata import version as v; "
            "print(f\"SB3 {v('stable-baselines3')}, PyTorch {v('torch')}\")")
    return subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def table(rows: list[dict], cases: list[str]) -> str:
    """Markdown table of medians per case and tool, the ratio SB3 time / rlexp time, then per-seed lines
    (with when, at which commit and on which CPU each case was measured, where the rows say)."""
    lines = ["| case | tool | train s (median) | steps/s | peak RSS MB | eval mean (median) | wall s (median) "
             "| SB3 time / rlexp time |", "|---|---|---|---|---|---|---|---|"]
    per_seed = []
    for case in cases:
        med = {tool: [r for r in rows if r["case"] == case and r["tool"] == tool] for tool in ("rlexp", "sb3")}
        secs = {tool: statistics.median(r["seconds"] for r in rs) for tool, rs in med.items() if rs}
        for tool, rs in med.items():
            if not rs:
                continue
            ratio = f"{secs['sb3'] / secs['rlexp']:.2f}x" if tool == "rlexp" and "sb3" in secs else ""
            lines.append(f"| {case} | {tool} | {secs[tool]:.1f} | {rs[0]['steps'] / secs[tool]:,.0f} | "
                         f"{statistics.median(r['peak_rss_mb'] for r in rs):,.0f} | "
                         f"{statistics.median(r['eval_mean'] for r in rs):.1f} | "
                         f"{statistics.median(r['wall_s'] for r in rs):.1f} | {ratio} |")
            versions = f", {rs[0]['versions']}" if "versions" in rs[0] else ""
            where = (f" ({rs[0]['date']}, commit {rs[0]['commit']}, {rs[0]['machine']}{versions})"
                     if "date" in rs[0] else "")
            per_seed.append(f"- {case}, {tool}{where}: train s " + " / ".join(f"{r['seconds']:g}" for r in rs)
                            + "; eval " + " / ".join(f"{r['eval_mean']:g}" for r in rs))
    return "\n".join(lines + [""] + per_seed)


def record(rows: list[dict], reps: int) -> None:
    """Merge `rows` into results/speed.json, replacing the cases they measure, and rewrite speed.md."""
    store = RESULTS / "speed.json"
    kept = json.loads(store.read_text()) if store.exists() else []
    new_cases = {r["case"] for r in rows}
    merged = [r for r in kept if r["case"] not in new_cases] + rows
    merged.sort(key=lambda r: list(CASES).index(r["case"]) if r["case"] in CASES else len(CASES))
    RESULTS.mkdir(exist_ok=True)
    store.write_text(json.dumps(merged, indent=1) + "\n")
    note = ("rlexp runs the CLI with the tuned presets (RL Zoo's values); SB3 runs ../shared/bench/sb3_cases.py "
            "(ppo-lstm-cartpole-novel: sb3-contrib's RecurrentPPO in benchmarks/sb3_extra_cases.py) "
            "with the same hyperparameters, networks, env steps and updates. They alternate per seed (seeds 0.."
            f"{reps - 1}), nothing else running; times are training seconds, medians over the seeds. Ratios are "
            "only taken within one case's side-by-side runs.\n\n")
    commands = list(dict.fromkeys(r["command"] for r in merged if "command" in r))
    note += "Measured by " + "; ".join(f"`{c}`" for c in commands) + ".\n\n" if commands else ""
    cases = list(dict.fromkeys(r["case"] for r in merged))
    print(write_table("speed", "Speed: rlexp vs Stable-Baselines3, side by side", note + table(merged, cases)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("cases", nargs="*", default=list(CASES))
    parser.add_argument("--sb3-python", required=False)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--no-write", action="store_true", help="print the table only")
    parser.add_argument("--record", metavar="LOG", help="merge an earlier run's JSON lines instead of running")
    opts = parser.parse_args()
    if opts.record:
        return record([json.loads(line) for line in open(opts.record) if line.startswith("{")], opts.reps)
    unknown = [c for c in opts.cases if c not in CASES]
    if unknown:
        parser.error(f"unknown case {', '.join(unknown)}; choose from {', '.join(CASES)}")
    rows = []
    where = dict(commit=commit(), machine=machine().split(",")[0], command=command_line())
    for case in opts.cases:
        for rep in range(opts.reps):
            rows.append(run_rlexp(case, rep) | where | {"date": now()})
            print(json.dumps(rows[-1]), flush=True)
            if opts.sb3_python:
                rows.append(run_sb3(opts.sb3_python, case, rep) | where | {"date": now()})
                print(json.dumps(rows[-1]), flush=True)
    print("\n" + table(rows, opts.cases))
    if not opts.no_write and opts.sb3_python:
        record(rows, opts.reps)


if __name__ == "__main__":
    main()
