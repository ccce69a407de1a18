"""Populations against separate processes and rejax's `jax.vmap`: N seeds of one case trained together.

Usage: python benchmarks/population.py [--cases ppo-cartpole a2c-cartpole] [--members 1 2 4 8 16 32]
       [--rejax-python <venv>/bin/python] [--no-write]

For each case and member count N:
- rlexp's population: `python -m rlexp <case> run.seeds=N` in one process, twice (the first compiles the XLA
  program that the compile cache keeps for the second); its training seconds (the slowest member's, as the
  command's last line gives them), the process's wall seconds and its peak resident memory;
- N single runs, as many at a time as there are cores: the wall seconds of all of them, their training seconds
  summed, and the largest peak memory of one process times the number running at a time;
- rejax (benchmarks/rejax_cases.py) with `jax.vmap` over N keys, where a case has a rejax twin: the compiled
  call's seconds.
Every run evaluates nothing (run.eval_episodes=0), so the seconds are training's. The table goes to
benchmarks/results/population.md with the date, command, commit and machine (CPU and bfloat16 support).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from current import machine, now, write_table  # noqa: E402

CASES = {  # rlexp's arguments (RL Zoo's rows; speed.py's cases: a fixed number of steps, no target), and the rejax
    # case with the same work
    "ppo-cartpole": (["agent=ppo", "env=cartpole", "run.max_steps=1e5", "run.target_reward=null"], "ppo-cartpole"),
    "a2c-cartpole": (["agent=a2c", "env=cartpole", "run.max_steps=2e5", "run.target_reward=null"], None),
}
DONE_POPULATION = re.compile(r"done: (\d+) members, ([\d,]+) steps in ([\d.]+) s")
DONE_SINGLE = re.compile(r"done \(\w+\): ([\d,]+) steps in ([\d.]+) s")


def run_measured(command: list[str], cwd: Path) -> tuple[str, float, float]:
    """(stdout, wall seconds, peak resident MB) of a command, its peak memory read from wait4."""
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # the child: the command, its output in files
        out = os.open(cwd / "out.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        err = os.open(cwd / "err.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(out, 1)
        os.dup2(err, 2)
        os.chdir(cwd)
        os.execvpe(command[0], command, dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", WANDB_MODE="offline"))
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - start
    text = (cwd / "out.txt").read_text()
    if status:
        raise SystemExit(f"{' '.join(command)} failed:\n{text[-2000:]}{(cwd / 'err.txt').read_text()[-2000:]}")
    return text, wall, usage.ru_maxrss / 1024


def population(args: list[str], members: int) -> dict:
    """The population trained twice: the first run compiles its XLA program (run.compile_cache keeps it), the
    second finds it compiled, as a single run of a case trained before does."""
    rows = []
    for _ in range(2):
        with tempfile.TemporaryDirectory() as work:
            out, wall, peak = run_measured([sys.executable, "-m", "rlexp", *args, f"run.seeds={members}",
                                            "run.eval_episodes=0", "run.progress=none"], Path(work))
        rows.append(dict(train=float(DONE_POPULATION.search(out).group(3)), wall=wall, peak=peak))
    return rows[1] | {"first_train": rows[0]["train"]}


def processes(args: list[str], members: int, cores: int) -> dict:
    """N single runs, `cores` at a time."""
    train, peaks, start = 0.0, [], time.perf_counter()
    with tempfile.TemporaryDirectory() as work:
        pending, running = list(range(members)), {}
        while pending or running:
            while pending and len(running) < cores:
                seed = pending.pop(0)
                folder = Path(work) / str(seed)
                folder.mkdir()
                command = [sys.executable, "-m", "rlexp", *args, f"seed={seed}", "run.eval_episodes=0",
                           "run.progress=none"]
                out = open(folder / "out.txt", "w")
                running[subprocess.Popen(command, cwd=folder, stdout=out, stderr=subprocess.STDOUT,
                                         env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")).pid] = (folder, out)
            pid, status, usage = os.wait4(-1, 0)
            folder, out = running.pop(pid)
            out.close()
            text = (folder / "out.txt").read_text()
            if status:
                raise SystemExit(f"a single run failed:\n{text[-2000:]}")
            train += float(DONE_SINGLE.search(text).group(2))
            peaks.append(usage.ru_maxrss / 1024)
    return dict(wall=time.perf_counter() - start, train=train, peak=max(peaks) * min(cores, members))


def rejax(python: str, case: str, members: int) -> dict | None:
    out = subprocess.run([python, str(Path(__file__).parent / "rejax_cases.py"), case, "0", "--vmap", str(members)],
                         capture_output=True, text=True)
    if out.returncode:
        print(f"rejax {case} x{members} failed: {out.stderr[-500:]}", file=sys.stderr)
        return None
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--members", nargs="+", type=int, default=[1, 2, 4, 8, 16, 32])
    parser.add_argument("--processes-up-to", type=int, default=8, help="N single runs only up to this N")
    parser.add_argument("--rejax-python", default=None)
    parser.add_argument("--no-write", action="store_true")
    options = parser.parse_args()
    started, cores = now(), len(os.sched_getaffinity(0))
    rows = []
    for case in options.cases:
        args, rejax_case = CASES[case]
        one = jax_one = None
        for n in options.members:
            pop = population(args, n)
            one = one or pop
            procs = processes(args, n, cores) if n <= options.processes_up_to else None
            jax_row = rejax(options.rejax_python, rejax_case, n) if options.rejax_python and rejax_case else None
            jax_one = jax_one or jax_row
            row = (f"| {case} | {n} | {pop['train']:.1f} | {pop['train'] / one['train']:.2f}x | {pop['first_train']:.1f} | "
                   f"{pop['wall']:.1f} | "
                   f"{pop['peak']:,.0f} ({pop['peak'] / one['peak']:.2f}x) | "
                   + (f"{procs['wall']:.1f} | {procs['train']:.1f} | {procs['peak']:,.0f} | " if procs else "- | - | - | ")
                   + (f"{jax_row['seconds']:.1f} ({jax_row['seconds'] / jax_one['seconds']:.2f}x) |"
                      if jax_row and jax_one else "- |"))
            print(row, flush=True)
            rows.append(row)
    body = (f"{cores} cores. Population: `python -m rlexp <case> run.seeds=N run.eval_episodes=0` in one process "
            "twice (train s: the slowest member's training seconds of the second run, whose XLA program the first "
            "compiled into run.compile_cache, as a single run's is after its first run; x: over one member's; first "
            "run: with the compilation). N processes: the same case with "
            f"seed=0..N-1 as single runs, {cores} at a time (train s: summed; peak MB: one process's peak times the "
            "runs at a time). rejax: `jax.vmap` of its compiled training over N keys (benchmarks/rejax_cases.py), "
            "the compiled call's seconds.\n\n"
            "| case | N | population train s | vs 1 | first run train s | population wall s | population peak MB | "
            "N processes wall s | N processes train s | N processes peak MB | rejax vmap s |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|\n"
            + "\n".join(rows) + "\n")
    if not options.no_write:
        print(write_table("population", "Populations: N seeds in one process", body, started))
    print(machine())


if __name__ == "__main__":
    main()
