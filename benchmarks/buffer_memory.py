"""Replay memory for Atari: process RSS of a 1M-transition buffer after 100k and 200k transitions.

Usage: python benchmarks/buffer_memory.py [frame|replay] [--n-envs 8]
Adds random 4 x 84 x 84 uint8 observations (episodes of 1,000 steps) to a buffer sized for 1M
transitions, measures the process RSS at 0, 100k and 200k stored transitions, and extrapolates to 1M
from the growth between 100k and 200k (pages are only resident once written).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from rlexp.buffers import FrameBuffer, ReplayBuffer


def rss_mb() -> float:
    status = Path("/proc/self/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:"))) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", nargs="?", default="frame", choices=["frame", "replay"])
    parser.add_argument("--n-envs", type=int, default=8)
    args = parser.parse_args()
    n = args.n_envs
    buffer = (FrameBuffer if args.kind == "frame" else ReplayBuffer)(max_size=1_000_000, batch_size=32)
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 255, (64, 84, 84), dtype=np.uint8)  # a pool of frames to cycle through
    obs = np.stack([frames[i:i + 4] for i in range(n)])
    stored, marks, t = 0, {}, 0
    base = rss_mb()
    while stored < 200_000:
        t += 1
        new = frames[(t + np.arange(n)) % 64]
        next_obs = np.concatenate([obs[:, 1:], new[:, None]], axis=1)
        dones = np.full(n, t % 1000 == 0)
        buffer.add(obs, rng.integers(0, 6, n), rng.random(n, dtype=np.float32), next_obs, dones, dones)
        obs = next_obs
        stored += n
        if stored in (100_000, 200_000) or (stored > 100_000 and 100_000 not in marks):
            marks.setdefault(100_000 if stored < 200_000 else 200_000, rss_mb())
    per = (marks[200_000] - marks[100_000]) * 2**20 / 100_000
    result = {"buffer": args.kind, "rss_mb_empty": round(base), "rss_mb_100k": round(marks[100_000]),
              "rss_mb_200k": round(marks[200_000]), "bytes_per_transition": round(per),
              "extrapolated_1m_gb": round((marks[100_000] * 2**20 + per * 900_000) / 1e9, 2)}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
