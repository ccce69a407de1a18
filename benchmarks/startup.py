"""Startup: `python -m rlexp --help` wall time, and seconds from process start to the first env step.

Usage: python benchmarks/startup.py [--reps 5]
The first-step run is the default command (PPO CartPole) with a tiny budget; the env step is timed by
wrapping `Agent.env_step` in a child process, measured from that process's start (its /proc stat entry).
Prints the medians.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

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
sys.argv = ["rlexp", "run.max_steps=8", "run.eval_episodes=0", "run.progress=none", "hydra.run.dir=/tmp/rlexp_startup"]
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
    print(f"--help: median {statistics.median(helps):.2f} s ({', '.join(f'{h:.2f}' for h in helps)})")
    print(f"first env step: median {statistics.median(firsts):.2f} s ({', '.join(f'{f:.2f}' for f in firsts)})")


if __name__ == "__main__":
    main()
