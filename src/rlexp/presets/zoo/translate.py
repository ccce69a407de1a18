"""An RL Zoo row as rlexp's config: every value the row leaves out is SB3's (or sb3-contrib's) default for that
algorithm, and each value is converted where rlexp's convention differs from SB3's:

- PPO/A2C: `value_loss_coef` multiplies half the value MSE (SB3's `vf_coef` the whole MSE): 2 x vf_coef.
- PPO/TRPO: a number of minibatches (SB3: `batch_size` transitions): n_steps x n_envs / batch_size.
- A2C: Keras' RMSprop adds epsilon inside the square root (PyTorch's outside): SB3's 1e-5 is 1e-10 here;
  `RMSpropTFLike`'s epsilon is inside already. PPO/A2C/TRPO use Adam's epsilon 1e-5 (SB3's policies), DQN,
  SAC, TD3 and DDPG PyTorch's 1e-8.
- Networks: SB3's `net_arch` per head, its activation, orthogonal init with gains sqrt(2) / 0.01 (policy) / 1
  (value) where `ortho_init` (on-policy default), PyTorch's default init elsewhere (rlexp's `torch`).
- DQN: `exploration_fraction` of `n_timesteps` is `epsilon_decay_steps`.
A key rlexp cannot honour raises `ZooRowError` naming the row and the key: nothing is dropped silently."""
from __future__ import annotations

import math
from typing import Any

from rlexp.presets.zoo.rows import ZooRow, literal_dict, schedule, wrappers

ON_POLICY = ("a2c", "ppo", "ppo_lstm", "trpo")
SQRT2 = math.sqrt(2.0)

# SB3 2.x / sb3-contrib 2.x constructor defaults (the values a row leaves out)
SB3_DEFAULTS: dict[str, dict[str, Any]] = {
    "ppo": dict(learning_rate=3e-4, n_steps=2048, batch_size=64, n_epochs=10, gamma=0.99, gae_lambda=0.95,
                clip_range=0.2, clip_range_vf=None, normalize_advantage=True, ent_coef=0.0, vf_coef=0.5,
                max_grad_norm=0.5, use_sde=False, sde_sample_freq=-1, target_kl=None),
    "ppo_lstm": dict(learning_rate=3e-4, n_steps=128, batch_size=128, n_epochs=10, gamma=0.99, gae_lambda=0.95,
                     clip_range=0.2, clip_range_vf=None, normalize_advantage=True, ent_coef=0.0, vf_coef=0.5,
                     max_grad_norm=0.5, use_sde=False, sde_sample_freq=-1, target_kl=None),
    "a2c": dict(learning_rate=7e-4, n_steps=5, gamma=0.99, gae_lambda=1.0, ent_coef=0.0, vf_coef=0.5,
                max_grad_norm=0.5, rms_prop_eps=1e-5, use_rms_prop=True, use_sde=False, sde_sample_freq=-1,
                normalize_advantage=False),
    "trpo": dict(learning_rate=1e-3, n_steps=2048, batch_size=128, gamma=0.99, cg_max_steps=15, cg_damping=0.1,
                 line_search_shrinking_factor=0.8, line_search_max_iter=10, n_critic_updates=10, gae_lambda=0.95,
                 use_sde=False, sde_sample_freq=-1, normalize_advantage=True, target_kl=0.01,
                 sub_sampling_factor=1),
    "ddpg": dict(learning_rate=1e-3, buffer_size=1_000_000, learning_starts=100, batch_size=256, tau=0.005,
                 gamma=0.99, train_freq=1, gradient_steps=1, noise_type=None, noise_std=0.1),
    "td3": dict(learning_rate=1e-3, buffer_size=1_000_000, learning_starts=100, batch_size=256, tau=0.005,
                gamma=0.99, train_freq=1, gradient_steps=1, noise_type=None, noise_std=0.1, policy_delay=2,
                target_policy_noise=0.2, target_noise_clip=0.5),
    "sac": dict(learning_rate=3e-4, buffer_size=1_000_000, learning_starts=100, batch_size=256, tau=0.005,
                gamma=0.99, train_freq=1, gradient_steps=1, ent_coef="auto", target_update_interval=1,
                target_entropy="auto", use_sde=False, sde_sample_freq=-1, use_sde_at_warmup=False),
    "dqn": dict(learning_rate=1e-4, buffer_size=1_000_000, learning_starts=100, batch_size=32, tau=1.0,
                gamma=0.99, train_freq=4, gradient_steps=1, target_update_interval=10000,
                exploration_fraction=0.1, exploration_initial_eps=1.0, exploration_final_eps=0.05,
                max_grad_norm=10.0),
}
# the rlexp agent each file trains (ppo_lstm.yml: PPO with model=lstm)
AGENT_OF = {"ppo_lstm": "ppo"}
# keys read outside the algorithm's own (the run, the env, the network)
COMMON = {"n_timesteps", "policy", "n_envs", "normalize", "policy_kwargs", "env_wrapper", "frame_stack",
          "optimize_memory_usage"}  # (the last: SB3's memory saving; rlexp's FrameBuffer stores each frame once)
ACTIVATIONS = {"nn.ReLU": "relu", "nn.Tanh": "tanh", "nn.GELU": "gelu", "nn.ELU": "elu", "nn.SiLU": "silu",
               "nn.LeakyReLU": "leaky_relu", "nn.Sigmoid": "sigmoid"}
NATURE_CNN = [{"type": "conv", "filters": 32, "kernel": 8, "stride": 4, "activation": "relu", "common": True},
              {"type": "conv", "filters": 64, "kernel": 4, "stride": 2, "activation": "relu", "common": True},
              {"type": "conv", "filters": 64, "kernel": 3, "stride": 1, "activation": "relu", "common": True},
              {"type": "flatten", "common": True},
              {"type": "dense", "units": 512, "activation": "relu", "common": True}]
ATARI_WRAPPER = {"noop_max": 30, "frame_skip": 4, "screen_size": 84, "terminal_on_life_loss": True,
                 "clip_reward": True}


def translate(row: ZooRow) -> dict[str, dict[str, Any]]:
    """{env, agent, model, buffer, run} sections of rlexp's config that train `row` as RL Zoo does."""
    algo = row.algo
    if algo not in SB3_DEFAULTS:
        raise row.refuse("(file)", f"is for {algo}, which rlexp does not train; its RL Zoo files are "
                                   f"{', '.join(sorted(SB3_DEFAULTS))}")
    values = {**SB3_DEFAULTS[algo], **row.values}
    unknown = sorted(set(row.values) - set(SB3_DEFAULTS[algo]) - COMMON - {"callback"})
    if unknown:
        raise row.refuse(unknown[0], f"is not an option of SB3's {algo.upper()} that rlexp knows; remove it")
    if "callback" in row.values:
        raise row.refuse("callback", f"= {row.values['callback']} names RL Zoo callbacks, which rlexp does "
                                     "not run; remove it (evaluation during training: run.eval_interval)")
    sections = {"env": env_section(row, values), "run": {"max_steps": int(float(values.get("n_timesteps", 1e6))),
                                                         "target_reward": None}}
    image = bool(sections["env"].get("preprocess")) or str(values.get("policy", "")).startswith("Cnn")
    sections["model"], policy_options = model_section(row, values, image)
    if algo in ON_POLICY:
        sections["agent"] = on_policy_agent(row, values, policy_options, int(sections["env"]["n_envs"]))
    elif algo == "dqn":
        sections["agent"], sections["buffer"] = dqn_agent(row, values, image, policy_options)
    else:
        sections["agent"], sections["buffer"] = actor_critic_agent(row, values, policy_options)
    return sections


# ----- env ------------------------------------------------------------------------------------------------
def env_section(row: ZooRow, values: dict[str, Any]) -> dict[str, Any]:
    env: dict[str, Any] = {"n_envs": int(values.get("n_envs", 1))}
    for name, kwargs in wrappers(values.get("env_wrapper", [])):
        short = name.rsplit(".", 1)[-1]
        if short == "AtariWrapper":
            unknown = sorted(set(kwargs) - set(ATARI_WRAPPER))
            if unknown:
                raise row.refuse("env_wrapper", f"AtariWrapper's {unknown[0]}={kwargs[unknown[0]]}: rlexp's Atari "
                                                f"preprocessing takes {', '.join(ATARI_WRAPPER)}")
            options = {**ATARI_WRAPPER, **kwargs}
            if options["frame_skip"] != 4 or options["screen_size"] != 84:
                raise row.refuse("env_wrapper", f"AtariWrapper{kwargs}: rlexp's Atari preprocessing skips 4 "
                                                "frames and resizes to 84x84 (env.screen_size)")
            env.update(preprocess=True, noop_max=int(options["noop_max"]), frame_stack=1,
                       life_loss_terminal=bool(options["terminal_on_life_loss"]),
                       clip_rewards=bool(options["clip_reward"]), max_frame=True)
        elif short == "TimeLimit" and name.startswith("gymnasium."):
            env["max_episode_steps"] = int(kwargs["max_episode_steps"])
        elif name.startswith("gymnasium.wrappers."):
            env.setdefault("wrappers", []).append({"_target_": name, **kwargs})
        else:
            raise row.refuse("env_wrapper", f"names {name}, which rlexp does not have; remove it, or give an "
                                            "installed gymnasium wrapper in env.wrappers")
    if "frame_stack" in values:
        if not env.get("preprocess"):
            raise row.refuse("frame_stack", "stacks frames of an env without Atari preprocessing, which rlexp "
                                            "stacks only with env.preprocess=true")
        env["frame_stack"] = int(values["frame_stack"])
    elif env.get("preprocess"):
        env["frame_stack"] = 1  # SB3 stacks nothing unless the row says frame_stack
    return env


def normalization(row: ZooRow, values: dict[str, Any]) -> dict[str, bool]:
    """RL Zoo's `normalize` (true, or "{'norm_obs': .., 'norm_reward': ..}") as normalize_obs/normalize_reward;
    VecNormalize's clipping at 10 and its gamma (the row's, as RL Zoo sets it) are rlexp's."""
    value = values.get("normalize", False)
    if isinstance(value, bool):
        return {"normalize_obs": value, "normalize_reward": value}
    options = {"norm_obs": True, "norm_reward": True, **literal_dict(value, "normalize", row)}
    extra = set(options) - {"norm_obs", "norm_reward", "gamma"}
    if extra:
        raise row.refuse("normalize", f"sets {sorted(extra)[0]}; rlexp's normalisation takes norm_obs and "
                                      "norm_reward (clipping at 10, as VecNormalize's default)")
    return {"normalize_obs": bool(options["norm_obs"]), "normalize_reward": bool(options["norm_reward"])}


# ----- network --------------------------------------------------------------------------------------------
def model_section(row: ZooRow, values: dict[str, Any], image: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the model preset, the policy options that are agent keys: log_std_init, optimizer)."""
    kwargs = literal_dict(values.get("policy_kwargs", "dict()"), "policy_kwargs", row)
    on_policy = row.algo in ON_POLICY
    policy = str(values.get("policy", "MlpPolicy"))
    if policy not in ("MlpPolicy", "CnnPolicy", "MultiInputPolicy", "MlpLstmPolicy", "CnnLstmPolicy"):
        raise row.refuse("policy", f"= {policy}: rlexp builds MlpPolicy, CnnPolicy, MultiInputPolicy and the "
                                   "Lstm policies of ppo_lstm.yml")
    known = {"net_arch", "activation_fn", "ortho_init", "log_std_init", "optimizer_class", "optimizer_kwargs",
             "lstm_hidden_size", "enable_critic_lstm", "shared_lstm", "n_lstm_layers", "n_critics", "full_std",
             "use_expln", "squash_output"}
    for key in kwargs:
        if key not in known:
            raise row.refuse(f"policy_kwargs.{key}", "is not an SB3 policy option rlexp builds; remove it")
    activation_name = kwargs.get("activation_fn", "nn.Tanh" if on_policy else "nn.ReLU")
    if activation_name not in ACTIVATIONS:
        raise row.refuse("policy_kwargs.activation_fn", f"= {activation_name}: rlexp's layers take "
                                                         f"{', '.join(ACTIVATIONS)}")
    activation = ACTIVATIONS[activation_name]
    for key, default in (("full_std", True), ("use_expln", False), ("squash_output", False)):
        if key in kwargs and kwargs[key] != default:
            raise row.refuse(f"policy_kwargs.{key}", f"= {kwargs[key]}: rlexp's gSDE is SB3's {key}={default}")
    if "n_critics" in kwargs and int(kwargs["n_critics"]) != {"ddpg": 1}.get(row.algo, 2):
        raise row.refuse("policy_kwargs.n_critics", f"= {kwargs['n_critics']}: rlexp's {row.algo.upper()} has "
                                                    f"{ {'ddpg': 1}.get(row.algo, 2)}")
    sizes = hidden_sizes(row, kwargs.get("net_arch"), image, on_policy)
    layers: list[dict[str, Any]] = [dict(spec) for spec in NATURE_CNN] if image else []
    if policy.endswith("LstmPolicy"):
        layers.append(lstm_layer(row, kwargs))
    layers += [{"type": "dense", "units": units, "activation": activation} for units in sizes]
    layers.append({"type": "dense", "output": True})
    ortho = on_policy and bool(kwargs.get("ortho_init", True))
    model = {"name": f"zoo_{row.algo}", "initializer": "orthogonal" if ortho else "torch",
             "gain": SQRT2 if ortho else 1.0, "layers": layers,
             "heads": {"policy": {"gain": 0.01}, "value": {"gain": 1.0}, "q": {"gain": 1.0}} if ortho else {}}
    options = {"log_std_init": float(kwargs.get("log_std_init", -3.0 if row.algo == "sac" else 0.0))}
    optimizer = kwargs.get("optimizer_class")
    if optimizer is not None:
        options["optimizer"] = optimizer, literal_dict(kwargs.get("optimizer_kwargs", "dict()"),
                                                       "policy_kwargs.optimizer_kwargs", row)
    return model, options


def hidden_sizes(row: ZooRow, net_arch: Any, image: bool, on_policy: bool) -> list[int]:
    """The hidden layers each head builds (rlexp's heads are towers of one shape)."""
    if net_arch is None:
        if image:
            return []
        return {"td3": [400, 300], "ddpg": [400, 300], "sac": [256, 256]}.get(row.algo, [64, 64])
    if isinstance(net_arch, dict):
        towers = [list(tower) for tower in net_arch.values()]
        if any(tower != towers[0] for tower in towers):
            raise row.refuse("policy_kwargs.net_arch", f"= {net_arch}: rlexp's heads are towers of one shape; "
                                                       "give them the same sizes")
        return [int(units) for units in towers[0]] if towers else []
    if isinstance(net_arch, list) and all(isinstance(units, int) for units in net_arch):
        return [int(units) for units in net_arch]
    raise row.refuse("policy_kwargs.net_arch", f"= {net_arch}: a list of sizes or dict(pi=[...], vf=[...])")


def lstm_layer(row: ZooRow, kwargs: dict[str, Any]) -> dict[str, Any]:
    """sb3-contrib's LSTM: a memory per head unless shared_lstm; enable_critic_lstm=False (the critic without
    memory) rlexp does not build."""
    if not kwargs.get("enable_critic_lstm", True) and not kwargs.get("shared_lstm", False):
        raise row.refuse("policy_kwargs.enable_critic_lstm", "= False: rlexp's recurrent critic has its own "
                                                             "LSTM or shares the actor's (shared_lstm)")
    if int(kwargs.get("n_lstm_layers", 1)) != 1:
        raise row.refuse("policy_kwargs.n_lstm_layers", "!= 1: rlexp builds one LSTM layer per head")
    layer = {"type": "lstm", "units": int(kwargs.get("lstm_hidden_size", 256))}
    if kwargs.get("shared_lstm", False):
        layer["common"] = True
    return layer


# ----- agents ---------------------------------------------------------------------------------------------
def on_policy_agent(row: ZooRow, values: dict[str, Any], options: dict[str, Any], n_envs: int) -> dict[str, Any]:
    lr, lr_schedule = schedule(values["learning_rate"])
    agent: dict[str, Any] = {"lr": lr, "lr_schedule": lr_schedule, "gamma": float(values["gamma"]),
                             "n_steps": int(values["n_steps"]), "lam": float(values["gae_lambda"]),
                             "use_sde": bool(values["use_sde"]), "sde_sample_freq": int(values["sde_sample_freq"]),
                             "log_std_init": options["log_std_init"], "optimizer": "adam", "opt_epsilon": 1e-5,
                             **normalization(row, values)}
    rollout = agent["n_steps"] * n_envs
    if row.algo in ("ppo", "ppo_lstm", "trpo"):
        if not values["normalize_advantage"]:
            raise row.refuse("normalize_advantage", f"= False: rlexp's {row.algo.upper()[:4]} always normalises "
                                                    "advantages (SB3's default)")
        batch = int(values["batch_size"])
        if batch < rollout and rollout % batch:  # (a batch of at least the rollout is the whole rollout in SB3)
            raise row.refuse("batch_size", f"= {batch} does not divide n_steps x n_envs = {rollout}; rlexp's "
                                           "minibatches are equal parts of the rollout")
        agent["mini_batches"] = max(rollout // batch, 1)
    if row.algo in ("ppo", "ppo_lstm"):
        clip, clip_schedule = schedule(values["clip_range"])
        agent.update(ppo_epochs=int(values["n_epochs"]), clip_norm=clip, clip_schedule=clip_schedule,
                     entropy_coef=float(values["ent_coef"]), value_loss_coef=2 * float(values["vf_coef"]),
                     grad_norm=float(values["max_grad_norm"]), kl_threshold=None, value_clip=None)
        if values["clip_range_vf"] is not None:  # SB3 regresses the clipped prediction only; rlexp's value_clip
            raise row.refuse("clip_range_vf", "is not rlexp's value_clip (the larger of the clipped and unclipped "
                                              "losses); remove it")
        if values["target_kl"] is not None:  # SB3 stops the epochs past 1.5 x target_kl
            agent["kl_threshold"] = 1.5 * float(values["target_kl"])
    elif row.algo == "a2c":
        agent.update(entropy_coef=float(values["ent_coef"]), value_loss_coef=2 * float(values["vf_coef"]),
                     grad_norm=float(values["max_grad_norm"]),
                     normalize_advantage=bool(values["normalize_advantage"]))
        if values["use_rms_prop"]:  # PyTorch's epsilon outside the square root: its square inside it
            agent.update(optimizer="rmsprop", opt_epsilon=float(values["rms_prop_eps"]) ** 2)
    else:  # trpo
        agent.update(max_kl=float(values["target_kl"]), kl_reduction="mean",
                     cg_iterations=int(values["cg_max_steps"]), cg_damping=float(values["cg_damping"]),
                     line_search_shrink=float(values["line_search_shrinking_factor"]),
                     actor_iterations=int(values["line_search_max_iter"]),
                     critic_iterations=int(values["n_critic_updates"]),
                     fvp_n_steps=int(values["sub_sampling_factor"]), entropy_coef=0.0)
    if "optimizer" in options:
        agent.update(optimizer_options(row, *options["optimizer"]))
    return agent


def optimizer_options(row: ZooRow, name: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """policy_kwargs' optimizer: RMSpropTFLike (TensorFlow's RMSprop, epsilon inside the square root, as
    Keras') or PyTorch's Adam / RMSprop, with SB3's defaults (an on-policy Adam's epsilon 1e-5)."""
    short = name.rsplit(".", 1)[-1]
    extra = set(kwargs) - {"eps", "alpha"}
    if extra or float(kwargs.get("alpha", 0.99)) != 0.99:
        raise row.refuse("policy_kwargs.optimizer_kwargs", f"= {kwargs}: rlexp's optimizers take eps "
                                                           "(RMSprop's alpha 0.99)")
    if short == "RMSpropTFLike":
        return {"optimizer": "rmsprop", "opt_epsilon": float(kwargs.get("eps", 1e-8))}
    if short == "RMSprop":
        return {"optimizer": "rmsprop", "opt_epsilon": float(kwargs.get("eps", 1e-8)) ** 2}
    if short == "Adam":
        return {"optimizer": "adam", "opt_epsilon": float(kwargs.get("eps", 1e-5 if row.algo in ON_POLICY else 1e-8))}
    raise row.refuse("policy_kwargs.optimizer_class", f"= {name}: rlexp has Adam and RMSprop")


def replay(row: ZooRow, values: dict[str, Any], frames: bool = False) -> dict[str, Any]:
    buffer = {"max_size": int(float(values["buffer_size"])), "initial_size": int(float(values["learning_starts"])),
              "batch_size": int(values["batch_size"])}
    if frames:
        buffer["_target_"] = "rlexp.buffers.FrameBuffer"
    return buffer


def update_schedule(row: ZooRow, values: dict[str, Any]) -> dict[str, int]:
    if not isinstance(values["train_freq"], int):
        raise row.refuse("train_freq", f"= {values['train_freq']}: rlexp's train_freq counts env steps "
                                       "(an integer), not episodes")
    return {"train_freq": int(values["train_freq"]), "gradient_steps": int(values["gradient_steps"])}


def dqn_agent(row: ZooRow, values: dict[str, Any], image: bool, options: dict[str, Any]
              ) -> tuple[dict[str, Any], dict[str, Any]]:
    if float(values["tau"]) != 1.0:
        raise row.refuse("tau", f"= {values['tau']}: rlexp's DQN copies the target network (tau 1)")
    lr, lr_schedule = schedule(values["learning_rate"])
    decay = float(values["exploration_fraction"]) * float(values.get("n_timesteps", 1e6))
    agent = {"lr": lr, "lr_schedule": lr_schedule, "gamma": float(values["gamma"]), "optimizer": "adam",
             "opt_epsilon": 1e-8, "double": False, "epsilon_start": float(values["exploration_initial_eps"]),
             "epsilon_end": float(values["exploration_final_eps"]), "epsilon_decay_steps": int(decay),
             "target_sync_steps": int(float(values["target_update_interval"])),
             "grad_norm": float(values["max_grad_norm"]), **update_schedule(row, values),
             **normalization(row, values)}
    if "optimizer" in options:
        agent.update(optimizer_options(row, *options["optimizer"]))
    return agent, replay(row, values, frames=image)


def actor_critic_agent(row: ZooRow, values: dict[str, Any], options: dict[str, Any]
                       ) -> tuple[dict[str, Any], dict[str, Any]]:
    """DDPG, TD3 and SAC."""
    lr, lr_schedule = schedule(values["learning_rate"])
    agent: dict[str, Any] = {"lr": lr, "lr_schedule": lr_schedule, "gamma": float(values["gamma"]),
                             "tau": float(values["tau"]), "optimizer": "adam", "opt_epsilon": 1e-8,
                             **update_schedule(row, values), **normalization(row, values)}
    if "optimizer" in options:
        agent.update(optimizer_options(row, *options["optimizer"]))
    if row.algo == "sac":
        if int(values["target_update_interval"]) != 1:
            raise row.refuse("target_update_interval", "!= 1: rlexp's SAC updates its target critics every step")
        if values["use_sde_at_warmup"]:
            raise row.refuse("use_sde_at_warmup", "= True: rlexp's SAC warms up with uniform random actions")
        coef = str(values["ent_coef"])
        if coef.startswith("auto"):
            agent.update(ent_coef="auto", init_ent_coef=float(coef[5:]) if coef.startswith("auto_") else 1.0)
        else:
            agent.update(ent_coef=float(coef))
        target = values["target_entropy"]
        agent.update(target_entropy=target if target == "auto" else float(target), use_sde=bool(values["use_sde"]),
                     sde_sample_freq=int(values["sde_sample_freq"]), log_std_init=options["log_std_init"])
        return agent, replay(row, values)
    noise = values["noise_type"]
    if noise not in (None, "normal", "ornstein-uhlenbeck"):
        raise row.refuse("noise_type", f"= {noise}: rlexp's exploration noise is normal or ornstein-uhlenbeck")
    agent.update(noise_type="ornstein_uhlenbeck" if noise == "ornstein-uhlenbeck" else "normal",
                 step_noise_coef=0.0 if noise is None else float(values["noise_std"]))
    if row.algo == "td3":
        agent.update(policy_delay=int(values["policy_delay"]), policy_noise_coef=float(values["target_policy_noise"]),
                     noise_clip=float(values["target_noise_clip"]))
    return agent, replay(row, values)
