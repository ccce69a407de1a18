"""Startup: `python -m rlexp --help` wall time, and seconds from process start to the first env step.

Usage: python benchmarks/startup.py [--reps 5]
The first-step run is the default command (PPO CartPole) with a tiny budget; the env step is timed by
wrapping `Agent.env_step` in a child process, measured from that process's start (its /proc stat entry).
Prints the medians and writes benchmarks/results/startup.md.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

CHILD = r"""
import os, sys, time, runpy
ticks = os.sysconf("SC_CLK_TCK")
with open("/proc/self/stat") as f:
    start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
with open("/proc/uptime") as f:
    uptime = float(f.read().split()[0])
started = time.time() - (uptime - start_ticks / ticks)   # wall-clock time the process started
from rlexp.agents import base
original = base.Agent.env_step
def first_step(self, actions):
    base.Agent.env_step = original
    print(f"FIRST_ENV_STEP {time.time() - started:.2f}", flush=True)
    return original(self, actions)
base.Agent.env_step = first_step
import tempfile
sys.argv = ["rlexp", "run.max_steps=8", "run.eval_episodes=1", "run.progress=none",
            "run_dir=" + tempfile.mkdtemp(prefix="rlexp_startup_") + "/run"]
runpy.run_module("rlexp", run_name="__main__")
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=5)
    opts = parser.parse_args()
    helps, firsts = [], []
    for _ in range(opts.reps):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "rlexp", "--help"], check=True, capture_output=True)
        helps.append(time.perf_counter() - start)
        out = subprocess.run([sys.executable, "-c", CHILD], check=True, capture_output=True, text=True).stdout
        firsts.append(float(out.split("FIRST_ENV_STEP ")[1].split()[0]))
    lines = [f"| `python -m rlexp --help` | {statistics.median(helps):.2f} | {', '.join(f'{h:.2f}' for h in helps)} |",
             f"| process start to the first env step (PPO CartPole) | {statistics.median(firsts):.2f} | "
             f"{', '.join(f'{f:.2f}' for f in firsts)} |"]
    body = ("Wall seconds, medians of the repetitions.\n\n| what | median s | runs |\n|---|---:|---|\n"
            + "\n".join(lines))
    print(body)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from current import write_table

    print(write_table("startup", "Startup time", body))


if __name__ == "__main__":
    main()
