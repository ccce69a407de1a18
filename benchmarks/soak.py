"""Soak test: one long training run with its memory (RSS) sampled every minute.

Usage: python benchmarks/soak.py [--minutes 60] [--interval 60] [-- extra overrides]
Default: PPO on LunarLander-v3 with no step limit and no target, stopped (SIGINT) after --minutes.
Prints one JSON line per sample and a Markdown summary: RSS after the warm-up (5 min), at the end,
and the growth in between. The RSS is summed over the run's whole process tree (worker envs too).
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


def tree_rss_mb(pid: int) -> float:
    """Resident memory of a process and all its descendants, in MB."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            status = Path(f"/proc/{p}/status").read_text()
            total += int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")))
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError, StopIteration):
            continue
    return total / 1024


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
            sample = {"minute": round((time.monotonic() - start) / 60, 2), "rss_mb": round(tree_rss_mb(proc.pid), 1)}
            samples.append(sample)
            print(json.dumps(sample), flush=True)
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
    growth = 100 * (end["rss_mb"] - base["rss_mb"]) / base["rss_mb"]
    print(json.dumps({"baseline_minute": base["minute"], "baseline_rss_mb": base["rss_mb"], "end_minute": end["minute"],
                      "end_rss_mb": end["rss_mb"], "peak_rss_mb": max(s["rss_mb"] for s in samples),
                      "growth_pct": round(growth, 2)}), flush=True)
    print(f"| minutes | RSS at {base['minute']:.0f} min (MB) | RSS at end (MB) | peak (MB) | growth |\n|---|---|---|---|---|\n"
          f"| {end['minute']:.0f} | {base['rss_mb']:.0f} | {end['rss_mb']:.0f} | "
          f"{max(s['rss_mb'] for s in samples):.0f} | {growth:+.1f}% |")


if __name__ == "__main__":
    main()
