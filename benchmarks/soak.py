"""Soak test: one long training run with its memory (RSS) sampled every minute.

Usage: python benchmarks/soak.py [--minutes 60] [--interval 60] [-- extra overrides]
Default: PPO on LunarLander-v3 with no step limit and no target, stopped (SIGINT) after --minutes.
Prints one JSON line per sample and a Markdown summary: RSS after the warm-up (5 min), at the end,
and the growth in between, for the training process and (env.vectorization=async) its env workers apart.
"""
from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ["agent=ppo", "env=lunarlander", "run.max_steps=1e12", "run.target_reward=null", "run.progress=log",
           "agent.early_stop_patience=0"]


def memory_mb(pid: int, field: str = "VmRSS", source: str = "status") -> float:
    """A /proc memory figure in MB: VmRSS from status, or Pss (shared pages split between processes) from
    smaps_rollup, which is what adds up for forked env workers."""
    text = Path(f"/proc/{pid}/{source}").read_text()
    return int(next(line.split()[1] for line in text.splitlines() if line.startswith(f"{field}:"))) / 1024


def children(pid: int) -> list[int]:
    """All descendants of a process (env worker processes with env.vectorization=async)."""
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            for task in Path(f"/proc/{p}/task").iterdir():
                kids = [int(c) for c in (task / "children").read_text().split()]
                found += kids
                todo += kids
        except (FileNotFoundError, ProcessLookupError):
            continue
    return found


def sample(pid: int) -> dict[str, float]:
    """RSS of the training process, and the PSS of it and of its env workers, in MB."""
    workers = 0.0
    for child in children(pid):
        try:
            workers += memory_mb(child, "Pss", "smaps_rollup")
        except (FileNotFoundError, ProcessLookupError, StopIteration):
            pass
    main_pss = memory_mb(pid, "Pss", "smaps_rollup")
    return {"rss_mb": round(memory_mb(pid), 1), "workers_pss_mb": round(workers, 1),
            "total_pss_mb": round(main_pss + workers, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=60)
    parser.add_argument("--interval", type=float, default=60, help="seconds between RSS samples")
    parser.add_argument("--warmup", type=float, default=5, help="minutes before the growth baseline")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    cwd = ROOT / "benchmarks" / "runs"
    cwd.mkdir(exist_ok=True)
    command = [sys.executable, "-m", "rlexp", *DEFAULT, *args.overrides]
    print(json.dumps({"command": " ".join(command[1:])}), flush=True)
    log = open(cwd / "soak_run.log", "w")
    proc = subprocess.Popen(command, cwd=cwd, stdout=log, stderr=subprocess.STDOUT)
    start, samples = time.monotonic(), []
    try:
        while proc.poll() is None and time.monotonic() - start < args.minutes * 60:
            time.sleep(min(args.interval, max(0.0, args.minutes * 60 - (time.monotonic() - start))))
            if proc.poll() is not None:
                break
            row = {"minute": round((time.monotonic() - start) / 60, 2), **sample(proc.pid)}
            samples.append(row)
            print(json.dumps(row), flush=True)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(120)
            except subprocess.TimeoutExpired:
                proc.kill()
    if proc.returncode not in (0, -signal.SIGINT, 130, 1) or not samples:
        raise SystemExit(f"the run ended early (exit {proc.returncode}); see {cwd / 'soak_run.log'}")
    base = next((s for s in samples if s["minute"] >= args.warmup), samples[0])
    end = samples[-1]
    print(f"| process | RSS at {base['minute']:.0f} min (MB) | RSS at {end['minute']:.0f} min (MB) | peak (MB) | growth |")
    print("|---|---|---|---|---|")
    for key, name in (("rss_mb", "training process (RSS)"), ("workers_pss_mb", "env workers (PSS)"),
                      ("total_pss_mb", "all processes (PSS)")):
        if not base[key]:
            continue
        growth = 100 * (end[key] - base[key]) / base[key]
        print(json.dumps({"process": name, "baseline": base[key], "end": end[key], "growth_pct": round(growth, 2)}))
        print(f"| {name} | {base[key]:.0f} | {end[key]:.0f} | {max(s[key] for s in samples):.0f} | {growth:+.1f}% |")


if __name__ == "__main__":
    main()
