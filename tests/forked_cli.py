"""`python -m rlexp ...` for the tests, each run a fresh process forked from one that has imported TensorFlow,
Keras, Hydra and rlexp already (`rlexp.runtime.preload`, the sweep launcher's forkserver): a run then starts in
~1 s instead of ~7 s on 2 cores. The child is a new process with its own pid, working directory, environment,
stdin (/dev/null), stdout and stderr, and exit code; TensorFlow is imported but not started in the parent, so
each run starts and configures its own, as every sweep trial does. What only a new interpreter shows (what
Python and TensorFlow print while they load, sitecustomize, a changed import environment) runs
`python -m rlexp` itself: `needs_interpreter`. A sitecustomize.py on PYTHONPATH is run in the child, as the
interpreter runs it at start-up."""
from __future__ import annotations

import io
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Mapping, Sequence

# variables read while Python, TensorFlow or a library loads: a run that changes them needs its own interpreter
IMPORT_TIME = ("PYTHONHOME", "PYTHONSTARTUP", "PYTHONSAFEPATH", "PYTHONNOUSERSITE", "LD_PRELOAD", "LD_LIBRARY_PATH",
               "TF_CPP_MIN_LOG_LEVEL", "TF_CPP_MAX_VLOG_LEVEL", "TF_ENABLE_ONEDNN_OPTS", "CUDA_VISIBLE_DEVICES",
               "KERAS_BACKEND", "KERAS_HOME", "MUJOCO_GL", "PYOPENGL_PLATFORM", "OMP_NUM_THREADS")


def forkserver():
    """The sweep launcher's forkserver context (its preload: rlexp.runtime.preload)."""
    from rlexp.runtime.launch import context

    return context("forkserver")


def needs_interpreter(env: Mapping[str, str]) -> bool:
    """Whether a run in `env` must start a new interpreter: it changes what is read at import time."""
    return any(env.get(key) != os.environ.get(key) for key in IMPORT_TIME)


def _run(args: list[str], cwd: str, env: dict[str, str], out: str, err: str, umask: int,
         max_file_size: int | None, new_session: bool = False) -> None:
    """In the forked child: the run's process state, then `python -m rlexp`'s, and its exit as Python's."""
    if new_session:
        os.setsid()
    os.environ.clear()
    os.environ.update(env)
    os.umask(umask)
    sys.dont_write_bytecode = bool(env.get("PYTHONDONTWRITEBYTECODE"))
    if max_file_size is not None:  # a write past it fails (EFBIG), as on a full disk
        import resource

        resource.setrlimit(resource.RLIMIT_FSIZE, (max_file_size, max_file_size))
    entries = [e for e in env.get("PYTHONPATH", "").split(os.pathsep) if e]
    for entry in reversed(entries):
        sys.path.insert(0, entry)
    os.chdir(cwd)
    for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, out, os.O_WRONLY), (2, err, os.O_WRONLY)):
        target = os.open(path, flags)
        os.dup2(target, fd)
        os.close(target)
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False))
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), line_buffering=True, errors="backslashreplace")
    import runpy

    for entry in entries:  # as the interpreter's start-up imports sitecustomize
        if (Path(entry) / "sitecustomize.py").is_file():
            runpy.run_path(str(Path(entry) / "sitecustomize.py"), run_name="sitecustomize")
            break
    import rlexp

    sys.argv = [str(Path(rlexp.__file__).with_name("__main__.py")), *args]
    code = 0
    try:
        runpy.run_module("rlexp", run_name="__main__", alter_sys=True)
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            code = e.code or 0
        else:
            print(e.code, file=sys.stderr)
            code = 1
    except BaseException:  # noqa: BLE001 - as the interpreter reports an uncaught exception
        import traceback

        traceback.print_exc()
        code = 1
    try:
        import atexit

        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)


def run_cli(args: Sequence[str], cwd: str | os.PathLike, env: Mapping[str, str] | None = None,
            timeout: float | None = 300, umask: int = 0o022, max_file_size: int | None = None
            ) -> subprocess.CompletedProcess:
    """`python -m rlexp *args` in `cwd`, its output captured as text, like subprocess.run(capture_output=True);
    under `umask`, and with `max_file_size` a cap on the size of any file it writes (RLIMIT_FSIZE)."""
    command = [sys.executable, "-m", "rlexp", *map(str, args)]
    env = dict(os.environ if env is None else env)
    if needs_interpreter(env):
        def limit() -> None:
            if max_file_size is not None:
                import resource

                resource.setrlimit(resource.RLIMIT_FSIZE, (max_file_size, max_file_size))

        return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env,
                              umask=umask, preexec_fn=limit)
    with tempfile.TemporaryDirectory(prefix="rlexp-cli-") as folder:
        out, err = Path(folder) / "stdout", Path(folder) / "stderr"
        out.touch()
        err.touch()
        process = forkserver().Process(target=_run, args=(command[3:], str(cwd), env, str(out), str(err), umask,
                                                            max_file_size))
        process.start()
        process.join(timeout)
        if process.exitcode is None:
            process.kill()
            process.join()
            raise subprocess.TimeoutExpired(command, timeout, output=out.read_text(errors="replace"),
                                            stderr=err.read_text(errors="replace"))
        return subprocess.CompletedProcess(command, process.exitcode, out.read_text(errors="replace"),
                                           err.read_text(errors="replace"))


class Started:
    """`python -m rlexp *args` started in the background, as subprocess.Popen with stdout and stderr pipes
    (`pid`, `args`, `returncode`, `poll`, `communicate`); `new_session` as Popen's start_new_session."""

    def __init__(self, args: Sequence[str], cwd: str | os.PathLike, env: Mapping[str, str] | None = None,
                 new_session: bool = False) -> None:
        self.args = [sys.executable, "-m", "rlexp", *map(str, args)]
        env = dict(os.environ if env is None else env)
        self.folder = tempfile.TemporaryDirectory(prefix="rlexp-cli-")
        self.out, self.err = Path(self.folder.name) / "stdout", Path(self.folder.name) / "stderr"
        self.out.touch()
        self.err.touch()
        self.process = forkserver().Process(target=_run, args=(self.args[3:], str(cwd), env, str(self.out),
                                                                str(self.err), 0o022, None, new_session))
        self.process.start()
        self.pid = self.process.pid

    @property
    def returncode(self) -> int | None:
        return self.process.exitcode

    def poll(self) -> int | None:
        return self.process.exitcode

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        self.process.join(timeout)
        if self.process.exitcode is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        out, err = self.out.read_text(errors="replace"), self.err.read_text(errors="replace")
        self.folder.cleanup()
        return out, err

    def kill(self) -> None:
        self.process.kill()
