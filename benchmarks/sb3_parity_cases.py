"""Peer side of benchmarks/parity.py: sb3-contrib's TRPO and RecurrentPPO with RL Zoo's values, and SB3 models built
from RL Zoo's rows (benchmarks/sb3_zoo_row.py), scored as rlexp
scores its runs: 20 episodes of the deterministic policy with the final weights, on a fresh env whose observation
normalisation uses the training statistics, frozen (rewards unnormalised: the env's own returns).

Usage (in a virtualenv with stable-baselines3, sb3-contrib and gymnasium[mujoco]):
    python sb3_parity_cases.py CASE SEED [STEPS] [--checkpoint-dir DIR]
-> one JSON line {case, seed, seconds, steps, steps_per_s, eval_mean, eval_std, evals}
With --checkpoint-dir a run saves its model, normalisation statistics, replay buffer (off-policy) and progress there
after a rollout every CHECKPOINT_STEPS env steps, and a run started again with the same directory continues from the
newest save (its envs start new episodes there; the seconds add up over the pieces).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import torch.nn as nn
from sb3_contrib import TRPO
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.vec_env import VecEnv, VecNormalize

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sb3_extra_cases  # noqa: E402  (the recurrent cases)

EVAL_EPISODES = 20
CHECKPOINT_STEPS = 50_000
EVAL_SEED_OFFSET = 10_000  # eval envs are seeded apart from the training envs, as rlexp's are
# SB3's MlpPolicy defaults for TRPO, spelled out: separate 64-64 tanh towers, orthogonal init, log std 0
TRPO_POLICY = dict(net_arch=dict(pi=[64, 64], vf=[64, 64]), activation_fn=nn.Tanh, ortho_init=True, log_std_init=0.0)
# RL Zoo's trpo.yml MuJoCo rows (&mujoco-defaults = &pybullet-defaults): normalize, n_envs 2, the values below
TRPO_MUJOCO = dict(n_steps=1024, batch_size=128, gamma=0.99, gae_lambda=0.95, sub_sampling_factor=1, cg_max_steps=25,
                   cg_damping=0.1, n_critic_updates=20, learning_rate=1e-3)
TRPO_CASES = {  # name: (env id, default steps, TRPO kwargs besides SB3's defaults)
    "trpo-hopper": ("Hopper-v5", 1_000_000, TRPO_MUJOCO),
    "trpo-halfcheetah": ("HalfCheetah-v5", 1_000_000, TRPO_MUJOCO | dict(target_kl=0.04)),
    # RL Zoo's LunarLanderContinuous-v3 row: normalize, n_envs 2, n_steps 1024, 20 critic updates
    "trpo-lunarlander-continuous": ("LunarLanderContinuous-v3", 200_000, dict(n_steps=1024, n_critic_updates=20)),
}
RECURRENT_CASES = ("ppo-lstm-cartpole-novel", "ppo-lstm-pendulum-novel")
# RL Zoo's rows as RL Zoo builds them (sb3_zoo_row.py, from rlexp's shipped copy of its files): name: (file, row, env)
ZOO_CASES = {"dqn-mountaincar-zoo": ("dqn", "MountainCar-v0", "MountainCar-v0"),
             "dqn-cartpole-zoo": ("dqn", "CartPole-v1", "CartPole-v1"),
             "dqn-acrobot-zoo": ("dqn", "Acrobot-v1", "Acrobot-v1"),
             "ppo-hopper-zoo": ("ppo", "Hopper-v4", "Hopper-v5"),
             "ppo-halfcheetah-zoo": ("ppo", "HalfCheetah-v4", "HalfCheetah-v5"),
             "ppo-ant-zoo": ("ppo", "Ant-v4", "Ant-v5"),
             "trpo-mountaincar-zoo": ("trpo", "MountainCar-v0", "MountainCar-v0"),
             "trpo-swimmer-zoo": ("trpo", "Swimmer-v4", "Swimmer-v5"),
             "td3-lunarlander-continuous-zoo": ("td3", "LunarLanderContinuous-v3", "LunarLanderContinuous-v3"),
             "qrdqn-cartpole-zoo": ("qrdqn", "CartPole-v1", "CartPole-v1"),
             "qrdqn-acrobot-zoo": ("qrdqn", "Acrobot-v1", "Acrobot-v1"),
             "qrdqn-lunarlander-zoo": ("qrdqn", "LunarLander-v3", "LunarLander-v3"),
             "tqc-pendulum-zoo": ("tqc", "Pendulum-v1", "Pendulum-v1"),
             "crossq-pendulum-zoo": ("crossq", "Pendulum-v1", "Pendulum-v1"),
             "tqc-fetchreach-zoo": ("tqc", "FetchReach-v1", "FetchReach-v4"),
             "ars-cartpole-zoo": ("ars", "CartPole-v1", "CartPole-v1"),
             "ars-pendulum-zoo": ("ars", "Pendulum-v1", "Pendulum-v1"),
             # the DDPG fallback's values: RL Zoo's DDPG MuJoCo defaults row, on another MuJoCo env
             "ddpg-invertedpendulum-fallback": ("ddpg", "HalfCheetah-v4", "InvertedPendulum-v5")}


def zoo_case(name: str, seed: int, steps: int | None) -> tuple[BaseAlgorithm, int]:
    import yaml

    import sb3_zoo_row

    algo, key, env_id = ZOO_CASES[name]
    path = Path(__file__).resolve().parents[1] / "src/rlexp/presets/zoo/hyperparams" / f"{algo}.yml"
    row = yaml.safe_load(path.read_text())[key]
    model, _ = sb3_zoo_row.build(algo, {**row, "seed": seed}, env_id)
    return model, steps or int(float(row["n_timesteps"]))


def trpo_case(name: str, seed: int, steps: int | None) -> tuple[TRPO, int]:
    env_id, default_steps, kwargs = TRPO_CASES[name]
    gamma = kwargs.get("gamma", 0.99)  # RL Zoo hands the agent's gamma to VecNormalize
    env = VecNormalize(make_vec_env(env_id, n_envs=2, seed=seed), norm_obs=True, norm_reward=True, gamma=gamma)
    model = TRPO("MlpPolicy", env, policy_kwargs=TRPO_POLICY, seed=seed, verbose=0, device="cpu", **kwargs)
    return model, steps or default_steps


def eval_env(model: BaseAlgorithm, seed: int) -> VecEnv:
    """One fresh env like the training ones, observations normalised with the training statistics, frozen."""
    train_env = model.get_env()
    wrapper = sb3_extra_cases.MaskVelocity if train_env.env_is_wrapped(sb3_extra_cases.MaskVelocity)[0] else None
    env = make_vec_env(train_env.get_attr("spec")[0].id, n_envs=1, seed=seed + EVAL_SEED_OFFSET, wrapper_class=wrapper)
    if isinstance(train_env, VecNormalize):
        env = VecNormalize(env, training=False, norm_obs=train_env.norm_obs, norm_reward=False)
        env.obs_rms = train_env.obs_rms.copy()
    return env


class Checkpoints(BaseCallback):
    """After a rollout, every CHECKPOINT_STEPS env steps: the model, VecNormalize's statistics and an off-policy
    model's replay buffer in a folder of their own (save-<steps>), then progress.json naming it and the seconds
    trained so far, replaced in one rename: a kill at any point leaves the previous save whole."""

    def __init__(self, directory: Path, seconds_before: float) -> None:
        super().__init__()
        self.directory, self.seconds_before = directory, seconds_before
        self.started = time.perf_counter()
        self.next_save = 0

    def _on_training_start(self) -> None:
        self.next_save = self.num_timesteps + CHECKPOINT_STEPS

    def _on_step(self) -> bool:
        return True

    def _on_rollout_end(self) -> None:
        if self.num_timesteps < self.next_save:
            return
        self.next_save = self.num_timesteps + CHECKPOINT_STEPS
        save = self.directory / f"save-{self.num_timesteps}"
        shutil.rmtree(save, ignore_errors=True)
        save.mkdir(parents=True)
        self.model.save(save / "model.zip")
        env = self.model.get_env()
        if isinstance(env, VecNormalize):
            env.save(str(save / "vecnormalize.pkl"))
        if isinstance(self.model, OffPolicyAlgorithm):
            self.model.save_replay_buffer(save / "buffer.pkl")
        seconds = self.seconds_before + time.perf_counter() - self.started
        progress = dict(steps=int(self.num_timesteps), seconds=seconds, save=save.name)
        (self.directory / "progress.tmp.json").write_text(json.dumps(progress))
        os.replace(self.directory / "progress.tmp.json", self.directory / "progress.json")
        for old in self.directory.glob("save-*"):  # the saves before this one
            if old != save:
                shutil.rmtree(old, ignore_errors=True)


def resume(model: BaseAlgorithm, directory: Path) -> tuple[BaseAlgorithm, float]:
    """The model continued from `directory`'s newest save (with its env's statistics and replay buffer), and its
    seconds so far."""
    progress = json.loads((directory / "progress.json").read_text())
    save = directory / progress["save"] if "save" in progress else directory  # (saves before save-<steps> folders)
    env = model.get_env()
    if isinstance(env, VecNormalize):
        env = VecNormalize.load(str(save / "vecnormalize.pkl"), env.venv)
    loaded = type(model).load(save / "model.zip", env=env, device="cpu")  # its num_timesteps from the zip
    if isinstance(loaded, OffPolicyAlgorithm):
        loaded.load_replay_buffer(save / "buffer.pkl")
    return loaded, progress["seconds"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("case", choices=[*TRPO_CASES, *RECURRENT_CASES, *ZOO_CASES])
    parser.add_argument("seed", type=int)
    parser.add_argument("steps", type=int, nargs="?")
    parser.add_argument("--checkpoint-dir", type=Path)
    opts = parser.parse_args()
    name, seed = opts.case, opts.seed
    if name in TRPO_CASES:
        model, steps = trpo_case(name, seed, opts.steps)
    elif name in ZOO_CASES:
        model, steps = zoo_case(name, seed, opts.steps)
    else:
        model, steps, _ = sb3_extra_cases.case(name, seed, opts.steps)
    seconds_before, callback = 0.0, None
    if opts.checkpoint_dir:
        if (opts.checkpoint_dir / "progress.json").exists():
            model, seconds_before = resume(model, opts.checkpoint_dir)
        callback = Checkpoints(opts.checkpoint_dir, seconds_before)
    start = time.perf_counter()
    if model.num_timesteps < steps:
        model.learn(steps - model.num_timesteps, callback=callback, reset_num_timesteps=model.num_timesteps == 0)
    seconds = seconds_before + time.perf_counter() - start
    returns, _ = evaluate_policy(model, eval_env(model, seed), n_eval_episodes=EVAL_EPISODES, deterministic=True,
                                 return_episode_rewards=True)
    print(json.dumps(dict(case=name, seed=seed, seconds=round(seconds, 2), steps=int(model.num_timesteps),
                          steps_per_s=round(model.num_timesteps / seconds, 1), eval_mean=float(np.mean(returns)),
                          eval_std=float(np.std(returns)), evals=[float(r) for r in returns],
                          resumed=seconds_before > 0)))


if __name__ == "__main__":
    main()
