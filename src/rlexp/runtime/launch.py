"""Trials in their own processes without paying Python's and TensorFlow's start-up each time.

A multiprocessing forkserver imports TensorFlow, Keras, Hydra and rlexp once (`rlexp.runtime.preload`); every trial
is then a fresh process forked from it, so its memory and TensorFlow's global state end with it, and its
result comes back through a pipe the moment it finishes. `start_method=spawn` starts a new interpreter per
trial instead (for envs that can't be forked)."""
from __future__ import annotations

import multiprocessing
import os
import threading
import time
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any, Callable, Sequence

import cloudpickle

PRELOAD = ["rlexp.runtime.preload"]
_CONTEXTS: dict[str, Any] = {}


def context(start_method: str):
    if start_method not in ("forkserver", "spawn"):
        raise ValueError(f"hydra.launcher.start_method={start_method}: use forkserver or spawn")
    if start_method not in _CONTEXTS:
        ctx = multiprocessing.get_context(start_method)
        if start_method == "forkserver":
            ctx.set_forkserver_preload(PRELOAD)
        _CONTEXTS[start_method] = ctx
    return _CONTEXTS[start_method]


def _watch_owner(alive) -> None:
    """In the trial's process: end it once the sweep that started it is gone. The sweep holds the only other end
    of `alive` and never writes to it, so the read returns only when that end closes: at the sweep's exit, or
    when it is killed (SIGTERM or SIGKILL, where no `finally` runs), so that no orphaned trial trains on."""
    try:
        alive.recv_bytes()
    except (EOFError, OSError):
        pass
    os._exit(1)


def _job(setup: Callable[[], None] | None, payload: bytes, log_stem: str, conn, alive=None) -> None:
    """In the trial's process: output to <log_stem>.out/.err, run the call, send back its pickled result."""
    if alive is not None:
        threading.Thread(target=_watch_owner, args=(alive,), daemon=True).start()
    for fd, suffix in ((1, ".out"), (2, ".err")):
        target = os.open(log_stem + suffix, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(target, fd)
        os.close(target)
    if setup is not None:  # what the payload needs importable before it is unpickled
        setup()
    call, args = cloudpickle.loads(payload)
    try:
        result = call(*args)
    except BaseException as e:  # noqa: BLE001 - the caller wraps its own errors; this is the last resort
        result = e
    try:
        conn.send_bytes(cloudpickle.dumps(result))
    except Exception as e:  # noqa: BLE001 - an unpicklable result
        conn.send_bytes(cloudpickle.dumps(RuntimeError(f"the trial's result could not be sent back: {e}")))
    conn.close()


def run_jobs(call: Callable[..., Any], jobs: Sequence[tuple], log_dir: Path, start_method: str = "forkserver",
             timeout_s: float | None = None, names: Sequence[str] | None = None,
             setup: Callable[[], None] | None = None) -> list[Any]:
    """call(*job) for every job at once, each in its own process; the results in order. A process that dies
    or runs past `timeout_s` gives a RuntimeError in its place."""
    ctx = context(start_method)
    log_dir.mkdir(parents=True, exist_ok=True)
    running = []
    stems = [str(log_dir / (names[i] if names else f"job_{i}")) for i in range(len(jobs))]
    for job, stem in zip(jobs, stems):
        receiver, sender = ctx.Pipe(duplex=False)
        alive_r, alive_w = ctx.Pipe(duplex=False)  # the trial ends when alive_w closes (this process gone)
        process = ctx.Process(target=_job, args=(setup, cloudpickle.dumps((call, job)), stem, sender, alive_r),
                              daemon=False)
        process.start()
        sender.close()
        alive_r.close()
        running.append((process, receiver, alive_w))
    results: list[Any] = [None] * len(jobs)
    pending = {receiver: i for i, (_, receiver, _) in enumerate(running)}
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    try:
        while pending:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready = wait(list(pending), timeout=left)
            if not ready:
                for receiver, i in pending.items():
                    results[i] = RuntimeError(f"the trial ran past hydra.launcher.timeout_min ({timeout_s / 60:g} min)")
                break
            for receiver in ready:
                i = pending.pop(receiver)
                try:
                    results[i] = cloudpickle.loads(receiver.recv_bytes())
                except EOFError:
                    process = running[i][0]
                    process.join(5)
                    results[i] = RuntimeError(f"the trial's process ended without a result (exit code "
                                              f"{process.exitcode}); its output: {stems[i]}.err")
    finally:
        for process, receiver, alive_w in running:
            if process.is_alive():
                process.join(0.5 if not pending else 0)
            if process.is_alive():
                process.terminate()
                process.join(5)
            receiver.close()
            alive_w.close()
    return results

