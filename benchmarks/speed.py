"""Speed benchmark: rlexp vs Stable-Baselines3 (and rejax, a JAX-compiled loop) on the same work, alternating.

Usage: python benchmarks/speed.py --sb3-python /path/to/sb3-venv/bin/python
       [--rejax-python /path/to/rejax-venv/bin/python] [--reps 3] [CASE ...]
rlexp runs through the normal CLI with RL Zoo's hyperparameters (the tuned presets); SB3 runs
../shared/bench/sb3_cases.py (sb3-contrib's RecurrentPPO: benchmarks/sb3_extra_cases.py; PPO Pendulum:
benchmarks/sb3_extra_cases.py); rejax runs benchmarks/rejax_cases.py (its cases: REJAX). rlexp's runs use a fresh
XLA cache folder each (run.compile_cache), so its first call compiles as a new machine's would. Steady-state
speed leaves out each tool's first call (rlexp: summary.json's first training call; rejax: its compiled second
call; SB3 has no compilation). Prints one JSON line per run and a Markdown table of medians. The runs are merged into
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
    "dqn-cartpole": ["agent=dqn", "env=cartpole", "run.max_steps=5e4", "run.target_reward=null"],
    "td3-pendulum": ["agent=td3", "env=pendulum", "run.max_steps=2e4", "run.target_reward=null"],
    "sac-pendulum": ["agent=sac", "env=pendulum", "run.max_steps=2e4", "run.target_reward=null"],
    "ppo-pendulum": ["agent=ppo", "env=pendulum", "run.max_steps=1e5", "run.target_reward=null"],
    # sb3-contrib's RecurrentPPO, QRDQN, TQC (also with SB3's HER) and CrossQ (benchmarks/sb3_extra_cases.py; the SB3
    # virtualenv needs sb3-contrib, and gymnasium-robotics for FetchReach)
    "ppo-lstm-cartpole-novel": ["agent=ppo", "env=cartpole_novel", "model=lstm", "run.max_steps=2e4",
                                "run.target_reward=null"],
    "qrdqn-cartpole": ["agent=qrdqn", "env=cartpole", "run.max_steps=5e4", "run.target_reward=null"],
    "tqc-pendulum": ["agent=tqc", "env=pendulum", "run.max_steps=2e4", "run.target_reward=null"],
    "crossq-pendulum": ["agent=crossq", "env=pendulum", "run.max_steps=2e4", "run.target_reward=null"],
    "tqc-her-fetchreach": ["agent=tqc", "env=generic", "env.id=FetchReach-v4", "run.max_steps=2e4",
                           "run.target_reward=null"],
}
SB3_EXTRA_CASES = ROOT / "benchmarks" / "sb3_extra_cases.py"
EXTRA = ("ppo-lstm-cartpole-novel", "ppo-pendulum", "qrdqn-cartpole", "tqc-pendulum", "crossq-pendulum",
         "tqc-her-fetchreach")
REJAX_CASES = ROOT / "benchmarks" / "rejax_cases.py"
REJAX = ("ppo-cartpole", "td3-pendulum")  # (rejax has no gSDE, which PPO Pendulum's row uses)
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
    with tempfile.TemporaryDirectory() as cache:  # a cold XLA cache: the first call compiles
        stdout, stderr, wall, rss = timed([sys.executable, "-m", "rlexp", *CASES[case], f"seed={seed}",
                                           "run.progress=none", f"run.compile_cache={cache}"], cwd)
    m = SUMMARY.search(stdout)
    if not m:
        raise SystemExit(stdout[-2000:] + stderr[-2000:])
    steps, seconds, mean, std = m.groups()
    summary = json.loads((Path(re.search(r"run dir: (\S+)", stdout).group(1)) / "summary.json").read_text())
    steps = int(steps.replace(",", ""))
    return dict(tool="rlexp", case=case, seed=seed, seconds=float(seconds), steps=steps,
                first_call_s=summary["first_call_seconds"], steady_s=round(steps / summary["steady_steps_per_s"], 2),
                eval_mean=float(mean), eval_std=float(std), wall_s=round(wall, 2), peak_rss_mb=round(rss))


def run_rejax(python: str, case: str, seed: int) -> dict:
    """rejax's case: training seconds as one training's (its first call: compilation and training), steady-state
    as its compiled second call; the wall of a process that trains once (imports, setup and the first call)."""
    stdout, _, wall, rss = timed([python, str(REJAX_CASES), case, str(seed)])
    row = json.loads(stdout.strip().splitlines()[-1])
    code = "from importlib.metadata import version as v; print(f\"rejax {v('rejax')}, JAX {v('jax')}\")"
    versions = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    return dict(tool="rejax", case=case, seed=seed, seconds=row["first_call_seconds"], steps=row["steps"],
                first_call_s=row["first_call_seconds"], steady_s=row["seconds"], eval_mean=row["eval_mean"],
                eval_std=row["eval_std"], wall_s=round(row["import_seconds"] + row["first_call_seconds"], 2),
                process_wall_s=round(wall, 2), peak_rss_mb=round(rss), versions=versions)


def run_sb3(python: str, case: str, seed: int) -> dict:
    stdout, _, wall, rss = timed([python, str(SB3_EXTRA_CASES if case in EXTRA else SB3_CASES), case, str(seed)])
    row = json.loads(stdout.strip().splitlines()[-1])
    return dict(tool="sb3", case=case, seed=seed, seconds=row["seconds"], steps=row["steps"],
                steady_s=row["seconds"], eval_mean=row["eval_mean"], eval_std=row["eval_std"], wall_s=round(wall, 2), peak_rss_mb=round(rss),
                versions=sb3_versions(python))


def sb3_versions(python: str) -> str:
    """The peer's library versions, as its interpreter reports them."""
    code = ("from importlib.metadata import version as v; "
            "print(f\"SB3 {v('stable-baselines3')}, PyTorch {v('torch')}\")")
    return subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def table(rows: list[dict], cases: list[str]) -> str:
    """Markdown table of medians per case and tool: training seconds (the first call included), steady-state
    seconds and steps/s (without it), the ratios SB3 time / rlexp time and rejax / rlexp, then per-seed lines
    (with when, at which commit and on which CPU each case was measured, where the rows say)."""
    lines = ["| case | tool | train s (median) | first call s | steady-state s | steady steps/s | peak RSS MB "
             "| eval mean (median) | wall s (median) | SB3 / rlexp (train) | rejax / rlexp (steady) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    per_seed = []
    for case in cases:
        med = {tool: [r for r in rows if r["case"] == case and r["tool"] == tool]
               for tool in ("rlexp", "sb3", "rejax")}
        secs = {tool: statistics.median(r["seconds"] for r in rs) for tool, rs in med.items() if rs}
        steady = {tool: statistics.median(r["steady_s"] for r in rs) for tool, rs in med.items()
                  if rs and all("steady_s" in r for r in rs)}
        for tool, rs in med.items():
            if not rs:
                continue
            first = (f"{statistics.median(r['first_call_s'] for r in rs):.2f}"
                     if all("first_call_s" in r for r in rs) else "")
            ratio = f"{secs['sb3'] / secs['rlexp']:.2f}x" if tool == "rlexp" and "sb3" in secs else ""
            jax = (f"{steady['rejax'] / steady['rlexp']:.2f}x" if tool == "rlexp" and "rejax" in steady
                   and "rlexp" in steady else "")
            lines.append(f"| {case} | {tool} | {secs[tool]:.1f} | {first} | "
                         + (f"{steady[tool]:.2f} | {rs[0]['steps'] / steady[tool]:,.0f}" if tool in steady else " | ")
                         + f" | {statistics.median(r['peak_rss_mb'] for r in rs):,.0f} | "
                         f"{statistics.median(r['eval_mean'] for r in rs):.1f} | "
                         f"{statistics.median(r['wall_s'] for r in rs):.1f} | {ratio} | {jax} |")
            versions = f", {rs[0]['versions']}" if "versions" in rs[0] else ""
            where = (f" ({rs[0]['date']}, commit {rs[0]['commit']}, {rs[0]['machine']}{versions})"
                     if "date" in rs[0] else "")
            per_seed.append(f"- {case}, {tool}{where}: train s " + " / ".join(f"{r['seconds']:g}" for r in rs)
                            + ("; steady s " + " / ".join(f"{r['steady_s']:g}" for r in rs) if tool in steady else "")
                            + "; wall s " + " / ".join(f"{r['wall_s']:g}" for r in rs)
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
    note = ("rlexp runs the CLI with the tuned presets (RL Zoo's values), each run with a fresh XLA cache; SB3 "
            "runs ../shared/bench/sb3_cases.py (ppo-lstm-cartpole-novel: sb3-contrib's RecurrentPPO, and "
            "ppo-pendulum, in benchmarks/sb3_extra_cases.py); rejax (a JAX-compiled loop, environment included) "
            "runs benchmarks/rejax_cases.py on gymnax's CartPole and Pendulum; all with the same hyperparameters, "
            f"networks, env steps and updates. They alternate per seed (seeds 0..{reps - 1}), nothing else running; "
            "medians over the seeds. Train s: the training, its first call (tracing, compilation) included; rejax: "
            "its first jitted call. Steady-state s: the training without the first call (rlexp: from summary.json's "
            "steady_steps_per_s; rejax: a second call of the compiled function; SB3: its training). Wall s: the "
            "whole process of one training (rejax: its imports and setup plus the first call). Ratios are only "
            "taken within one case's side-by-side runs.\n\n")
    commands = list(dict.fromkeys(r["command"] for r in merged if "command" in r))
    note += "Measured by " + "; ".join(f"`{c}`" for c in commands) + ".\n\n" if commands else ""
    cases = list(dict.fromkeys(r["case"] for r in merged))
    print(write_table("speed", "Speed: rlexp vs Stable-Baselines3, side by side", note + table(merged, cases)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("cases", nargs="*", default=list(CASES))
    parser.add_argument("--sb3-python", required=False)
    parser.add_argument("--rejax-python", help="a virtualenv with rejax 0.1.3, gymnax<1 and jax (its cases: REJAX)")
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
            if opts.rejax_python and case in REJAX:
                rows.append(run_rejax(opts.rejax_python, case, rep) | where | {"date": now()})
                print(json.dumps(rows[-1]), flush=True)
    print("\n" + table(rows, opts.cases))
    if not opts.no_write and opts.sb3_python:
        record(rows, opts.reps)


if __name__ == "__main__":
    main()
