"""Env memory check without rlexp: a plain gymnasium vector-env loop with random actions, RSS every 20 s.

Usage: python benchmarks/box2d_leak.py [ENV_ID ...] [--seconds 140]
Shows whether an environment itself grows in memory (gymnasium's Box2D envs do, per reset: openai/gym
issues 980 and 1882), which the soak benchmark then attributes to the env workers, not to rlexp.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import gymnasium as gym
import numpy as np


def rss_mb() -> float:
    status = Path("/proc/self/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:"))) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("env_ids", nargs="*", default=["LunarLander-v3", "CartPole-v1"])
    parser.add_argument("--seconds", type=float, default=140)
    args = parser.parse_args()
    for env_id in args.env_ids:
        envs = gym.make_vec(env_id, num_envs=16, vectorization_mode="sync")
        envs.reset(seed=0)
        rng = np.random.default_rng(0)
        start, steps, first, episodes = time.time(), 0, None, 0
        while time.time() - start < args.seconds:
            for _ in range(1000):
                _, _, terminated, truncated, _ = envs.step(rng.integers(0, envs.single_action_space.n, 16))
                episodes += int(np.sum(terminated | truncated))
            steps += 16_000
            if first is None and time.time() - start > 20:  # after the warm-up
                first = (rss_mb(), steps, episodes)
        growth = rss_mb() - first[0]
        print(json.dumps({"env": env_id, "steps": steps - first[1], "episodes": episodes - first[2],
                          "rss_growth_mb": round(growth, 1),
                          "bytes_per_episode": round(growth * 2**20 / max(1, episodes - first[2]))}), flush=True)
        envs.close()


if __name__ == "__main__":
    main()
