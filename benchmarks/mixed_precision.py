"""Mixed precision vs float32: training throughput of PPO on a vector, a recurrent and an image case, and of
the off-policy agents with their tuned presets' networks and batches (TD3, SAC, DQN).

Usage: python benchmarks/mixed_precision.py [--repeats 3] [--precisions float32 bfloat16]
Each measurement builds the agent, trains a warm-up (graph tracing), then times `steps` more env steps, each in a fresh process;
precisions alternate within each repeat, and the table gives the median steps/s and the ratio to float32.
Writes benchmarks/results/mixed_precision.md. On a CPU, True means bfloat16; on a GPU float16 (add it).
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from current import now, write_table  # noqa: E402

ZOO_OFF_POLICY = {"max_size": 200_000, "initial_size": 10_000, "batch_size": 256}
CASES = {  # name: (agent, env id, make_envs options, agent options, replay buffer options, warm-up steps, timed steps)
    "ppo-cartpole-mlp": ("PPO", "CartPole-v1", {"n_envs": 8}, {"n_steps": 32, "mini_batches": 1, "ppo_epochs": 20},
                         None, 2048, 40960),
    "ppo-cartpole-lstm": ("PPO", "CartPole-v1", {"n_envs": 8, "wrappers": [{"_target_": "rlexp.envs.wrappers.MaskVelocity"}]},
                          {"model": "lstm", "n_steps": 32, "mini_batches": 1, "ppo_epochs": 20}, None, 512, 8192),
    "ppo-pong-cnn": ("PPO", "PongNoFrameskip-v4", {"n_envs": 8, "preprocess": True},
                     {"n_steps": 128, "mini_batches": 4, "ppo_epochs": 4}, None, 1024, 4096),
    # RL Zoo's td3/sac Pendulum-v1 and dqn CartPole-v1 rows (400-300, 256-256 and 256-256 MLPs)
    "td3-pendulum": ("TD3", "Pendulum-v1", {"n_envs": 1}, {"gamma": 0.98, "lr": 1e-3}, ZOO_OFF_POLICY, 12_000, 4_000),
    "sac-pendulum": ("SAC", "Pendulum-v1", {"n_envs": 1}, {"lr": 1e-3}, ZOO_OFF_POLICY | {"initial_size": 100},
                     2_000, 3_000),
    "dqn-cartpole": ("DQN", "CartPole-v1", {"n_envs": 1},
                     {"lr": 2.3e-3, "gamma": 0.99, "target_sync_steps": 10, "train_freq": 256,
                      "gradient_steps": 128, "epsilon_decay_steps": 8_000, "epsilon_end": 0.04},
                     {"max_size": 100_000, "initial_size": 1_000, "batch_size": 64}, 3_000, 20_000),
}


def measure(case: str, precision: str) -> float:
    import rlexp.agents
    from rlexp import buffers
    from rlexp.build import configure_threads
    from rlexp.envs.make import make_envs

    agent_name, env_id, env_kwargs, agent_kwargs, buffer_kwargs, warm, steps = CASES[case]
    envs = make_envs(env_id, seed=0, **env_kwargs)
    configure_threads({}, image_obs=bool(env_kwargs.get("preprocess")))
    extra = {"buffer": buffers.ReplayBuffer(**buffer_kwargs)} if buffer_kwargs else {}
    agent = getattr(rlexp.agents, agent_name)(envs, seed=0, quiet=True, **extra, **agent_kwargs,
                                              mixed_precision=False if precision == "float32" else precision)
    agent.fit(warm)
    start = time.perf_counter()
    agent.fit(warm + steps)
    seconds = time.perf_counter() - start
    envs.close()
    return (agent.steps - warm) / seconds


def measure_in_new_process(case: str, precision: str) -> float:
    """`measure` in a fresh process: TensorFlow's thread pools take each case's settings (they are fixed
    once TensorFlow runs in a process)."""
    code = f"import mixed_precision as m; print(m.measure({case!r}, {precision!r}))"
    out = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parent, check=True,
                         capture_output=True, text=True).stdout
    return float(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("cases", nargs="*", default=list(CASES))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--precisions", nargs="+", default=["float32", "bfloat16"])
    args = parser.parse_args()
    started = now()
    rows = ["| case | " + " | ".join(f"{p} steps/s" for p in args.precisions) + " | " +
            " | ".join(f"{p} / float32" for p in args.precisions[1:]) + " |",
            "|---|" + "---|" * (2 * len(args.precisions) - 1)]
    for case in args.cases:
        rates = {p: [] for p in args.precisions}
        for _ in range(args.repeats):
            for precision in args.precisions:
                rates[precision].append(measure_in_new_process(case, precision))
                print(case, precision, f"{rates[precision][-1]:,.0f} steps/s", flush=True)
        medians = {p: statistics.median(r) for p, r in rates.items()}
        rows.append(f"| {case} | " + " | ".join(f"{medians[p]:,.0f}" for p in args.precisions) + " | " +
                    " | ".join(f"{medians[p] / medians['float32']:.2f}x" for p in args.precisions[1:]) + " |")
        print(rows[-1], flush=True)
    body = ("Training throughput (env steps/s, after a warm-up that traces the graphs), median of "
            f"{args.repeats} alternating repeats. `run.mixed_precision=true` means bfloat16 on a CPU, float16 on a "
            "GPU.\n\n" + "\n".join(rows))
    print(write_table("mixed_precision", "Mixed precision vs float32", body, started))


if __name__ == "__main__":
    main()
