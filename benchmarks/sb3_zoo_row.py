"""SB3 side of benchmarks/zoo_rows.py: the model RL Zoo builds from one row of its hyperparameter file, built with
Stable-Baselines3 / sb3-contrib as RL Zoo's ExperimentManager does (n_envs, normalize with the row's gamma,
env_wrapper, frame_stack, `lin_` schedules, policy_kwargs, action noise), and its resolved hyperparameters as one
JSON line (optimizer, schedules, network, init, normalisation, every algorithm attribute the comparison reads).

Usage (in a virtualenv with stable-baselines3, sb3-contrib, gymnasium[mujoco], ale-py, PyYAML):
    python sb3_zoo_row.py FILE.yml ROW ENV_ID
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import ale_py
import gymnasium as gym
import numpy as np
import torch as th
import torch.nn as nn
import yaml
from sb3_contrib import ARS, QRDQN, TQC, TRPO, CrossQ
from stable_baselines3 import A2C, DDPG, DQN, PPO, SAC, TD3
from stable_baselines3.common.atari_wrappers import AtariWrapper
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.noise import NormalActionNoise, OrnsteinUhlenbeckActionNoise
from stable_baselines3.common.sb2_compat.rmsprop_tf_like import RMSpropTFLike
from stable_baselines3.common.vec_env import VecFrameStack, VecNormalize
from stable_baselines3.her import HerReplayBuffer

ALGOS = {"a2c": A2C, "ars": ARS, "crossq": CrossQ, "ddpg": DDPG, "dqn": DQN, "ppo": PPO, "qrdqn": QRDQN, "sac": SAC, "td3": TD3, "tqc": TQC,
         "trpo": TRPO}
NAMES = {"nn": nn, "th": th, "RMSpropTFLike": RMSpropTFLike, "dict": dict}  # what RL Zoo's files name


def linear(initial: float):
    return lambda progress_remaining: progress_remaining * initial


def build(algo: str, row: dict, env_id: str, max_episode_steps: int | None = None):
    """The model as RL Zoo's ExperimentManager makes it (its hyperparameter preprocessing, reimplemented)."""
    params = dict(row)
    n_envs = int(params.pop("n_envs", 1))
    params.pop("n_timesteps", None)
    normalize = params.pop("normalize", False)
    wrapper = params.pop("env_wrapper", None)
    frame_stack = params.pop("frame_stack", None)
    for key in ("learning_rate", "clip_range", "clip_range_vf"):
        if isinstance(params.get(key), str) and params[key].startswith("lin_"):
            params[key] = linear(float(params[key][4:]))
    if params.get("replay_buffer_class") == "HerReplayBuffer":
        params["replay_buffer_class"] = HerReplayBuffer
    if isinstance(params.get("replay_buffer_kwargs"), str):
        params["replay_buffer_kwargs"] = eval(params["replay_buffer_kwargs"], {"__builtins__": {}}, NAMES)
    if env_id.startswith("Fetch"):  # gymnasium-robotics' ids, registered as rlexp registers them (same env)
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
        import rlexp.envs.robotics  # noqa: F401
    if isinstance(params.get("policy_kwargs"), str):
        params["policy_kwargs"] = eval(params["policy_kwargs"], {"__builtins__": {}}, NAMES)  # the peer, as RL Zoo
    noise_type, noise_std = params.pop("noise_type", None), params.pop("noise_std", 0.0)
    wrapper_class = AtariWrapper if wrapper and "AtariWrapper" in str(wrapper) else None
    wrapper_kwargs = next(iter(wrapper[0].values())) if wrapper_class and isinstance(wrapper[0], dict) else None
    seed = int(params.pop("seed", 0))
    env_kwargs = {"max_episode_steps": max_episode_steps} if max_episode_steps else None
    envs = make_vec_env(env_id, n_envs=n_envs, seed=seed, wrapper_class=wrapper_class, wrapper_kwargs=wrapper_kwargs,
                        env_kwargs=env_kwargs)
    if frame_stack:
        envs = VecFrameStack(envs, n_stack=int(frame_stack))
    if normalize:
        options = eval(normalize, {"__builtins__": {}}, NAMES) if isinstance(normalize, str) else {}
        envs = VecNormalize(envs, gamma=float(params.get("gamma", 0.99)), **options)
    if noise_type is not None:
        n = envs.action_space.shape[0]
        noise_class = NormalActionNoise if noise_type == "normal" else OrnsteinUhlenbeckActionNoise
        params["action_noise"] = noise_class(mean=np.zeros(n), sigma=float(noise_std) * np.ones(n))
    return ALGOS[algo](env=envs, seed=seed, device="cpu", **params), envs


def layers(module: nn.Module) -> list[list]:
    """[units, activation] of each Linear in a Sequential, the activation that follows it (None at the end)."""
    mods = list(module.modules())
    out = []
    for i, m in enumerate(mods):
        if isinstance(m, nn.Linear):
            after = next((type(a).__name__ for a in mods[i + 1:i + 2] if not isinstance(a, nn.Linear)), None)
            out.append([m.out_features, after])
    return out


def first_steps(optimizer) -> list[float]:
    """A fresh copy of the policy's optimizer (its class and settings, lr 1) on one weight from 0 with a constant
    gradient 0.01: the weight after each of its first three steps (what the optimizer's state starts at shows)."""
    weight = th.zeros(1, dtype=th.float64, requires_grad=True)
    fresh = type(optimizer)([weight], **{**optimizer.defaults, "lr": 1.0})
    out = []
    for _ in range(3):
        weight.grad = th.full((1,), 0.01, dtype=th.float64)
        fresh.step()
        out.append(round(float(weight.detach()[0]), 9))
    return out


def noise_reset(algo: str, row: dict, env_id: str) -> bool:
    """Whether the action noise restarts when an episode ends: SB3 learns on one-step episodes past learning_starts
    and the noise's state is read (OrnsteinUhlenbeckActionNoise keeps it in noise_prev)."""
    params = {**row, "learning_starts": 2}
    model, _ = build(algo, params, env_id, max_episode_steps=1)
    model.learn(12)
    return bool(np.all(model.action_noise.noise_prev == 0))


def describe_ars(model, envs) -> dict:
    """ARS's search settings and policy (no optimizer, no discount)."""
    norm = envs if isinstance(envs, VecNormalize) else None
    policy = model.policy
    linears = [m for m in policy.action_net.modules() if isinstance(m, nn.Linear)]
    return {"lr_start": model.lr_schedule(1.0), "lr_half": model.lr_schedule(0.5), "n_delta": model.n_delta,
            "n_top": model.n_top, "delta_std": model.delta_std_schedule(1.0), "zero_policy": model.zero_policy,
            "alive_bonus_offset": float(model.alive_bonus_offset), "n_eval_episodes": model.n_eval_episodes,
            "norm_obs": bool(norm and norm.norm_obs), "norm_reward": bool(norm and norm.norm_reward),
            "with_bias": linears[0].bias is not None, "squash_output": bool(policy.squash_output),
            "n_params": model.n_params, "action_layers": layers(policy.action_net)}


def describe(algo: str, model, envs) -> dict:
    if algo == "ars":
        return describe_ars(model, envs)
    d: dict = {"n_envs": envs.num_envs, "gamma": model.gamma, "lr_start": model.lr_schedule(1.0),
               "lr_half": model.lr_schedule(0.5)}
    policy = model.policy
    optimizer = policy.optimizer if hasattr(policy, "optimizer") else policy.actor.optimizer
    group = optimizer.param_groups[0]
    d["optimizer"] = type(optimizer).__name__
    d["optimizer_eps"] = group["eps"]
    if "alpha" in group:
        d["optimizer_alpha"] = group["alpha"]
        d["optimizer_momentum"], d["optimizer_centered"] = group["momentum"], group["centered"]
    if "betas" in group:
        d["optimizer_betas"] = list(group["betas"])
    d["optimizer_first_steps"] = first_steps(optimizer)
    norm = envs if isinstance(envs, VecNormalize) else None
    d["norm_obs"] = bool(norm and norm.norm_obs)
    d["norm_reward"] = bool(norm and norm.norm_reward)
    if norm:
        d.update(norm_clip_obs=norm.clip_obs, norm_clip_reward=norm.clip_reward, norm_gamma=norm.gamma)
    if algo in ("a2c", "ppo", "trpo"):
        d["ortho_init"] = policy.ortho_init
        d["policy_layers"] = layers(policy.mlp_extractor.policy_net)
        d["value_layers"] = layers(policy.mlp_extractor.value_net)
        d["features"] = type(policy.features_extractor).__name__
        if hasattr(policy, "log_std"):
            d["log_std_init"] = float(policy.log_std.mean())
        if model.use_sde:
            d["use_expln"] = policy.dist_kwargs["use_expln"]
        for key in ("n_steps", "gae_lambda", "ent_coef", "vf_coef", "max_grad_norm", "normalize_advantage",
                    "use_sde", "sde_sample_freq", "batch_size", "n_epochs", "target_kl", "cg_max_steps",
                    "cg_damping", "line_search_shrinking_factor", "line_search_max_iter", "n_critic_updates",
                    "sub_sampling_factor"):
            if hasattr(model, key):
                d[key] = getattr(model, key)
        if hasattr(model, "clip_range"):
            d["clip_start"], d["clip_half"] = model.clip_range(1.0), model.clip_range(0.5)
    else:
        for key in ("buffer_size", "learning_starts", "batch_size", "tau", "gradient_steps", "target_update_interval",
                    "exploration_initial_eps", "exploration_final_eps", "exploration_fraction", "max_grad_norm",
                    "policy_delay", "target_policy_noise", "target_noise_clip", "use_sde", "sde_sample_freq",
                    "target_entropy", "n_quantiles", "top_quantiles_to_drop_per_net"):
            if hasattr(model, key):
                value = getattr(model, key)
                d[key] = float(value) if isinstance(value, (np.floating, float)) else value
        d["train_freq"] = model.train_freq.frequency
        noise = model.action_noise
        d["noise"] = None if noise is None else [type(noise).__name__, float(np.mean(noise._sigma))]
        if algo == "dqn":
            d["q_layers"] = layers(policy.q_net.q_net)
        elif algo == "qrdqn":  # its last layer: n_quantiles x actions outputs
            d["q_layers"] = layers(policy.quantile_net.quantile_net)
            d["n_quantiles"] = policy.quantile_net.n_quantiles
        else:
            if algo in ("sac", "tqc", "crossq"):  # its hidden layers (the mean and log-std heads come after)
                d["actor_latent_layers"] = layers(policy.actor.latent_pi)
            else:
                d["actor_layers"] = layers(policy.actor.mu)
            d["critic_layers"] = layers(policy.critic.qf0)
            d["n_critics"] = policy.critic.n_critics
            if algo == "tqc":
                d["n_quantiles"] = policy.critic.n_quantiles
        if algo == "crossq":  # its batch renormalisation, and the entropy coefficient's own optimizer
            from sb3_contrib.common.torch_layers import BatchRenorm

            norms = [m for net in (policy.actor, policy.critic.qf0) for m in net.modules() if isinstance(m, BatchRenorm)]
            d["batch_norm"] = [norms[0].momentum, norms[0].eps, norms[0].warmup_steps] if norms else None
            d["batch_renorm_count"] = len(norms)
            if model.ent_coef_optimizer is not None:
                d["ent_coef_optimizer_betas"] = list(model.ent_coef_optimizer.param_groups[0]["betas"])
        if getattr(model, "replay_buffer", None) is not None and type(model.replay_buffer).__name__ == "HerReplayBuffer":
            her = model.replay_buffer
            d["her"] = [her.n_sampled_goal, her.goal_selection_strategy.name.lower()]
        if algo in ("sac", "tqc", "crossq"):
            d["ent_coef_start"] = float(th.exp(model.log_ent_coef).item()) if model.log_ent_coef is not None else \
                float(model.ent_coef_tensor.item())
            d["learn_ent_coef"] = model.log_ent_coef is not None
            if model.use_sde:
                d["log_std_init"] = float(policy.actor.log_std.mean())
                d["use_expln"], d["clip_mean"] = policy.actor.use_expln, policy.actor.clip_mean
    return d


def main() -> None:
    path, row_name, env_id = sys.argv[1:4]
    rows = yaml.safe_load(open(path))
    algo = path.rsplit("/", 1)[-1].split(".")[0]
    model, envs = build(algo, dict(rows[row_name]), env_id)
    d = describe(algo, model, envs)
    if isinstance(getattr(model, "action_noise", None), OrnsteinUhlenbeckActionNoise):
        d["noise_reset_at_episode_end"] = noise_reset(algo, dict(rows[row_name]), env_id)
    print(json.dumps(d))


if __name__ == "__main__":
    gym.register_envs(ale_py)
    main()
