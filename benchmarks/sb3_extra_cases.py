"""Peer baseline for cases beyond ../shared/bench/sb3_cases.py, with the same output: sb3-contrib's
RecurrentPPO on CartPole without velocities (RL Zoo's ppo_lstm CartPoleNoVel-v1 values, 20k steps:
RecurrentPPO runs ~100-300 steps/s on 2 cores).

Usage (in a virtualenv with stable-baselines3 and sb3-contrib): python sb3_extra_cases.py CASE [SEED]
-> one JSON line {case, seconds, steps, steps_per_s, eval_mean, eval_std}
"""
import json
import sys
import time

import gymnasium as gym
import numpy as np
import torch.nn as nn
from sb3_contrib import RecurrentPPO
from stable_baselines3.common.evaluation import evaluate_policy  # handles recurrent states
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.utils import LinearSchedule
from stable_baselines3.common.vec_env import VecNormalize


class MaskVelocity(gym.ObservationWrapper):
    """CartPole's cart and pole velocities (entries 1 and 3) set to 0, as RL Zoo's MaskVelocityWrapper."""

    def observation(self, obs):
        obs = np.array(obs, copy=True)
        obs[[1, 3]] = 0.0
        return obs


def case(name, seed=0):
    if name == "ppo-lstm-cartpole-novel":
        env = VecNormalize(make_vec_env("CartPole-v1", n_envs=8, seed=seed, wrapper_class=MaskVelocity),
                           norm_obs=True, norm_reward=False, gamma=0.98)
        kwargs = dict(ortho_init=False, activation_fn=nn.ReLU, lstm_hidden_size=64, enable_critic_lstm=True,
                      net_arch=dict(pi=[64], vf=[64]))
        model = RecurrentPPO("MlpLstmPolicy", env, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20,
                             ent_coef=0.0, learning_rate=LinearSchedule(1e-3, 0.0, 1.0),
                             clip_range=LinearSchedule(0.2, 0.0, 1.0), vf_coef=0.5, max_grad_norm=0.5,
                             policy_kwargs=kwargs, seed=seed, verbose=0, device="cpu")
        return model, int(sys.argv[3]) if len(sys.argv) > 3 else 20_000
    raise SystemExit(f"unknown case {name}")


if __name__ == "__main__":
    name, seed = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 0
    model, steps = case(name, seed)
    start = time.perf_counter()
    model.learn(steps)
    seconds = time.perf_counter() - start
    env = model.get_env()
    env.training = False
    mean, std = evaluate_policy(model, env, n_eval_episodes=20, deterministic=True)
    print(json.dumps(dict(case=name, seconds=seconds, steps=steps, steps_per_s=steps / seconds,
                          eval_mean=float(mean), eval_std=float(std))))
