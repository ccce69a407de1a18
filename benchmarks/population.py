"""Populations against separate processes and rejax's `jax.vmap`: N seeds of one case trained together.

Usage: python benchmarks/population.py [--cases ppo-cartpole a2c-cartpole ppo-pendulum] [--members 1 2 4 8 16 32]
       [--rejax-python <venv>/bin/python] [--no-write]
       python benchmarks/population.py --cases dqn-cartpole td3-pendulum sac-pendulum --members 1 2 4 8
       --table population_off_policy

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
    # RL Zoo's ppo.yml Pendulum-v1 row but gSDE (which a population does not train yet): 4 envs x 1024 steps, 10 epochs
    "ppo-pendulum": (["agent=ppo", "env=pendulum", "agent.use_sde=false", "run.max_steps=1e5",
                      "run.target_reward=null"], None),
    "dqn-cartpole": (["agent=dqn", "env=cartpole", "run.max_steps=5e4", "run.target_reward=null"], None),
    "td3-pendulum": (["agent=td3", "env=pendulum", "run.max_steps=2e4", "run.target_reward=null"], None),
    "sac-pendulum": (["agent=sac", "env=pendulum", "run.max_steps=2e4", "run.target_reward=null"], None),
}
MEMBERS_UP_TO = {"ppo-pendulum": 8}  # its issue's target is at 8 members; 16 and 32 would take ~10 min more
OFF_POLICY = ("dqn-cartpole", "td3-pendulum", "sac-pendulum")
FLOP_CASES = ("td3-pendulum", "sac-pendulum")  # FLOP-bound: their update FLOP/s against the GEMM peak
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


def population(args: list[str], members: int, runs: int = 2) -> dict:
    """The population trained `runs` times: the first run compiles its XLA program (run.compile_cache keeps it), the
    second finds it compiled, as a single run of a case trained before does (off-policy agents compile no XLA
    program: one run). With the population's update FLOPs (`update_flops`) where its agent has them counted."""
    rows = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as work:
            out, wall, peak = run_measured([sys.executable, "-m", "rlexp", *args, f"run.seeds={members}",
                                            "run.eval_episodes=0", "run.progress=none"], Path(work))
            flops = update_flops(next(Path(work).glob("outputs/*/*/seed_*/checkpoints/last.ckpt"))) * members
        rows.append(dict(train=float(DONE_POPULATION.search(out).group(3)), wall=wall, peak=peak, flops=flops))
    return rows[-1] | {"first_train": rows[0]["train"]}


def dense_flops(rows: int, widths: list[int]) -> int:
    """A dense network's forward FLOPs on `rows` rows: 2 * rows * in * out per layer."""
    return sum(2 * rows * a * b for a, b in zip(widths, widths[1:]))


def update_flops(checkpoint: Path) -> float:
    """A member's matmul FLOPs in all its updates, counted from its checkpoint (its config and update count): each
    network's forward pass 2 * rows * in * out per layer, a backward pass twice its forward (the weights' and the
    inputs' gradients). TD3, per critic update: the target actor and 2 target critics forward, 2 critics forward and
    backward; every policy_delay updates the actor forward and backward and critic 0 forward and back to its input.
    SAC, per update: the actor forward (next observations), 2 target critics forward, 2 critics forward and backward,
    then the actor forward and backward and 2 critics forward and back to their input. Other agents: 0 (not
    counted). Env steps' forward passes (a few rows each) are left out."""
    import numpy as np

    from rlexp.runs.checkpoints import read_arrays, read_state

    state, arrays = read_state(checkpoint), read_arrays(checkpoint)
    agent = state["agent"]
    if agent not in ("TD3", "SAC"):
        return 0.0
    config = state["config"]
    batch = int(config["buffer"]["batch_size"])
    hidden = [int(layer["units"]) for layer in config["model"]["layers"] if not layer.get("output")]
    obs, actions = int(np.prod(state["observation_shape"])), int(state["n_actions"])
    updates = int(arrays["var/updates"])
    actor = dense_flops(batch, [obs, *hidden, actions * (2 if agent == "SAC" else 1)])
    critic = dense_flops(batch, [obs + actions, *hidden, 1])
    if agent == "TD3":
        delay = int(config["agent"].get("policy_delay", 2))
        return updates * (actor + 8 * critic + (3 * actor + 2 * critic) / delay)
    return updates * (actor + 8 * critic + 3 * actor + 4 * critic)


def gemm_peak(size: int = 2048, repeats: int = 20) -> float:
    """TensorFlow's float32 matmul rate on large square matrices (FLOP/s): the CPU's practical float32 GEMM peak
    with the threads rlexp runs with."""
    import tensorflow as tf

    a = tf.random.normal([size, size])
    matmul = tf.function(lambda x: tf.matmul(x, x))
    matmul(a).numpy()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        matmul(a).numpy()
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best


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
    parser.add_argument("--cases", nargs="+", default=["ppo-cartpole", "a2c-cartpole", "ppo-pendulum"],
                        choices=list(CASES),
                        help="population.md's cases by default; the off-policy ones go to population_off_policy.md")
    parser.add_argument("--members", nargs="+", type=int, default=[1, 2, 4, 8, 16, 32])
    parser.add_argument("--processes-up-to", type=int, default=8, help="N single runs only up to this N")
    parser.add_argument("--rejax-python", default=None)
    parser.add_argument("--table", default="population", help="benchmarks/results/<table>.md")
    parser.add_argument("--no-write", action="store_true")
    options = parser.parse_args()
    started, cores = now(), len(os.sched_getaffinity(0))
    peak = gemm_peak() if set(options.cases) & set(FLOP_CASES) else None
    rows = []
    for case in options.cases:
        args, rejax_case = CASES[case]
        one = jax_one = None
        for n in [n for n in options.members if n <= MEMBERS_UP_TO.get(case, n)]:
            pop = population(args, n, runs=1 if case in OFF_POLICY else 2)
            one = one or pop
            procs = processes(args, n, cores) if n <= options.processes_up_to else None
            jax_row = rejax(options.rejax_python, rejax_case, n) if options.rejax_python and rejax_case else None
            jax_one = jax_one or jax_row
            row = (f"| {case} | {n} | {pop['train']:.1f} | {pop['train'] / one['train']:.2f}x | {pop['first_train']:.1f} | "
                   f"{pop['wall']:.1f} | "
                   f"{pop['peak']:,.0f} ({pop['peak'] / one['peak']:.2f}x) | "
                   + (f"{procs['wall']:.1f} | {procs['train']:.1f} | {procs['peak']:,.0f} | " if procs else "- | - | - | ")
                   + (f"{jax_row['seconds']:.1f} ({jax_row['seconds'] / jax_one['seconds']:.2f}x) |"
                      if jax_row and jax_one else "- |")
                   + (f" {pop['flops'] / pop['train'] / 1e9:.1f} ({pop['flops'] / pop['train'] / peak:.0%}) |"
                      if pop["flops"] and peak else " - |"))
            print(row, flush=True)
            rows.append(row)
    body = (f"{cores} cores. Population: `python -m rlexp <case> run.seeds=N run.eval_episodes=0` in one process "
            "twice (train s: the slowest member's training seconds of the second run, whose XLA program the first "
            "compiled into run.compile_cache, as a single run's is after its first run; x: over one member's; first "
            "run: with the compilation). N processes: the same case with "
            f"seed=0..N-1 as single runs, {cores} at a time (train s: summed; peak MB: one process's peak times the "
            "runs at a time). rejax: `jax.vmap` of its compiled training over N keys (benchmarks/rejax_cases.py), "
            "the compiled call's seconds. Off-policy cases (no XLA program) train once, and their update GFLOP/s is the "
            "members' matmul FLOPs in their updates (`update_flops`: counted from each member's update count, layer "
            "widths and batch size) over the population's train seconds (the whole training, its random warm-up "
            "included), against TensorFlow's float32 matmul rate on 2048x2048 matrices on this machine"
            + (f" ({peak / 1e9:.1f} GFLOP/s)" if peak else "") + ".\n\n"
            "| case | N | population train s | vs 1 | first run train s | population wall s | population peak MB | "
            "N processes wall s | N processes train s | N processes peak MB | rejax vmap s | update GFLOP/s (of peak) |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|---|\n"
            + "\n".join(rows) + "\n")
    if not options.no_write:
        print(write_table(options.table, "Populations: N seeds in one process", body, started))
    print(machine())


if __name__ == "__main__":
    main()
