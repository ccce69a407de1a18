"""DQfD vs DQN on CartPole: env steps to a mean return of 475, with the same network and replay settings.

Usage: python benchmarks/dqfd.py [--seeds 0 1 2] [--episodes 20]
Per seed: trains a PPO expert (the default command), records `--episodes` of its episodes with
`mode=play +demo_dir`, trains DQfD from them (prioritized replay, the default, and uniform replay) and DQN
without them (uniform and prioritized replay; all stop at a mean return of 475 or 50k steps), and reads each
run's history. Writes benchmarks/results/dqfd.md and benchmarks/plots/dqfd-vs-dqn-cartpole.png.
"""
from __future__ import annotations

import argparse
import re
import shutil
import sys
import time
from pathlib import Path

import pandas as pd

from rlexp.runs.history import read_frame

sys.path.insert(0, str(Path(__file__).resolve().parent))
from current import rlexp, write_table  # noqa: E402

HERE = Path(__file__).resolve().parent
RUN_DIR = re.compile(r"run dir: (\S+)")
RUNS = {  # label: agent and options (besides the seed and the demonstrations)
    "dqfd": ["agent=dqfd"],
    "dqfd uniform": ["agent=dqfd", "buffer=dqfd_uniform"],
    "dqn": ["agent=dqn"],
    "dqn prioritized": ["agent=dqn", "buffer=prioritized"],
}


def solved_at(history: pd.DataFrame, window: int | None = None, target: float = 475.0) -> int | None:
    """The env step at which the mean return first reached the target: rlexp's running mean (the last 100
    episodes, once there are 10), or with `window` the mean of the last `window` episodes."""
    mean = history["mean_reward"] if window is None else history["episode_reward"].rolling(window).mean()
    reached = history[(mean >= target) & (history["episode"] >= 10)]
    return int(reached["step"].iloc[0]) if len(reached) else None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--episodes", type=int, default=20)
    opts = parser.parse_args()
    work = HERE / "runs" / "dqfd"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    rows, curves, start = [], {}, time.perf_counter()
    for seed in opts.seeds:
        expert = RUN_DIR.search(rlexp(work, f"seed={seed}")).group(1)
        demos = work / f"demos_seed{seed}"
        rlexp(work, "mode=play", f"+checkpoint={expert}", f"play.episodes={opts.episodes}", f"+demo_dir={demos}")
        for agent, options in RUNS.items():
            extra = [f"agent.demos={demos}"] if agent.startswith("dqfd") else []
            stdout = rlexp(work, *options, "env=cartpole", f"seed={seed}", *extra)
            history = read_frame(Path(RUN_DIR.search(stdout).group(1)) / "history.parquet")
            curves[(agent, seed)] = history
            eval_mean = re.search(r"eval (-?[\d.]+)", stdout).group(1)
            rows.append(dict(agent=agent, seed=seed, solved_at=solved_at(history), last10_at=solved_at(history, 10),
                             steps=int(history["step"].max()), eval_mean=float(eval_mean)))
            print(rows[-1], flush=True)
    plot(curves, HERE / "plots" / "dqfd-vs-dqn-cartpole.png")
    def at(steps):
        return f"{steps:,}" if steps is not None else "not in 50k"

    lines = ["| agent | seed | env steps to a running mean of 475 (rlexp's stop rule) | env steps to a mean of 475 "
             "over the last 10 episodes | eval (20 ep, final weights) |", "|---|---|---|---|---|"]
    lines += [f"| {r['agent']} | {r['seed']} | {at(r['solved_at'])} | {at(r['last10_at'])} | {r['eval_mean']:.1f} |"
              for r in rows]
    note = (f"DQfD learns from {opts.episodes} episodes of a PPO expert (the default command, then `mode=play "
            f"play.episodes={opts.episodes} +demo_dir=...`), recorded in Minari's format; DQN and DQfD use the same "
            "network ([256, 256]) and replay settings (conf/tuned/dqn_cartpole.yaml, conf/tuned/dqfd_cartpole.yaml); "
            "DQfD's 10k pre-training steps use no env steps, and its updates start at the first env step. `dqfd`: "
            "its default prioritized replay (conf/buffer/dqfd.yaml: demonstrations and own transitions in one "
            "buffer, the paper's alpha 0.4, beta 0.6, epsilon 0.001, demonstration bonus 1.0); `dqfd uniform`: "
            "`buffer=dqfd_uniform` (20% demonstrations per batch; own transitions join once 1,000 are held); "
            "`dqn prioritized`: `buffer=prioritized` (alpha 0.6, beta 0.4). "
            f"The whole benchmark took {(time.perf_counter() - start) / 60:.0f} min. "
            "Curves: benchmarks/plots/dqfd-vs-dqn-cartpole.png.\n\n")
    print(write_table("dqfd", "DQfD vs DQN on CartPole-v1", note + "\n".join(lines)))


def plot(curves: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    colors = dict(zip(RUNS, ("tab:blue", "tab:cyan", "tab:orange", "tab:red")))
    for (agent, seed), history in curves.items():
        label = agent.replace("dqfd", "DQfD").replace("dqn", "DQN")
        ax.plot(history["step"], history["mean_reward"], color=colors[agent], alpha=0.8,
                label=label if seed == min(s for a, s in curves if a == agent) else None)
    ax.axhline(475, color="gray", linestyle=":", linewidth=1)
    ax.set_xlabel("env steps")
    ax.set_ylabel("mean return (last 100 episodes)")
    ax.set_title("CartPole-v1: DQfD (20 expert episodes) vs DQN, one line per seed")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    main()
