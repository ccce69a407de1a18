"""Replay memory for Atari: process RSS of a 1M-transition buffer after 100k and 200k transitions.

Usage: python benchmarks/buffer_memory.py [--n-envs 8]   (writes benchmarks/results/buffer_memory.md)
Each buffer kind (frame: each Atari frame stored once; replay: whole observations) is measured in its own
process: it adds random 4 x 84 x 84 uint8 observations (episodes of 1,000 steps) to a buffer sized for 1M
transitions, measures the process RSS at 0, 100k and 200k stored transitions, and extrapolates to 1M
from the growth between 100k and 200k (pages are only resident once written).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from rlexp.buffers import FrameBuffer, ReplayBuffer


def rss_mb() -> float:
    status = Path("/proc/self/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:"))) / 1024


def measure(kind: str, n: int) -> dict:
    buffer = (FrameBuffer if kind == "frame" else ReplayBuffer)(max_size=1_000_000, batch_size=32)
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
    return {"buffer": kind, "rss_mb_empty": round(base), "rss_mb_100k": round(marks[100_000]),
              "rss_mb_200k": round(marks[200_000]), "bytes_per_transition": round(per),
              "extrapolated_1m_gb": round((marks[100_000] * 2**20 + per * 900_000) / 1e9, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-envs", type=int, default=8)
    parser.add_argument("--only", choices=["frame", "replay"], help=argparse.SUPPRESS)  # one kind, in a child
    args = parser.parse_args()
    if args.only:
        try:
            print(json.dumps(measure(args.only, args.n_envs)))
        except MemoryError as e:  # the whole-observation buffer of 1M Atari transitions does not fit in RAM
            print(json.dumps({"buffer": args.only, "error": str(e).split(": ", 1)[-1]}))
        return
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from current import now, write_table

    started, rows = now(), []
    for kind in ("frame", "replay"):
        out = subprocess.run([sys.executable, __file__, "--only", kind, "--n-envs", str(args.n_envs)],
                             check=True, capture_output=True, text=True).stdout
        rows.append(json.loads(out.strip().splitlines()[-1]))
        print(json.dumps(rows[-1]), flush=True)
    body = (f"A buffer sized for 1M Atari transitions (4 x 84 x 84 uint8 observations, {args.n_envs} envs, episodes of "
            "1,000 steps), filled with random frames; process RSS at 0, 100k and 200k transitions, bytes per "
            "transition from the growth between them, and 1M extrapolated from it.\n\n"
            "| buffer | RSS empty (MB) | at 100k (MB) | at 200k (MB) | bytes per transition | 1M transitions (GB) |\n"
            "|---|---:|---:|---:|---:|---:|\n"
            + "\n".join(f"| {r['buffer']} | {r['rss_mb_empty']} | {r['rss_mb_100k']} | {r['rss_mb_200k']} | "
                        f"{r['bytes_per_transition']:,} | {r['extrapolated_1m_gb']} |" if "error" not in r else
                        f"| {r['buffer']} | does not fit: {r['error']} ||||| " for r in rows))
    print(write_table("buffer_memory", "Replay buffer memory", body, started))


if __name__ == "__main__":
    main()
