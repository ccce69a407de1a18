"""Prioritized against uniform replay: training speed of DQN and DQfD on CartPole with each, side by side.

Usage: python benchmarks/replay_speed.py [--repeats 3] [--steps 20000]
Prioritized replay draws each minibatch from the priorities the previous update left (Schaul et al. 2016,
Algorithm 1): a NumPy call per minibatch inside the update loop, where uniform replay draws a phase's batches at
once. Runs the tuned CartPole presets (DQN: conf/tuned/dqn_cartpole.yaml, 128 updates of 64 every 256 steps;
DQfD: conf/tuned/dqfd_cartpole.yaml, after its 10k pre-training updates) with each buffer in turn, `--repeats`
rounds, and reports each run's env steps per second of training (pre-training included) and the median ratio of
prioritized to uniform within a round. DQfD's demonstrations: 10 episodes of a 5k-step PPO policy (their
quality does not matter here). Writes benchmarks/results/replay_speed.md.
"""
from __future__ import annotations

import argparse
import re
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from current import rlexp, write_table  # noqa: E402

HERE = Path(__file__).resolve().parent
RUN_DIR = re.compile(r"run dir: (\S+)")
DONE = re.compile(r"done \([^)]*\): ([\d,]+) steps in ([\d.]+) s \(([\d,]+) steps/s\)")
CASES = {  # agent: {buffer label: options}
    "dqn": {"uniform": ["agent=dqn"], "prioritized": ["agent=dqn", "buffer=prioritized"]},
    "dqfd": {"uniform": ["agent=dqfd", "buffer=dqfd_uniform"], "prioritized": ["agent=dqfd"]},
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20_000)
    opts = parser.parse_args()
    work = HERE / "runs" / "replay_speed"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    started = time.perf_counter()
    policy = RUN_DIR.search(rlexp(work, "run.max_steps=5000", "run.target_reward=null")).group(1)
    demos = work / "demos"
    rlexp(work, "mode=play", f"+checkpoint={policy}", "play.episodes=10", f"+demo_dir={demos}")
    speeds: dict[tuple[str, str], list[float]] = {}
    for _ in range(opts.repeats):
        for agent, buffers in CASES.items():
            for label, options in buffers.items():
                extra = [f"agent.demos={demos}"] if agent == "dqfd" else []
                stdout = rlexp(work, *options, *extra, "env=cartpole", f"run.max_steps={opts.steps}",
                               "run.target_reward=null")
                steps, seconds, _ = DONE.search(stdout).groups()
                speeds.setdefault((agent, label), []).append(int(steps.replace(",", "")) / float(seconds))
                shutil.rmtree(RUN_DIR.search(stdout).group(1), ignore_errors=True)
                print(agent, label, f"{speeds[agent, label][-1]:,.0f} steps/s", flush=True)
    lines = ["| agent | replay | env steps/s (each round) | median | prioritized / uniform (median of rounds) |",
             "|---|---|---|---|---|"]
    for agent, buffers in CASES.items():
        ratios = [p / u for p, u in zip(speeds[agent, "prioritized"], speeds[agent, "uniform"])]
        for label in buffers:
            runs = speeds[agent, label]
            ratio = f"{statistics.median(ratios):.2f}" if label == "prioritized" else ""
            lines.append(f"| {agent} | {label} | {' / '.join(f'{s:,.0f}' for s in runs)} | "
                         f"{statistics.median(runs):,.0f} | {ratio} |")
    note = (f"{opts.steps:,} env steps a run, the tuned CartPole presets; the cases "
            f"alternate, {opts.repeats} rounds. The whole benchmark took "
            f"{(time.perf_counter() - started) / 60:.0f} min.\n\n")
    print(write_table("replay_speed", "Prioritized vs uniform replay: training speed", note + "\n".join(lines)))


if __name__ == "__main__":
    main()
