"""SB3's side of benchmarks/trpo_step.py (run in the SB3 virtualenv): sb3-contrib's TRPO update from rlexp's
weights and rollout (the .npz that trpo_step.py wrote); prints one table row tail per compared parameter.

Usage: python benchmarks/sb3_trpo_step.py <rlexp_step.npz> <env id>
"""
from __future__ import annotations

import sys

import numpy as np
import sb3_contrib.trpo.trpo as trpo_module
import torch as th
from sb3_contrib import TRPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.logger import configure


def cg_from_zeros(matrix_vector, b, max_iter=10, residual_tol=1e-10):
    """sb3-contrib's conjugate gradient started from zeros (its own starts from 1e-4 Gaussian noise), as rlexp's."""
    x, residual = th.zeros_like(b), b.clone()
    direction, squared = residual.clone(), residual @ residual
    for _ in range(max_iter):
        if squared < residual_tol:
            break
        product = matrix_vector(direction)
        alpha = squared / (direction @ product)
        x += alpha * direction
        residual -= alpha * product
        new_squared = residual @ residual
        direction = residual + new_squared / squared * direction
        squared = new_squared
    return x


def main() -> None:
    data, env_id = np.load(sys.argv[1]), sys.argv[2]
    trpo_module.conjugate_gradient_solver = cg_from_zeros
    steps, n_envs = data["batch_rewards"].shape
    model = TRPO("MlpPolicy", make_vec_env(env_id, n_envs=n_envs, seed=0), n_steps=steps, batch_size=steps * n_envs,
                 n_critic_updates=1, cg_max_steps=15, cg_damping=0.1, target_kl=0.01, gae_lambda=0.95, gamma=0.99,
                 learning_rate=1e-3, line_search_shrinking_factor=0.5, device="cpu", seed=0,
                 policy_kwargs=dict(net_arch=dict(pi=[64, 64], vf=[64, 64]), activation_fn=th.nn.Tanh,
                                    ortho_init=True, log_std_init=0.0))
    model.set_logger(configure(None, []))
    policy = model.policy
    actor = (policy.mlp_extractor.policy_net[0], policy.mlp_extractor.policy_net[2], policy.action_net)
    critic = (policy.mlp_extractor.value_net[0], policy.mlp_extractor.value_net[2], policy.value_net)
    with th.no_grad():  # Keras kernels are (in, out), torch weights (out, in)
        for layers, name in ((actor, "actor"), (critic, "critic")):
            for i, layer in enumerate(layers):
                layer.weight.copy_(th.tensor(data[f"before_{name}{2 * i}"].T))
                layer.bias.copy_(th.tensor(data[f"before_{name}{2 * i + 1}"]))
        policy.log_std.copy_(th.tensor(data["before_log_std"]))
    buffer, dones = model.rollout_buffer, data["batch_dones"]
    buffer.reset()
    for t in range(steps):  # an episode starts where the previous step ended one
        buffer.add(data["batch_obs"][t], data["batch_actions"][t], data["batch_rewards"][t],
                   np.zeros(n_envs, np.float32) if t == 0 else dones[t - 1], th.tensor(data["batch_values"][t]),
                   th.tensor(data["batch_log_probs"][t]))
    buffer.compute_returns_and_advantage(th.tensor(data["batch_last_values"]), dones[-1])
    gae = float(np.abs(buffer.advantages - data["advantages"]).max())
    model.train()
    with th.no_grad():
        after = {"actor0": actor[0].weight.numpy().T, "actor2": actor[1].weight.numpy().T,
                 "actor4": actor[2].weight.numpy().T, "log_std": policy.log_std.numpy(),
                 "critic0": critic[0].weight.numpy().T, "critic4": critic[2].weight.numpy().T}
    names = {"actor0": "actor layer 1", "actor2": "actor layer 2", "actor4": "actor output", "log_std": "log std",
             "critic0": "critic layer 1 (critic Adam fresh)", "critic4": "critic output (critic Adam fresh)"}
    for key, value in after.items():
        if key.startswith("critic") and not data["critic_fresh"]:
            continue
        theirs, ours = value - data[f"before_{key}"], data[f"after_{key}"] - data[f"before_{key}"]
        relative = np.abs(ours - theirs).max() / np.abs(theirs).max()
        print(f"{gae:.1e} | {names[key]} | {np.abs(ours).max():.3g} | {np.abs(theirs).max():.3g} | {relative:.1e} |")


if __name__ == "__main__":
    main()
