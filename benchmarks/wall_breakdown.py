"""Where the wall time of a whole `python -m rlexp` training process goes (the "ppo-cartpole" speed case).

Usage: python benchmarks/wall_breakdown.py [--reps 3] [--no-plain] [--no-write] [override ...]

Each repetition runs the command in a child process whose bootstrap (CHILD) times it from inside:
- imports: `importlib._bootstrap._find_and_load` (every import that loads a module) is wrapped, and each
  module's own time (without the imports it starts) goes to its top-level package's group;
- phases: rlexp's functions (Hydra's composition, the train command's steps, env creation, the agent's build,
  fit, train iterations, the final evaluation, checkpoints, history, plot, TensorBoard, ...) are wrapped
  right after their modules load, and TensorFlow's tracing (`_create_concrete_function`) and the garbage
  collector (`gc.callbacks`) are timed wherever they happen.
Times are exclusive: a nested import, phase, trace or collection is taken out of the one around it, so the
rows add up to the child's wall time as the parent measures it (spawn to exit); what no row covers is
"other". The first train iteration's cost beyond later ones' per-step cost (TensorFlow optimising and
instantiating the graphs it traced) is an estimate taken out of "training proper".
With --plain (the default) each repetition also runs the command without the bootstrap, alternating, so
the instrumentation's own cost shows. Prints the medians and writes benchmarks/results/wall_breakdown.md.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CASE = ["agent=ppo", "env=cartpole", "run.max_steps=1e5", "run.target_reward=null", "seed=0", "run.progress=none"]

CHILD = r"""
import atexit, gc, importlib._bootstrap as bootstrap, json, os, runpy, sys, threading, time

BOOT = time.time()
OUT = os.environ["RLEXP_WALL_BREAKDOWN"]
MAIN = threading.get_ident()
GROUPS = {"tensorflow": "tensorflow", "tensorboard": "other", "keras": "keras", "hydra": "hydra/omegaconf",
          "omegaconf": "hydra/omegaconf", "antlr4": "hydra/omegaconf", "yaml": "hydra/omegaconf",
          "gymnasium": "gymnasium", "ale_py": "gymnasium", "rlexp": "rlexp", "hydra_plugins": "rlexp"}
totals, packages, traces, iterations, marks = {}, {}, {}, [], {}
stack = []  # [label, start, time of nested frames]


def push(label):
    frame = [label, time.time(), 0.0]
    stack.append(frame)
    return frame


def pop(frame, moved=0.0):
    # the frame's own time to its label (less `moved`, which the caller books itself)
    end = time.time()
    while stack and stack[-1] is not frame:  # an exception skipped inner pops: close them here
        pop(stack[-1])
    stack.pop()
    duration = end - frame[1]
    own = duration - frame[2] - moved
    totals[frame[0]] = totals.get(frame[0], 0.0) + own
    if stack:
        stack[-1][2] += duration
    return own


def inside(prefix):
    return any(frame[0].startswith(prefix) for frame in stack)


def timed(label, fn):
    def wrapper(*args, **kwargs):
        if threading.get_ident() != MAIN:
            return fn(*args, **kwargs)
        frame = push(label() if callable(label) else label)
        try:
            return fn(*args, **kwargs)
        finally:
            pop(frame)
    wrapper.__wrapped__ = fn
    return wrapper


def patch(owner, name, label):
    setattr(owner, name, timed(label, getattr(owner, name)))


def evaluating(what):
    return lambda: f"final evaluation: {what}" if inside("final evaluation") else None


# ----- what to wrap, as each module finishes loading --------------------------------------------------
def patch_main(m):
    original, train = m.cli, timed("train command: other", m.MODES["train"])

    def cli():  # Hydra's command-line handling and job setup; what runs after the task is "exit"
        frame = push("Hydra: command line, job setup, checks")
        try:
            return original()
        finally:
            task_end = marks.get("task_end")
            after = 0.0
            if task_end is not None:
                after = time.time() - task_end - (frame[2] - marks["nested_at_task_end"])
            pop(frame, moved=after)
            totals["exit: end of the command (Hydra, logging)"] = after
    m.cli = cli

    def task(cfg):
        try:
            return train(cfg)
        finally:
            marks["task_end"] = time.time()
            marks["nested_at_task_end"] = next(f[2] for f in stack if f[0].startswith("Hydra: command"))
    m.MODES["train"] = task


def patch_hydra(m):
    patch(m.Hydra, "compose_config", "Hydra: config composition")


def patch_train(m):
    patch(m, "setup_tensorflow", "TensorFlow setup (devices, seed)")
    patch(m, "build_agent", "agent/model build")
    patch(m, "evaluate", "final evaluation: episodes")
    for name in ("new_run_dir", "write_run_config", "write_summary"):
        patch(m, name, "saving: run dir, config, log, summary")
    original = m.build_agent

    def build_agent(*args, **kwargs):  # time each train iteration (the first one's graph optimisation)
        agent = original(*args, **kwargs)
        iterate = agent.train_iteration

        def train_iteration():
            frame, steps = push("training proper"), agent.steps
            try:
                return iterate()
            finally:
                iterations.append((pop(frame), agent.steps - steps))
        agent.train_iteration = train_iteration
        return agent
    m.build_agent = build_agent


def patch_base(m):
    patch(m.Agent, "fit", "training proper")
    patch(m.Agent, "save", "saving: checkpoints")


def patch_envs(m):
    patch(m, "env_from_config", lambda: evaluating("env creation")() or "env creation")


def patch_tracing(m):
    original = m._create_concrete_function

    def create(function_type, type_context, func_graph, tracing_options):
        name = str(tracing_options.name)
        traces[name] = traces.get(name, 0) + 1
        frame = push(evaluating("graph tracing")() or "graph tracing (first calls)")
        try:
            return original(function_type, type_context, func_graph, tracing_options)
        finally:
            pop(frame)
    m._create_concrete_function = create


PATCHES = {
    "rlexp.main": patch_main,
    "hydra._internal.hydra": patch_hydra,
    "rlexp.commands.train": patch_train,
    "rlexp.agents.base": patch_base,
    "rlexp.agents.base.loop": lambda m: patch(m, "plot_history", "saving: history.png"),
    "rlexp.envs.make": patch_envs,
    "rlexp.runs.history": lambda m: patch(m.History, "flush", "saving: history.parquet"),
    "rlexp.runs.tracking": lambda m: [patch(m.TensorBoard, name, "saving: TensorBoard")
                                      for name in ("__init__", "scalars", "flush", "close")],
    "rlexp.runs.logs": lambda m: [patch(m, name, "saving: run dir, config, log, summary")
                                  for name in ("attach_run_log", "detach_run_log")],
    "rlexp.presets.complete": lambda m: patch(m, "check_presets", "config: checks, fallback/tuned presets"),
    "rlexp.presets.fallbacks": lambda m: patch(m, "apply_fallback", "config: checks, fallback/tuned presets"),
    "tensorflow.python.eager.polymorphic_function.tracing_compilation": patch_tracing,
}

# ----- imports ---------------------------------------------------------------------------------------
find_and_load = bootstrap._find_and_load


def timed_find_and_load(name, import_):
    if name in sys.modules or threading.get_ident() != MAIN:
        return find_and_load(name, import_)
    top = name.partition(".")[0]
    frame = push("imports: " + GROUPS.get(top, "other"))
    try:
        module = find_and_load(name, import_)
    finally:
        own = pop(frame)
        packages[top] = packages.get(top, 0.0) + own
    if name in PATCHES:
        PATCHES[name](module)
    return module


bootstrap._find_and_load = timed_find_and_load


def collecting(phase, info):
    if threading.get_ident() != MAIN:
        return
    if phase == "start":
        push("garbage collection")
    elif stack and stack[-1][0] == "garbage collection":
        pop(stack[-1])


gc.callbacks.append(collecting)


def write():  # registered first: runs after every other atexit handler
    marks["atexit_end"] = time.time()
    steady = [own / steps for own, steps in iterations[1:] if steps]
    if iterations and steady:  # the first call's cost beyond a later call's per-step cost
        extra = max(0.0, iterations[0][0] - iterations[0][1] * statistics.median(steady))
        totals["training proper"] -= extra
        totals["graph optimisation, first call (estimate)"] = extra
    with open(OUT, "w") as f:
        json.dump(dict(totals=totals, packages=packages, traces=traces, boot=BOOT, marks=marks,
                       iterations=len(iterations)), f)


import statistics  # noqa: E402 - before the timing starts, for `write`

atexit.register(write)
sys.argv = ["rlexp", *json.loads(os.environ["RLEXP_WALL_ARGS"])]
root = push("other")
try:
    runpy.run_module("rlexp", run_name="__main__")
finally:
    pop(root)
    marks["bootstrap_end"] = time.time()
"""

ROWS = ["interpreter start", "imports: tensorflow", "imports: keras", "imports: hydra/omegaconf",
        "imports: gymnasium", "imports: rlexp", "imports: other", "Hydra: config composition",
        "Hydra: command line, job setup, checks", "config: checks, fallback/tuned presets",
        "TensorFlow setup (devices, seed)", "env creation", "agent/model build", "graph tracing (first calls)",
        "graph optimisation, first call (estimate)", "training proper", "final evaluation: env creation",
        "final evaluation: graph tracing", "final evaluation: episodes", "saving: checkpoints",
        "saving: history.parquet", "saving: history.png", "saving: TensorBoard",
        "saving: run dir, config, log, summary", "train command: other", "garbage collection",
        "exit: end of the command (Hydra, logging)", "exit: atexit handlers", "exit: interpreter teardown",
        "other"]


def instrumented(args: list[str], workdir: Path) -> dict:
    """One run under the bootstrap: {row: seconds}, the wall time, import packages and trace counts."""
    out = workdir / "breakdown.json"
    env = {**os.environ, "RLEXP_WALL_BREAKDOWN": str(out), "RLEXP_WALL_ARGS": json.dumps(args)}
    start = time.time()
    proc = subprocess.run([sys.executable, "-c", CHILD], cwd=workdir, env=env, capture_output=True, text=True)
    end = time.time()
    if proc.returncode:
        raise SystemExit(f"the instrumented run failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    data = json.loads(out.read_text())
    marks = data["marks"]
    rows = dict(data["totals"])
    rows["interpreter start"] = data["boot"] - start
    rows["exit: atexit handlers"] = marks["atexit_end"] - marks["bootstrap_end"]
    rows["exit: interpreter teardown"] = end - marks["atexit_end"]
    wall = end - start
    unknown = set(rows) - set(ROWS)
    if unknown:
        raise SystemExit(f"rows without a place in the table: {sorted(unknown)}")
    rows["other"] = rows.get("other", 0.0) + wall - sum(rows.values())
    return dict(rows=rows, wall=wall, packages=data["packages"], traces=data["traces"])


def plain(args: list[str], workdir: Path) -> float:
    """Wall seconds of the command without the bootstrap."""
    start = time.time()
    proc = subprocess.run([sys.executable, "-m", "rlexp", *args], cwd=workdir, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"the run failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return time.time() - start


def table(runs: list[dict], plain_walls: list[float], args: list[str]) -> str:
    med = statistics.median
    walls = [run["wall"] for run in runs]
    lines = ["| phase | median s | share | runs |", "|---|---:|---:|---|"]
    for row in ROWS:
        values = [run["rows"].get(row, 0.0) for run in runs]
        lines.append(f"| {row} | {med(values):.3f} | {med(values) / med(walls):.1%} | "
                     f"{', '.join(f'{v:.3f}' for v in values)} |")
    sums = [sum(run["rows"].values()) for run in runs]
    lines.append(f"| **sum of the rows** | {med(sums):.3f} | | {', '.join(f'{s:.3f}' for s in sums)} |")
    lines.append(f"| **wall, instrumented** | {med(walls):.3f} | 100% | {', '.join(f'{w:.3f}' for w in walls)} |")
    if plain_walls:
        lines.append(f"| wall, plain `python -m rlexp` | {med(plain_walls):.3f} | | "
                     f"{', '.join(f'{w:.3f}' for w in plain_walls)} |")
    packages: dict[str, list[float]] = {}
    for run in runs:
        for name, seconds in run["packages"].items():
            packages.setdefault(name, []).append(seconds)
    top = sorted(((med(v + [0.0] * (len(runs) - len(v))), k) for k, v in packages.items()), reverse=True)[:12]
    traces = ", ".join(f"{name} x{count}" for name, count in sorted(runs[-1]["traces"].items()))
    return (f"`python -m rlexp {' '.join(args)}`: seconds of the whole process, medians of {len(runs)} "
            "instrumented runs (each row's own time: nested imports, phases, traces and garbage collections are "
            "in their own rows).\n\n" + "\n".join(lines)
            + "\n\nImport time by top-level package (module bodies, without nested imports), largest: "
            + ", ".join(f"{name} {seconds:.3f}" for seconds, name in top)
            + f".\n\nFunctions traced (last run): {traces}.\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--no-plain", action="store_true", help="skip the uninstrumented runs")
    parser.add_argument("--no-write", action="store_true", help="print the table only")
    parser.add_argument("overrides", nargs="*", help="extra overrides for the command")
    opts = parser.parse_args()
    args = CASE + opts.overrides
    runs, plain_walls = [], []
    workdir = Path(tempfile.mkdtemp(prefix="rlexp_wall_"))
    try:
        for rep in range(opts.reps):
            runs.append(instrumented(args + [f"run_dir={workdir}/instrumented{rep}"], workdir))
            if not opts.no_plain:
                plain_walls.append(plain(args + [f"run_dir={workdir}/plain{rep}"], workdir))
            print(f"rep {rep + 1}/{opts.reps}: instrumented {runs[-1]['wall']:.2f} s"
                  + (f", plain {plain_walls[-1]:.2f} s" if plain_walls else ""), file=sys.stderr)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    body = table(runs, plain_walls, args)
    print(body)
    if not opts.no_write:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from current import write_table

        print(write_table("wall_breakdown", "Whole-process wall time, by phase", body))


if __name__ == "__main__":
    main()
