"""Env copies before they are made: their estimated memory against what the machine has available, the
process limit for worker processes, and a warning where there are far more copies than CPUs."""
from __future__ import annotations

import logging
import os
import resource

from rlexp.checks.memory import Need, check_fits, human
from rlexp.envs.spaces import is_atari
from rlexp.errors import UserError

log = logging.getLogger("rlexp")

# What one env copy holds at least (measured with gymnasium 1.x: classic control ~4 KiB, an ALE game with
# Atari preprocessing ~1.5 MiB); a worker process of env.vectorization=async adds its own pages (~4 MiB).
ENV_COPY_BYTES = 4 << 10
ATARI_COPY_BYTES = 3 << 19
WORKER_BYTES = 4 << 20
COPIES_PER_CPU = 64  # in-process env copies per CPU beyond which a run is warned
WORKERS_PER_CPU = 4  # worker processes per CPU beyond which a run is warned


def env_copy_bytes(env_id: str, vectorization: str) -> int:
    """The estimated memory of one env of `env_id` under `vectorization` (batched envs: none to speak of)."""
    if vectorization in ("vector", "graph"):
        return 0
    copy = ATARI_COPY_BYTES if is_atari(env_id) else ENV_COPY_BYTES
    return copy + (WORKER_BYTES if vectorization == "async" else 0)


def cpu_count() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def check_env_copies(env_id: str, n_envs: int, vectorization: str) -> None:
    """Before `n_envs` envs are made: refused where they can't fit in memory or (worker processes) exceed the
    process limit; a warning with the figures where there are far more copies than CPUs."""
    per_copy = env_copy_bytes(env_id, vectorization)
    check_fits([Need("env copies", n_envs * per_copy, f"{n_envs:,} x {human(per_copy)}", f"env.n_envs={n_envs}",
                     "env.n_envs")])
    cpus = cpu_count()
    if vectorization == "async":
        limit = resource.getrlimit(resource.RLIMIT_NPROC)[0]
        if limit != resource.RLIM_INFINITY and n_envs >= limit:
            raise UserError(f"env.n_envs={n_envs}: env.vectorization=async starts a process per env, beyond this "
                            f"user's process limit ({limit:,}, ulimit -u); lower env.n_envs or use "
                            "env.vectorization=sync")
        if n_envs > WORKERS_PER_CPU * cpus:
            log.warning(f"warning: env.n_envs={n_envs:,} worker processes (env.vectorization=async) take turns on "
                        f"{cpus} CPUs; fewer envs, or env.vectorization=sync for cheap envs, train faster")
    elif per_copy and n_envs > COPIES_PER_CPU * cpus:
        log.warning(f"warning: env.n_envs={n_envs:,} env copies for {cpus} CPUs ({n_envs // cpus:,} a CPU) are made "
                    "and stepped one after another in this process, so every step waits for all of them; a few "
                    "envs per CPU train faster")
