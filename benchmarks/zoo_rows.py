"""RL Zoo's rows in rlexp: every row of the shipped hyperparameter files (src/rlexp/presets/zoo/hyperparams),
mapped or refused with the reason; and for one row per algorithm, the hyperparameters of the agent rlexp builds from the row
against those of the model Stable-Baselines3 builds from it (benchmarks/sb3_zoo_row.py, in SB3's virtualenv), in
SB3's conventions: zero differences, or each explained.

Usage: python benchmarks/zoo_rows.py [--sb3-python PATH]   (default: $SB3_PYTHON, else sb3venv/bin/python beside
the checkout; that virtualenv: stable-baselines3, sb3-contrib, gymnasium[mujoco], ale-py, PyYAML)
Writes benchmarks/results/zoo_rows.md.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym

sys.path.insert(0, str(Path(__file__).resolve().parent))
from current import write_table  # noqa: E402

from rlexp.presets.zoo import ZOO_FILES, ZooRow, ZooRowError, load_file, translate  # noqa: E402
from rlexp.presets.zoo.rows import id_base, shipped_dir, shipped_version  # noqa: E402

# one row per algorithm: (file, row, the gymnasium id rlexp and SB3 build it on)
COMPARED = [("a2c", "atari", "BreakoutNoFrameskip-v4"), ("ddpg", "MountainCarContinuous-v0", "MountainCarContinuous-v0"),
            ("dqn", "MountainCar-v0", "MountainCar-v0"), ("ppo", "Hopper-v4", "Hopper-v5"),
            ("sac", "MountainCarContinuous-v0", "MountainCarContinuous-v0"), ("td3", "Walker2d-v4", "Walker2d-v5"),
            ("trpo", "Hopper-v4", "Hopper-v5"), ("qrdqn", "LunarLander-v3", "LunarLander-v3"),
            ("tqc", "LunarLanderContinuous-v3", "LunarLanderContinuous-v3"), ("ars", "Pendulum-v1", "Pendulum-v1"),
            ("crossq", "BipedalWalker-v3", "BipedalWalker-v3"), ("sac", "FetchReach-v1", "FetchReach-v4")]
# why a value may differ, by attribute (shown where rlexp's value, in SB3's convention, is not SB3's)
EXPLAINED = {
    ("ddpg", "target_policy_noise"): "SB3's DDPG is TD3 with target noise clipped to 0 (no smoothing): rlexp's "
                                     "DDPG has none",
    ("ddpg", "target_noise_clip"): "as above",
    ("trpo", "vf_coef"): "unused by SB3's TRPO (its critic has its own loss); rlexp's TRPO has none",
    ("trpo", "max_grad_norm"): "unused by SB3's TRPO; rlexp's TRPO clips no gradient",
    ("trpo", "ent_coef"): "unused by SB3's TRPO; rlexp's entropy_coef 0",
    ("crossq", "tau"): "sb3-contrib's CrossQ hands tau=1.0 to its base class and has no target networks to update; "
                       "rlexp's CrossQ has neither",
}


# RL Zoo trains a file's `default` row (SB3's defaults) on every env without a row of its own; rlexp trains its
# fallback preset there (conf/fallbacks/) and the row only when asked, as the run's first line says
DEFAULT_ROW = "zoo.row=default (RL Zoo: every env without a row; rlexp: its fallback preset there)"


def gymnasium_provides(env_id: str) -> str | None:
    """The gymnasium id (ale-py, MuJoCo and MiniGrid registered) an RL Zoo row's env runs as, or None."""
    import ale_py

    from rlexp.presets.zoo.merge import registered

    gym.register_envs(ale_py)
    if registered(env_id):
        return env_id
    same = sorted((name for name in gym.registry if "/" not in name and id_base(name) == id_base(env_id)),
                  key=lambda name: int(name.rsplit("-v", 1)[-1]))
    return same[-1] if same else None


def every_row() -> list[dict]:
    out = []
    for algo in ZOO_FILES:
        rows, name, version = load_file(algo)
        for key, values in rows.items():
            row = ZooRow(algo, key, values, name, version)
            try:
                translate(row)
                status, why = "mapped", ""
            except ZooRowError as error:
                status, why = "refused", str(error).split(": ", 1)[1]
            runs_as = "any ALE game" if key == "atari" else DEFAULT_ROW if key == "default" else \
                gymnasium_provides(key.replace("NoVel", ""))
            if status == "mapped" and runs_as is None:
                status, why = "refused", "the env is not in gymnasium, ale-py or MuJoCo (PyBullet, MiniGrid, ...)"
            if key.endswith(("NoVel-v0", "NoVel-v1", "NoVel-v2")) and runs_as:
                runs_as += " with rlexp.envs.wrappers.MaskVelocity"
            out.append(dict(file=name, row=key, status=status, runs_as=runs_as or "", why=why))
    return out


# ----- rlexp's side -----------------------------------------------------------------------------------------
def rlexp_agent(algo: str, key: str, env_id: str, after: dict | None = None):
    """The agent rlexp builds from the row (`after`: keys set over the row's, e.g. a shorter warm-up)."""
    from hydra import compose, initialize_config_module
    from omegaconf import OmegaConf, open_dict

    from rlexp.build import build_agent, setup_tensorflow

    rows, name, version = load_file(algo)
    sections = translate(ZooRow(algo, key, rows[key], name, version))
    with initialize_config_module(config_module="rlexp.conf", version_base="1.3"):
        cfg = compose(config_name="config", overrides=[f"agent={algo}", "env=generic", f"env.id={env_id}",
                                                       "run.mixed_precision=false"])
    model = sections.pop("model")
    if "buffer" in cfg:  # (a row's replay class brings its own options: HER's)
        OmegaConf.set_struct(cfg.buffer, False)
    cfg = OmegaConf.merge(cfg, sections)
    with open_dict(cfg):
        cfg.model = OmegaConf.create(model)
        for dotted, value in (after or {}).items():
            OmegaConf.update(cfg, dotted, value)
    setup_tensorflow(cfg)
    return build_agent(cfg), cfg


def first_steps(agent) -> list[float]:
    """A fresh copy of the agent's optimizer (lr 1) on one weight from 0 with a constant gradient 0.01: the weight
    after each of its first three steps (as benchmarks/sb3_zoo_row.py measures SB3's)."""
    import tensorflow as tf

    optimizer = agent.make_optimizer()
    weight = tf.Variable([0.0])
    optimizer.build([weight])
    optimizer.learning_rate = 1.0
    out = []
    for _ in range(3):
        optimizer.apply_gradients([(tf.constant([0.01]), weight)])
        out.append(round(float(weight.numpy()[0]), 9))
    return out


def noise_reset(algo: str, key: str, env_id: str) -> bool:
    """Whether the Ornstein-Uhlenbeck noise restarts when an episode ends: one-step episodes past a warm-up of 2."""
    import numpy as np

    agent, _ = rlexp_agent(algo, key, env_id, {"env.max_episode_steps": 1, "buffer.initial_size": 2})
    agent.fit(12, progress="none", verbose=0)
    return bool(np.all(agent.ou_noise.numpy() == 0))


def dense_layers(model) -> list[list]:
    import keras

    out = []
    for layer in model._flatten_layers(include_self=False, recursive=True):
        if isinstance(layer, keras.layers.Dense):
            activation = layer.activation.__name__
            out.append([layer.units, None if activation == "linear" else activation])
    return out


def ars_side(agent, cfg) -> dict:
    """ARS's search settings and policy in sb3-contrib's conventions."""
    a = cfg.agent
    return {"lr_start": agent.lr, "lr_half": agent.lr * (0.5 if a.lr_schedule == "linear" else 1.0),
            "n_delta": agent.n_delta, "n_top": agent.n_top, "delta_std": agent.delta_std,
            "zero_policy": agent.zero_policy, "alive_bonus_offset": agent.alive_bonus_offset, "n_eval_episodes": 1,
            "norm_obs": bool(a.normalize_obs), "norm_reward": bool(a.normalize_reward), "with_bias": agent.with_bias,
            "squash_output": agent.squash, "n_params": agent.n_params,
            "hidden": [[units, agent.activation] for units in agent.hidden], "built_hidden": len(agent.hidden),
            "heads": 1, "initializer": "torch"}


def rlexp_side(algo: str, key: str, env_id: str) -> dict:
    """The built agent's hyperparameters in SB3's conventions."""
    agent, cfg = rlexp_agent(algo, key, env_id)
    if algo == "ars":
        return ars_side(agent, cfg)
    a = cfg.agent
    optimizer = next(iter(agent.optimizers().values()))
    kind = type(optimizer).__name__.replace("Fused", "")
    eps = float(optimizer.epsilon)
    d = {"n_envs": agent.n_envs, "gamma": agent.gamma, "lr_start": agent.lr,
         "lr_half": agent.lr * (0.5 if a.lr_schedule == "linear" else 1.0), "optimizer": kind,
         "optimizer_eps": eps}  # (Keras' RMSprop adds it inside the square root: compare() converts)
    if kind.startswith("RMSprop"):
        d.update(optimizer_alpha=float(optimizer.rho), optimizer_momentum=float(optimizer.momentum),
                 optimizer_centered=bool(optimizer.centered))
    else:
        d["optimizer_betas"] = [float(optimizer.beta_1), float(optimizer.beta_2)]
    d["optimizer_first_steps"] = first_steps(agent)
    d["norm_obs"], d["norm_reward"] = bool(a.normalize_obs), bool(a.normalize_reward)
    if d["norm_obs"] or d["norm_reward"]:
        d.update(norm_clip_obs=10.0, norm_clip_reward=10.0, norm_gamma=agent.gamma)  # rlexp.envs.normalize's
    models = agent.models()
    spec = [layer for layer in cfg.model.layers if layer.get("type", "dense") == "dense" and not layer.get("output")]
    towers = [layer for layer in spec if not layer.get("common")]
    d["hidden"] = [[int(layer.units), layer.get("activation")] for layer in towers]
    d["features"] = "NatureCNN" if any(layer.get("type") == "conv" for layer in cfg.model.layers) else \
        "FlattenExtractor"
    units = {int(layer.units) for layer in towers} | set(getattr(agent, "critic_layers", None) or [])
    d["built_hidden"] = sum(1 for model in models.values() if "target" not in model.name
                            for u, _ in dense_layers(model) if u in units)
    d["heads"] = {"a2c": 2, "ppo": 2, "trpo": 2, "dqn": 1, "qrdqn": 1, "ddpg": 2, "td3": 3, "sac": 3,
                  "tqc": 1 + getattr(agent, "n_critics", 0), "crossq": 3}[algo]
    d["initializer"] = str(cfg.model.initializer)
    if algo in ("a2c", "ppo", "trpo"):
        d["ortho_init"] = cfg.model.initializer == "orthogonal"
        d["log_std_init"] = float(a.log_std_init)
        if a.use_sde:
            d["use_expln"] = agent.expln
        d.update(n_steps=agent.n_steps, gae_lambda=agent.lam, use_sde=bool(a.use_sde), sde_sample_freq=int(a.sde_sample_freq))
        if algo in ("a2c", "ppo"):
            d.update(ent_coef=agent.entropy_coef, vf_coef=agent.value_loss_coef / 2, max_grad_norm=agent.grad_norm)
        if algo == "a2c":
            d["normalize_advantage"] = agent.normalize_advantage
        if algo in ("ppo", "trpo"):
            d.update(normalize_advantage=True, batch_size=agent.n_steps * agent.n_envs // agent.mini_batches)
        if algo == "ppo":
            d.update(n_epochs=agent.ppo_epochs, target_kl=None if agent.kl_threshold is None else agent.kl_threshold / 1.5,
                     clip_start=agent.clip_norm, clip_half=agent.clip_norm * (0.5 if a.clip_schedule == "linear" else 1))
        if algo == "trpo":
            d.update(target_kl=agent.max_kl, cg_max_steps=agent.cg_iterations, cg_damping=agent.cg_damping,
                     line_search_shrinking_factor=agent.line_search_shrink, line_search_max_iter=agent.actor_iterations,
                     n_critic_updates=agent.critic_iterations, sub_sampling_factor=agent.fvp_n_steps,
                     ent_coef=agent.entropy_coef)
    else:
        b = cfg.buffer
        d.update(buffer_size=int(b.max_size), learning_starts=int(b.initial_size), batch_size=int(b.batch_size),
                 gradient_steps=agent.gradient_steps, train_freq=agent.train_freq)
        d.update(use_sde=False, sde_sample_freq=-1, noise=None)  # (SAC's, DDPG's and TD3's set below)
        if algo in ("dqn", "qrdqn"):
            d.update(tau=1.0, target_update_interval=agent.target_sync_steps,
                     exploration_initial_eps=agent.epsilon_start, exploration_final_eps=agent.epsilon_end,
                     exploration_fraction=agent.epsilon_decay_steps / int(cfg.run.max_steps),
                     max_grad_norm=agent.grad_norm)
        elif algo != "crossq":
            d["tau"] = agent.tau
        if algo in ("ddpg", "td3"):
            noise = None if agent.step_noise_coef == 0 else [
                "OrnsteinUhlenbeckActionNoise" if agent.noise_type == "ornstein_uhlenbeck" else "NormalActionNoise",
                agent.step_noise_coef]
            d.update(noise=noise, n_critics=agent.n_critics, use_sde=False, sde_sample_freq=-1)
            if agent.noise_type == "ornstein_uhlenbeck" and agent.step_noise_coef:
                d["noise_reset_at_episode_end"] = noise_reset(algo, key, env_id)
        if algo == "td3":
            d.update(policy_delay=agent.policy_delay, target_policy_noise=agent.policy_noise_coef,
                     target_noise_clip=agent.noise_clip)
        if algo == "ddpg":
            d.update(policy_delay=1)
        if algo == "qrdqn":
            d["n_quantiles"] = agent.n_quantiles
        if algo == "tqc":
            d.update(n_quantiles=agent.critic_units,
                     top_quantiles_to_drop_per_net=agent.critic_units - agent.n_target_quantiles // agent.n_critics)
        if algo == "crossq":
            from rlexp.models.batch_renorm import BatchRenorm

            norms = [layer for model in (agent.actor, agent.critics[0]) for layer in model.layers
                     if isinstance(layer, BatchRenorm)]
            d.update(policy_delay=agent.policy_delay, batch_renorm_count=len(norms),
                     batch_norm=[norms[0].momentum, norms[0].epsilon, norms[0].warmup_steps] if norms else None,
                     critic_hidden=[[int(u), d["hidden"][0][1]] for u in agent.critic_layers or []] or d["hidden"])
            if agent.learn_ent_coef:
                d["ent_coef_optimizer_betas"] = [float(agent.ent_coef_optimizer.beta_1),
                                                 float(agent.ent_coef_optimizer.beta_2)]
        if type(agent.buffer).__name__ == "HerReplayBuffer":
            d["her"] = [agent.buffer.n_sampled_goal, agent.buffer.strategy]
        if algo in ("sac", "tqc", "crossq"):
            d.update(use_sde=agent.sde, sde_sample_freq=int(a.sde_sample_freq),
                     **({} if algo == "crossq" else {"target_update_interval": 1}),
                     learn_ent_coef=agent.learn_ent_coef, n_critics=agent.n_critics, noise=None,
                     ent_coef_start=float(a.init_ent_coef if agent.learn_ent_coef else a.ent_coef),
                     target_entropy=float(agent.target_entropy))
            if agent.sde:
                d.update(log_std_init=agent.log_std_init, use_expln=agent.expln, clip_mean=agent.clip_mean)
    return d


# a difference that changes training, said as such (rlexp's agent.optimizer=adam_torch is PyTorch's Adam)
KERAS_ADAM = ("differs: Keras' Adam adds epsilon to the root of the uncorrected second moment, PyTorch's to the "
              "bias-corrected one, so rlexp's epsilon acts as PyTorch's x sqrt(1 - beta2^t): early steps are smaller "
              "where gradients are near epsilon (agent.optimizer=adam_torch steps as PyTorch's)")

SB3_LAYER_NAMES = {"ReLU": "relu", "Tanh": "tanh", "GELU": "gelu", "ELU": "elu", None: None}
WITH_OUTPUT = {"actor_layers", "critic_layers", "q_layers", "action_layers"}  # SB3 lists these with their output


def same_value(mine, theirs) -> bool:
    if isinstance(mine, list) and isinstance(theirs, list):
        return len(mine) == len(theirs) and all(same_value(m, t) for m, t in zip(mine, theirs))
    if isinstance(mine, (int, float)) and isinstance(theirs, (int, float)) and not isinstance(mine, bool):
        return math.isclose(mine, theirs, rel_tol=1e-6)
    return mine == theirs


def compare(algo: str, sb3: dict, ours: dict) -> list[tuple[str, str, str, str]]:
    """(attribute, SB3's, rlexp's, verdict) rows."""
    rows = []
    for name, theirs in sb3.items():
        if name.endswith("_layers"):
            continue
        mine = ours.get(name, "(none)")
        if name == "gradient_steps" and theirs == -1 and mine == sb3["train_freq"] * sb3["n_envs"]:
            rows.append((name, "-1", repr(mine), "same (-1: one update per env step collected, train_freq x n_envs)"))
            continue
        if name == "optimizer_eps" and ours.get("optimizer") == "RMSprop" and sb3["optimizer"] == "RMSprop":
            mine = math.sqrt(mine)  # PyTorch's epsilon outside the square root
        same = same_value(mine, theirs)
        note = "same" if same else EXPLAINED.get((algo, name), "DIFFERENT")
        if not same and name == "optimizer_first_steps" and ours["optimizer"] == "Adam":
            note = KERAS_ADAM
        rows.append((name, repr(theirs), repr(mine), note))
    for name, theirs in sb3.items():
        if name.endswith("_layers"):
            hidden = [[units, SB3_LAYER_NAMES.get(act, act)] for units, act in theirs]
            hidden = hidden[:-1] if name in WITH_OUTPUT else hidden
            mine = ours.get("critic_hidden", ours["hidden"]) if name == "critic_layers" else ours["hidden"]
            same = hidden == mine
            rows.append((f"{name} (hidden)", json.dumps(hidden), json.dumps(mine),
                         "same" if same else "DIFFERENT"))
    built = ours["built_hidden"] == ours["heads"] * len(ours["hidden"])
    rows.append(("hidden layers built (all heads)", "", str(ours["built_hidden"]),
                 "as the preset" if built else "DIFFERENT"))
    if "ortho_init" not in sb3:
        rows.append(("init", "PyTorch's default", ours["initializer"],
                     "same" if ours["initializer"] == "torch" else "DIFFERENT"))
    if algo in ("ddpg", "td3"):
        rows.append(("actor output", "tanh (squashed)", "tanh of the output (rlexp's unit_action)", "same"))
    return rows


def sb3_side(python: str, algo: str, key: str, env_id: str) -> dict:
    out = subprocess.run([python, str(Path(__file__).parent / "sb3_zoo_row.py"), str(shipped_dir() / f"{algo}.yml"),
                          key, env_id], capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"SB3 side failed for {algo} {key}: {out.stderr[-800:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sb3-python", default=os.environ.get("SB3_PYTHON",
                                                               str(Path(__file__).resolve().parents[2] / "sb3venv/bin/python")))
    opts = parser.parse_args()
    rows = every_row()
    mapped = sum(r["status"] == "mapped" for r in rows)
    lines = [f"Files: {shipped_version()} (src/rlexp/presets/zoo/hyperparams).\n",
             f"{mapped} of {len(rows)} rows mapped; each refused row with its reason (a key rlexp cannot honour: the "
             "words a run of that row stops with; an env gymnasium does not ship: its id is not registered).\n",
             "| file | row | status | trains as | reason |", "|---|---|---|---|---|"]
    lines += [f"| {r['file']} | {r['row']} | {r['status']} | {r['runs_as']} | {r['why']} |" for r in rows]
    lines.append("\n## rlexp's agent against SB3's model, one row per algorithm\n")
    lines.append("Each attribute in SB3's convention (rlexp's value converted: value_loss_coef / 2 = vf_coef, "
                 "n_steps x n_envs / mini_batches = batch_size, sqrt of Keras' RMSprop epsilon = PyTorch's). Two are "
                 "measured on both sides rather than read: optimizer_first_steps (a fresh copy of the optimizer, "
                 "lr 1, on one weight from 0 with a constant gradient 0.01: the weight after each of its first three "
                 "steps, which shows where its state starts) and noise_reset_at_episode_end (the Ornstein-Uhlenbeck "
                 "noise's state after one-step episodes past a warm-up of 2 steps: zero where it restarts).\n")
    for algo, key, env_id in COMPARED:
        sb3, ours = sb3_side(opts.sb3_python, algo, key, env_id), rlexp_side(algo, key, env_id)
        table = compare(algo, sb3, ours)
        different = [r for r in table if r[3] == "DIFFERENT"]
        differs = [r for r in table if r[3].startswith("differs")]
        lines.append(f"### {algo}.yml {key} on {env_id}: {len(different)} unexplained differences, {len(differs)} "
                     "explained that change training\n")
        lines += ["| attribute | SB3 | rlexp | |", "|---|---|---|---|"]
        lines += [f"| {a} | {t} | {m} | {v} |" for a, t, m, v in table]
        lines.append("")
    write_table("zoo_rows", "RL Zoo's rows in rlexp", "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
