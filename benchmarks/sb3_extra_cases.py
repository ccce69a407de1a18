"""Peer baseline for cases beyond ../shared/bench/sb3_cases.py, with the same output: sb3-contrib's
RecurrentPPO on CartPole and Pendulum without velocities (RL Zoo's ppo_lstm CartPoleNoVel-v1 and PendulumNoVel-v1
values; RecurrentPPO runs ~100-300 steps/s on 2 cores), and SB3's PPO on Pendulum (conf/tuned/ppo_pendulum.yaml).

Usage (in a virtualenv with stable-baselines3 and sb3-contrib): python sb3_extra_cases.py CASE [SEED [STEPS]]
-> one JSON line {case, seconds, steps, steps_per_s, eval_mean, eval_std}
"""
import json
import sys
import time

import gymnasium as gym
import numpy as np
import torch.nn as nn
from sb3_contrib import RecurrentPPO
from stable_baselines3 import PPO
from stable_baselines3.common.evaluation import evaluate_policy  # handles recurrent states
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.utils import LinearSchedule
from stable_baselines3.common.vec_env import VecEnv, VecNormalize

MASKED = {"CartPole-v1": [1, 3], "Pendulum-v1": [2]}  # velocity entries, as RL Zoo's MaskVelocityWrapper
LSTM_POLICY = dict(ortho_init=False, activation_fn=nn.ReLU, lstm_hidden_size=64, enable_critic_lstm=True,
                   net_arch=dict(pi=[64], vf=[64]))  # RL Zoo's ppo_lstm policy_kwargs for both rows


class MaskVelocity(gym.ObservationWrapper):
    """The env's velocity entries (MASKED) set to 0, as RL Zoo's MaskVelocityWrapper."""

    def observation(self, obs):
        obs = np.array(obs, copy=True)
        obs[MASKED[self.spec.id]] = 0.0
        return obs


def novel_env(env_id: str, n_envs: int, seed: int) -> VecEnv:
    """`n_envs` copies of `env_id` with its velocities masked (Monitor inside: returns stay the env's own)."""
    return make_vec_env(env_id, n_envs=n_envs, seed=seed, wrapper_class=MaskVelocity)


def case(name: str, seed: int = 0, steps: int | None = None) -> tuple[RecurrentPPO | PPO, int, str]:
    """(model, env steps, env id) of a case."""
    if name == "ppo-lstm-cartpole-novel":
        env = VecNormalize(novel_env("CartPole-v1", 8, seed), norm_obs=True, norm_reward=False, gamma=0.98)
        model = RecurrentPPO("MlpLstmPolicy", env, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20,
                             ent_coef=0.0, learning_rate=LinearSchedule(1e-3, 0.0, 1.0),
                             clip_range=LinearSchedule(0.2, 0.0, 1.0), vf_coef=0.5, max_grad_norm=0.5,
                             policy_kwargs=LSTM_POLICY, seed=seed, verbose=0, device="cpu")
        return model, steps or 20_000, "CartPole-v1"
    if name == "ppo-lstm-pendulum-novel":  # batch_size, vf_coef, max_grad_norm: RecurrentPPO's defaults
        env = VecNormalize(novel_env("Pendulum-v1", 4, seed), norm_obs=True, norm_reward=True, gamma=0.9)
        model = RecurrentPPO("MlpLstmPolicy", env, n_steps=1024, batch_size=128, gae_lambda=0.95, gamma=0.9,
                             n_epochs=10, ent_coef=0.0, learning_rate=1e-3, clip_range=0.2, vf_coef=0.5,
                             max_grad_norm=0.5, use_sde=True, sde_sample_freq=4, policy_kwargs=LSTM_POLICY,
                             seed=seed, verbose=0, device="cpu")
        return model, steps or 100_000, "Pendulum-v1"
    if name == "ppo-pendulum":  # RL Zoo's ppo.yml Pendulum-v1 row: 4 x 1024 steps, gSDE resampled every 4, 100k
        env = make_vec_env("Pendulum-v1", n_envs=4, seed=seed)
        model = PPO("MlpPolicy", env, n_steps=1024, gae_lambda=0.95, gamma=0.9, n_epochs=10, ent_coef=0.0,
                    learning_rate=1e-3, clip_range=0.2, use_sde=True, sde_sample_freq=4, seed=seed, verbose=0,
                    device="cpu")
        return model, steps or 100_000, "Pendulum-v1"
    if name == "qrdqn-cartpole":  # RL Zoo's qrdqn.yml CartPole-v1 row: 50k steps, 128 updates every 256
        from sb3_contrib import QRDQN

        env = make_vec_env("CartPole-v1", n_envs=1, seed=seed)
        model = QRDQN("MlpPolicy", env, learning_rate=2.3e-3, batch_size=64, buffer_size=100_000, learning_starts=1000,
                      gamma=0.99, target_update_interval=10, train_freq=256, gradient_steps=128,
                      exploration_fraction=0.16, exploration_final_eps=0.04,
                      policy_kwargs=dict(net_arch=[256, 256], n_quantiles=10), seed=seed, verbose=0, device="cpu")
        return model, steps or 50_000, "CartPole-v1"
    if name == "tqc-pendulum":  # RL Zoo's tqc.yml Pendulum-v1 row: 20k steps, lr 1e-3, sb3-contrib's defaults
        from sb3_contrib import TQC

        env = make_vec_env("Pendulum-v1", n_envs=1, seed=seed)
        model = TQC("MlpPolicy", env, learning_rate=1e-3, seed=seed, verbose=0, device="cpu")
        return model, steps or 20_000, "Pendulum-v1"
    if name == "crossq-pendulum":  # RL Zoo's crossq.yml Pendulum-v1 row: 20k steps, policy_delay 2, [256, 256]
        from sb3_contrib import CrossQ

        env = make_vec_env("Pendulum-v1", n_envs=1, seed=seed)
        model = CrossQ("MlpPolicy", env, policy_delay=2, policy_kwargs=dict(net_arch=[256, 256]), seed=seed,
                       verbose=0, device="cpu")
        return model, steps or 20_000, "Pendulum-v1"
    if name == "tqc-her-fetchreach":  # RL Zoo's tqc.yml FetchReach-v1 row on FetchReach-v4: HER, 20k steps
        from pathlib import Path

        from sb3_contrib import TQC
        from stable_baselines3.her import HerReplayBuffer

        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
        import rlexp.envs.robotics  # noqa: F401  (registers the Fetch ids, as rlexp does)

        env = VecNormalize(make_vec_env("FetchReach-v4", n_envs=1, seed=seed), gamma=0.95)
        model = TQC("MultiInputPolicy", env, buffer_size=1_000_000, ent_coef="auto", batch_size=256, gamma=0.95,
                    learning_rate=1e-3, learning_starts=1000, replay_buffer_class=HerReplayBuffer,
                    replay_buffer_kwargs=dict(goal_selection_strategy="future", n_sampled_goal=4),
                    policy_kwargs=dict(net_arch=[64, 64], n_critics=1), seed=seed, verbose=0, device="cpu")
        return model, steps or 20_000, "FetchReach-v4"
    raise SystemExit(f"unknown case {name}")


if __name__ == "__main__":
    name, seed = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 0
    model, steps, _ = case(name, seed, int(sys.argv[3]) if len(sys.argv) > 3 else None)
    start = time.perf_counter()
    model.learn(steps)
    seconds = time.perf_counter() - start
    env = model.get_env()
    env.training = False
    mean, std = evaluate_policy(model, env, n_eval_episodes=20, deterministic=True)
    print(json.dumps(dict(case=name, seconds=seconds, steps=steps, steps_per_s=steps / seconds,
                          eval_mean=float(mean), eval_std=float(std))))
