"""Peer baseline: rejax (a JAX-compiled training loop, environment included) on rlexp's speed cases.

Usage: <rejax-venv>/bin/python rejax_cases.py CASE [SEED] [--vmap N]   (--vmap: N keys in one `jax.vmap` call,
benchmarks/population.py; the virtualenv: `pip install rejax==0.1.3 "gymnax<1"
jax`; rejax 0.1.3 needs gymnax below 1.0). Prints one JSON line {case, seed, seconds, first_call_seconds, steps,
eval_mean, eval_std, import_seconds}: `first_call_seconds` is the jitted training's first call (compilation and
training), `seconds` a second call of the compiled function with the same seed (training only), and
`import_seconds` the process's imports and setup before the first call. A process that trains once takes about
import_seconds + first_call_seconds (`speed.py` reports that as rejax's whole-process wall).

Each case runs the hyperparameters, network and env steps of rlexp's case in `speed.py` (RL Zoo's tuned values):
gymnax's CartPole-v1 and Pendulum-v1 stand for gymnasium's; the final evaluation is rejax's own (128 episodes of
the final policy, its mean and standard deviation).
"""
from __future__ import annotations

import json
import sys
import time

START = time.perf_counter()

import jax  # noqa: E402
import numpy as np  # noqa: E402
from rejax import PPO, TD3  # noqa: E402
from rejax.networks import DeterministicPolicy, QNetwork  # noqa: E402


def ppo(env: str, steps: int, **values) -> PPO:
    """rejax's PPO with one evaluation, after training; 64-64 tanh networks."""
    return PPO.create(env=env, total_timesteps=steps, eval_freq=steps, skip_initial_evaluation=True,
                      agent_kwargs={"activation": "tanh", "hidden_layer_sizes": (64, 64)}, **values)


def case(name: str) -> tuple[object, int]:
    """(algorithm, env steps) of a case."""
    if name == "ppo-cartpole":  # conf/tuned/ppo_cartpole.yaml, constant rates (rejax has no schedule argument)
        return ppo("CartPole-v1", 100_000, num_envs=8, num_steps=32, num_epochs=20, num_minibatches=1,
                   learning_rate=1e-3, gamma=0.98, gae_lambda=0.8, clip_eps=0.2, ent_coef=0.0, vf_coef=0.5,
                   max_grad_norm=0.5), 100_000
    if name == "td3-pendulum":  # RL Zoo's td3.yml Pendulum-v1 row: [400, 300] ReLU, 10k random steps, batch 256
        algo = TD3.create(env="Pendulum-v1", total_timesteps=20_000, eval_freq=20_000, skip_initial_evaluation=True,
                          num_envs=1, learning_rate=1e-3, gamma=0.98, buffer_size=200_000, fill_buffer=10_000,
                          batch_size=256, exploration_noise=0.1, polyak=0.995, policy_delay=2)
        space = algo.env.action_space(algo.env_params)
        actor = DeterministicPolicy(int(np.prod(space.shape)), (space.low, space.high), (400, 300), jax.nn.relu)
        return algo.replace(actor=actor, critic=QNetwork((400, 300), jax.nn.relu)), 20_000
    raise SystemExit(f"unknown case {name}; choose from ppo-cartpole, td3-pendulum")


def main() -> None:
    name = sys.argv[1]
    seed = int(sys.argv[2]) if len(sys.argv) > 2 and not sys.argv[2].startswith("--") else 0
    members = int(sys.argv[sys.argv.index("--vmap") + 1]) if "--vmap" in sys.argv else None
    algo, steps = case(name)
    train = jax.jit(algo.train)
    key = jax.random.PRNGKey(seed)
    if members is not None:  # N seeds in one compiled call (rejax's own way of training many)
        train, key = jax.jit(jax.vmap(algo.train)), jax.random.split(key, members)
    imports = time.perf_counter() - START
    times = []
    for _ in range(2):
        start = time.perf_counter()
        _, evaluation = jax.block_until_ready(train(key))
        times.append(time.perf_counter() - start)
    lengths, returns = evaluation
    returns = np.asarray(returns)[..., -1, :]  # the last evaluation (of each key, with --vmap)
    print(json.dumps(dict(case=name, seed=seed, seconds=round(times[1], 3), first_call_seconds=round(times[0], 3),
                          steps=steps, eval_mean=round(float(returns.mean()), 2),
                          eval_std=round(float(returns.std()), 2), import_seconds=round(imports, 3))))


if __name__ == "__main__":
    main()
