"""Atari throughput: PPO and DQN on PongNoFrameskip-v4, 8 envs, frames/s over 100k frames, beside SB3.

Usage: python benchmarks/atari.py [ppo] [dqn] --sb3-python /path/to/sb3-venv/bin/python [--reps 3]
rlexp runs through the CLI with env.vectorization=sync (env copies in-process), =async (one worker process
per env) and =envpool (EnvPool's C++ emulation and preprocessing on its threads; what `auto` picks where
EnvPool is installed), PPO also with run.mixed_precision=true (bfloat16 on a CPU); SB3 runs the same work
with DummyVecEnv (in-process) and SubprocVecEnv. 100k frames are 25k agent steps (frame skip 4). Both use
RL Zoo's Atari hyperparameters; DQN starts learning after 5k transitions (the Zoo's 100k would be no
learning at all in 100k frames) and keeps 25k of them. Runs alternate between the tools within each
repeat; the table (medians) goes to benchmarks/results/atari.md.
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import sys

from current import now, write_table
from speed import ROOT, timed

AGENT_STEPS = 25_000  # x4 frames
RLEXP = {
    "ppo": ["agent=ppo", "env=pong"],
    # the network and Adam epsilon the table was measured with (tuned/dqn_pong.yaml's then: the Nature CNN's
    # orthogonal init, Keras' epsilon); neither changes a step's cost; `agent=dqn env=pong` alone takes the row's
    "dqn": ["agent=dqn", "env=pong", "env.n_envs=8", "agent.train_freq=4", "agent.gradient_steps=1",
            "buffer.max_size=25000", "buffer.initial_size=5000", "model=nature_cnn", "agent.opt_epsilon=1e-7"],
}
SB3 = """
import json, sys, time
import ale_py, gymnasium as gym
from stable_baselines3 import DQN, PPO
from stable_baselines3.common.env_util import make_atari_env
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecFrameStack
gym.register_envs(ale_py)
algo, vec, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
subproc = dict(vec_env_cls=SubprocVecEnv, vec_env_kwargs=dict(start_method="fork"))  # workers inherit ale_py's ids
env = VecFrameStack(make_atari_env("PongNoFrameskip-v4", n_envs=8, seed=0,
                                   **(subproc if vec == "async" else dict(vec_env_cls=DummyVecEnv))), n_stack=4)
if algo == "ppo":
    model = PPO("CnnPolicy", env, n_steps=128, n_epochs=4, batch_size=256, learning_rate=2.5e-4, clip_range=0.1,
                vf_coef=0.5, ent_coef=0.01, seed=0, verbose=0)
else:
    model = DQN("CnnPolicy", env, learning_rate=1e-4, buffer_size=25_000, learning_starts=5_000, batch_size=32,
                train_freq=4, gradient_steps=1, target_update_interval=1000, exploration_fraction=0.1,
                exploration_final_eps=0.01, optimize_memory_usage=False, seed=0, verbose=0)
start = time.perf_counter()
model.learn(total_timesteps=steps)
print(json.dumps(dict(seconds=time.perf_counter() - start, steps=steps)))
"""


RLEXP_VARIANTS = {"ppo": [("sync", False), ("async", False), ("envpool", False), ("envpool", True)],
                  "dqn": [("sync", False), ("async", False), ("envpool", False)]}  # (vectorization, bfloat16)
VECTORISATION = {"sync": "in-process", "async": "worker processes", "envpool": "EnvPool threads"}


def run_rlexp(algo: str, vec: str, bf16: bool = False) -> dict:
    cwd = ROOT / "benchmarks" / "runs"
    cwd.mkdir(exist_ok=True)
    stdout, stderr, wall, rss = timed([sys.executable, "-m", "rlexp", *RLEXP[algo], f"env.vectorization={vec}",
                                       f"run.max_steps={AGENT_STEPS}", "run.target_reward=null", "run.eval_episodes=0",
                                       "run.progress=none", f"run.mixed_precision={str(bf16).lower()}"], cwd)
    m = re.search(r"done \(\w+\): ([\d,]+) steps in ([\d.]+) s", stdout)  # no eval: run.eval_episodes=0
    if not m:
        raise SystemExit(stdout[-2000:] + stderr[-2000:])
    steps, seconds = int(m.group(1).replace(",", "")), float(m.group(2))
    return dict(tool="rlexp", algo=algo, vec=vec, bf16=bf16, seconds=seconds, frames_per_s=round(4 * steps / seconds),
                wall_s=round(wall, 1), peak_rss_mb=round(rss))


def run_sb3(python: str, algo: str, vec: str) -> dict:
    stdout, _, wall, rss = timed([python, "-c", SB3, algo, vec, str(AGENT_STEPS)])
    row = json.loads(stdout.strip().splitlines()[-1])
    return dict(tool="sb3", algo=algo, vec=vec, seconds=round(row["seconds"], 1),
                frames_per_s=round(4 * row["steps"] / row["seconds"]), wall_s=round(wall, 1), peak_rss_mb=round(rss))


def table(rows: list[dict], algos: list[str]) -> str:
    lines = ["| algo | tool | vectorisation | precision | frames/s (median) | train s | peak RSS MB | vs SB3's faster |",
             "|---|---|---|---|---|---|---|---|"]
    for algo in algos:
        groups: dict[tuple, list[dict]] = {}
        for r in rows:
            if r["algo"] == algo:
                groups.setdefault((r["tool"], r["vec"], r.get("bf16", False)), []).append(r)
        fps = {key: statistics.median(r["frames_per_s"] for r in rs) for key, rs in groups.items()}
        sb3_best = max((v for (tool, *_), v in fps.items() if tool == "sb3"), default=None)
        for (tool, vec, bf16), rs in groups.items():
            ratio = f"{fps[tool, vec, bf16] / sb3_best:.2f}x" if sb3_best else ""
            lines.append(f"| {algo.upper()} | {tool} | {VECTORISATION[vec]} | {'bfloat16' if bf16 else 'float32'} | "
                         f"{fps[tool, vec, bf16]:,.0f} | {statistics.median(r['seconds'] for r in rs):.1f} | "
                         f"{statistics.median(r['peak_rss_mb'] for r in rs):,.0f} | {ratio} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("algos", nargs="*", default=["ppo", "dqn"])
    parser.add_argument("--sb3-python", required=True)
    parser.add_argument("--reps", type=int, default=3)
    opts = parser.parse_args()
    started, rows = now(), []
    for _ in range(opts.reps):
        for algo in opts.algos:
            runs = [lambda v=v, b=b: run_rlexp(algo, v, b) for v, b in RLEXP_VARIANTS[algo]]
            sb3 = [lambda v=v: run_sb3(opts.sb3_python, algo, v) for v in ("sync", "async")]
            for k in range(max(len(runs), len(sb3))):  # alternate the tools
                for group in (runs, sb3):
                    if k < len(group):
                        rows.append(group[k]())
                        print(json.dumps(rows[-1]), flush=True)
    body = (f"Pong (PongNoFrameskip-v4), 8 envs, 25k agent steps = 100k frames per run, RL Zoo's Atari "
            f"hyperparameters on both sides (PPO: 8 x 128 rollouts, 4 epochs of 4 minibatches; DQN: 8 envs, "
            f"train_freq 4, learning from 5k transitions, 25k buffer; SB3's DQN with optimize_memory_usage=False). "
            f"Median of {opts.reps} runs each, alternating rlexp and SB3. Train seconds exclude start-up "
            f"(rlexp's summary line; SB3's learn()). Peak RSS is the main process's. The last column divides by "
            f"the faster of SB3's two vectorisations.\n\n" + table(rows, opts.algos))
    print("\n" + body)
    write_table("atari", "Atari throughput: rlexp vs SB3", body, started)


if __name__ == "__main__":
    main()
