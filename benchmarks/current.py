"""Current result tables: each benchmark writes its table to benchmarks/results/<name>.md, replacing the old one
(git keeps the history), with the date, the command, the code's commit and the machine."""
from __future__ import annotations

import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def bfloat16_support() -> str:
    """The CPU's bfloat16 matmul support from its flags: AMX tiles, AVX-512 BF16 instructions, or none (bfloat16
    then runs emulated, without a gain over float32)."""
    try:
        flags = set(next(line for line in open("/proc/cpuinfo") if line.startswith("flags")).split(":", 1)[1].split())
    except (OSError, StopIteration):
        return "bfloat16 support unknown"
    if "amx_bf16" in flags:
        return "bfloat16: AMX"
    if "avx512_bf16" in flags:
        return "bfloat16: avx512_bf16"
    return "no bfloat16 instructions (emulated)"


def machine() -> str:
    """CPU model and its bfloat16 support, cores, memory, Python and TensorFlow versions."""
    from importlib.metadata import version

    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
        memory = next(int(line.split()[1]) for line in open("/proc/meminfo") if line.startswith("MemTotal"))
        cpu += f" ({bfloat16_support()}), {memory / 2**20:.0f} GiB"
    except (OSError, StopIteration):
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{cpu}, {cores} cores; Python {platform.python_version()}, TensorFlow {version('tensorflow')}"


def commit() -> str:
    """The checked-out commit, with '+changes' when the work tree differs from it."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=RESULTS.parent, capture_output=True, text=True).stdout.strip()

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    return head + ("+changes" if git("status", "--porcelain", "--untracked-files=no", "--", ":/src", ":/conf") else "")


def same_code(recorded: str, unused: tuple[str, ...] = (), neutral: tuple[str, ...] = ()) -> bool:
    """Whether a row recorded at commit `recorded` ran the code checked out now: no change to src/ or conf/ between
    them but to the `unused` files (paths from the top, which the row's command never reads; commits of results,
    docs or benchmark scripts in between don't count) or the change of one `neutral` commit (one that changes only
    what the row's command sets itself, such as a default it overrides), and neither side '+changes'."""
    if recorded.endswith("+changes") or commit().endswith("+changes"):
        return recorded == commit()
    paths = ["--", ":/src", ":/conf", *(f":(top,exclude){path}" for path in unused)]

    def diff(*commits: str) -> str:
        return subprocess.run(["git", "diff", *commits, *paths], cwd=RESULTS.parent, capture_output=True,
                              text=True, check=True).stdout

    change = diff(recorded, "HEAD")
    return not change or any(change == diff(f"{sha}^", sha) for sha in neutral)


def now() -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())


def command_line() -> str:
    """This benchmark's command as it can be typed again (arguments shell-quoted)."""
    return shlex.join(["python", os.path.relpath(sys.argv[0], RESULTS.parent.parent), *sys.argv[1:]])


def write_table(name: str, title: str, body: str, started: str | None = None) -> Path:
    """benchmarks/results/<name>.md: a heading, when/what/where, then `body` (Markdown)."""
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.md"
    text = (f"# {title}\n\nWritten {started or now()} at commit {commit()} by `{command_line()}`.\n"
            f"Machine: {machine()}.\n\n{body.rstrip()}\n")
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return path


def rlexp(cwd: Path, *args: str) -> str:
    """`python -m rlexp <args> run.progress=none` in `cwd`: its stdout; its output's tail as the exit message if it
    fails."""
    out = subprocess.run([sys.executable, "-m", "rlexp", *args, "run.progress=none"], cwd=cwd, capture_output=True,
                         text=True)
    if out.returncode:
        raise SystemExit(f"python -m rlexp {' '.join(args)} failed:\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
    return out.stdout
