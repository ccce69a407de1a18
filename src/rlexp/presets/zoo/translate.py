"""An RL Zoo row as rlexp's config: every value the row leaves out is SB3's (or sb3-contrib's) default for that
algorithm, and each value is converted where rlexp's convention differs from SB3's:

- PPO/A2C: `value_loss_coef` multiplies half the value MSE (SB3's `vf_coef` the whole MSE): 2 x vf_coef.
- PPO/TRPO: a number of minibatches (SB3: `batch_size` transitions): n_steps x n_envs / batch_size.
- A2C: Keras' RMSprop adds epsilon inside the square root (PyTorch's outside): SB3's 1e-5 is 1e-10 here;
  `RMSpropTFLike` is TensorFlow 1's RMSProp (its mean square starts at one): rlexp's `rmsprop_tf`. PPO/A2C/TRPO
  use Adam's epsilon 1e-5 (SB3's policies, without optimizer_kwargs), DQN, SAC, TD3 and DDPG PyTorch's 1e-8.
- Networks: SB3's `net_arch` per head, its activation, orthogonal init with gains sqrt(2) / 0.01 (policy) / 1
  (value) where `ortho_init` (on-policy default), PyTorch's default init elsewhere (rlexp's `torch`).
- DQN, QR-DQN: `exploration_fraction` of `n_timesteps` is `epsilon_decay_steps`. QR-DQN's Adam epsilon is
  0.01 / batch_size where policy_kwargs names no optimizer_class (sb3-contrib's).
- TQC: SAC's, with n_quantiles and n_critics (policy_kwargs) and top_quantiles_to_drop_per_net.
- CrossQ: SAC's without tau, with policy_delay; net_arch's pi sizes the model (batch_renorm before each dense layer,
  with policy_kwargs' batch_norm_momentum, batch_norm_eps and renorm_warmup_steps), its qf `critic_layers`; Adam's
  betas (0.5, 0.999) where policy_kwargs gives no optimizer_kwargs (sb3-contrib's).
Every key of a row rlexp cannot honour, and every value that is not what RL Zoo reads (a number, a `lin_` schedule,
a boolean), is named in one `ZooRowError` line: nothing is dropped silently."""
from __future__ import annotations

from typing import Any

from rlexp.presets.zoo.checks import Problems, as_number, checked
from rlexp.presets.zoo.policy import ON_POLICY, model_section, optimizer_options
from rlexp.presets.zoo.rows import ZooRow, literal_dict, schedule, wrappers

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
    "qrdqn": dict(learning_rate=5e-5, buffer_size=1_000_000, learning_starts=100, batch_size=32, tau=1.0,
                  gamma=0.99, train_freq=4, gradient_steps=1, target_update_interval=10000,
                  exploration_fraction=0.005, exploration_initial_eps=1.0, exploration_final_eps=0.01,
                  max_grad_norm=None),
    "tqc": dict(learning_rate=3e-4, buffer_size=1_000_000, learning_starts=100, batch_size=256, tau=0.005,
                gamma=0.99, train_freq=1, gradient_steps=1, ent_coef="auto", target_update_interval=1,
                target_entropy="auto", top_quantiles_to_drop_per_net=2, use_sde=False, sde_sample_freq=-1,
                use_sde_at_warmup=False),
}
SB3_DEFAULTS["crossq"] = dict(learning_rate=1e-3, buffer_size=1_000_000, learning_starts=100, batch_size=256,
                              gamma=0.99, train_freq=1, gradient_steps=1, ent_coef="auto", target_entropy="auto",
                              policy_delay=3, use_sde=False, sde_sample_freq=-1, use_sde_at_warmup=False)
SB3_DEFAULTS["ars"] = dict(n_delta=8, n_top=None, learning_rate=0.02, delta_std=0.05, zero_policy=True,
                           alive_bonus_offset=0, n_eval_episodes=1)
# the rlexp agent each file trains (ppo_lstm.yml: PPO with model=lstm)
AGENT_OF = {"ppo_lstm": "ppo"}
# keys read outside the algorithm's own (the run, the env, the network)
COMMON = {"n_timesteps", "policy", "n_envs", "normalize", "policy_kwargs", "env_wrapper", "frame_stack",
          "optimize_memory_usage", "replay_buffer_class", "replay_buffer_kwargs"}
HER_OPTIONS = {"n_sampled_goal": 4, "goal_selection_strategy": "future", "copy_info_dict": False,
               "handle_timeout_termination": True}  # (SB3's HerReplayBuffer; rlexp bootstraps at time limits)  # (the last: SB3's memory saving; rlexp's FrameBuffer stores each frame once)
# RL Zoo's own wrappers rlexp has: rl_zoo3's name -> rlexp's (the same options)
ZOO_WRAPPERS = {"rl_zoo3.wrappers.FrameSkip": "rlexp.envs.wrappers.FrameSkip",
                "rl_zoo3.wrappers.YAMLCompatResizeObservation": "rlexp.envs.wrappers.ResizeObservation"}
ATARI_WRAPPER = {"noop_max": 30, "frame_skip": 4, "screen_size": 84, "terminal_on_life_loss": True,
                 "clip_reward": True}


def translate(row: ZooRow) -> dict[str, dict[str, Any]]:
    """{env, agent, model, buffer, run} sections of rlexp's config that train `row` as RL Zoo does; every key
    rlexp cannot honour is named in one ZooRowError."""
    algo = row.algo
    if algo not in SB3_DEFAULTS:
        raise row.refuse("(file)", f"is for {algo}, which rlexp does not train; its RL Zoo files are "
                                   f"{', '.join(sorted(SB3_DEFAULTS))}")
    problems = Problems(row)
    for key in sorted(set(row.values) - set(SB3_DEFAULTS[algo]) - COMMON - {"callback"}):
        problems.add(key, f"is not an option of SB3's {algo.upper()} that rlexp knows; remove it")
    if "callback" in row.values:
        problems.add("callback", f"= {row.values['callback']} names RL Zoo callbacks, which rlexp does not run; "
                                 "remove it (evaluation during training: run.eval_interval)")
    values = checked({**SB3_DEFAULTS[algo], **row.values}, SB3_DEFAULTS[algo], problems)
    sections = {"env": env_section(row, values, problems),
                "run": {"max_steps": int(float(values.get("n_timesteps", 1e6))), "target_reward": None}}
    image = bool(sections["env"].get("preprocess")) or str(values.get("policy", "")).startswith("Cnn")
    sections["model"], policy_options = model_section(row, values, image, problems)
    if algo in ON_POLICY:
        sections["agent"] = on_policy_agent(row, values, policy_options, int(sections["env"]["n_envs"]), problems)
    elif algo in ("dqn", "qrdqn"):
        sections["agent"], sections["buffer"] = dqn_agent(row, values, image, policy_options, problems)
    elif algo == "ars":
        sections["agent"] = ars_agent(row, values, sections, problems)
        sections["env"]["n_envs"] = 2 * int(sections["agent"]["n_delta"])  # (all candidates side by side)
    else:
        sections["agent"], sections["buffer"] = actor_critic_agent(row, values, policy_options, problems)
    if "replay_buffer_class" in values or "replay_buffer_kwargs" in values:
        replay_class(row, values, sections, problems)
    problems.raise_any()
    return sections


def replay_class(row: ZooRow, values: dict[str, Any], sections: dict[str, Any], problems: Problems) -> None:
    """SB3's HerReplayBuffer (replay_buffer_class, with its replay_buffer_kwargs) as rlexp's `buffer=her`."""
    name = str(values.get("replay_buffer_class", "ReplayBuffer")).rsplit(".", 1)[-1]
    if "buffer" not in sections:
        problems.add("replay_buffer_class", f"= {name}: {row.algo.upper()} is on-policy; it has no replay buffer")
        return
    if name != "HerReplayBuffer":
        problems.add("replay_buffer_class", f"= {name}: rlexp's replay classes from RL Zoo's files are the "
                                            "default one and HerReplayBuffer")
        return
    kwargs = problems.attempt(lambda: literal_dict(values.get("replay_buffer_kwargs") or "dict()",
                                                   "replay_buffer_kwargs", row), {})
    options = {**HER_OPTIONS, **(kwargs if isinstance(kwargs, dict) else {})}
    for key in sorted(set(options) - set(HER_OPTIONS)):
        problems.add(f"replay_buffer_kwargs.{key}", "is not an option of SB3's HerReplayBuffer that rlexp knows")
    for key in ("copy_info_dict", "handle_timeout_termination"):
        if options[key] != HER_OPTIONS[key]:
            problems.add(f"replay_buffer_kwargs.{key}", f"= {options[key]}: rlexp's HER keeps "
                                                        f"{key}={HER_OPTIONS[key]}")
    strategy = str(options["goal_selection_strategy"]).rsplit(".", 1)[-1].lower()  # (also GoalSelectionStrategy.X)
    if strategy not in ("future", "final", "episode"):
        problems.add("replay_buffer_kwargs.goal_selection_strategy", f"= {strategy}: future, final or episode")
    goals = as_number(options["n_sampled_goal"])
    if goals is None or not goals.is_integer() or goals < 0:
        problems.add("replay_buffer_kwargs.n_sampled_goal", f"= {options['n_sampled_goal']}: a whole number")
        goals = 4
    sections["buffer"].update(_target_="rlexp.buffers.HerReplayBuffer", n_sampled_goal=int(goals),
                              goal_selection_strategy=strategy)


# ----- env ------------------------------------------------------------------------------------------------
def env_section(row: ZooRow, values: dict[str, Any], problems: Problems) -> dict[str, Any]:
    env: dict[str, Any] = {"n_envs": int(values.get("n_envs", 1))}
    for name, kwargs in wrappers(values.get("env_wrapper", [])):
        short = name.rsplit(".", 1)[-1]
        if short == "AtariWrapper":
            unknown = sorted(set(kwargs) - set(ATARI_WRAPPER))
            options = {**ATARI_WRAPPER, **kwargs}
            if unknown:
                problems.add("env_wrapper", f"AtariWrapper's {unknown[0]}={kwargs[unknown[0]]}: rlexp's Atari "
                                            f"preprocessing takes {', '.join(ATARI_WRAPPER)}")
            elif options["frame_skip"] != 4 or options["screen_size"] != 84:
                problems.add("env_wrapper", f"AtariWrapper{kwargs}: rlexp's Atari preprocessing skips 4 frames and "
                                            "resizes to 84x84 (env.screen_size)")
            elif as_number(options["noop_max"]) is None:
                problems.add("env_wrapper", f"AtariWrapper's noop_max={options['noop_max']!r} is not a number")
            else:
                env.update(preprocess=True, noop_max=int(options["noop_max"]), frame_stack=1,
                           life_loss_terminal=bool(options["terminal_on_life_loss"]),
                           clip_rewards=bool(options["clip_reward"]), max_frame=True)
        elif short == "TimeLimit" and name.startswith("gymnasium."):
            steps = as_number(kwargs.get("max_episode_steps"))
            if steps is None:
                problems.add("env_wrapper", f"TimeLimit's max_episode_steps={kwargs.get('max_episode_steps')!r} "
                                            "is not a number")
            else:
                env["max_episode_steps"] = int(steps)
        elif name.startswith("gymnasium.wrappers.") or name in ZOO_WRAPPERS:
            env.setdefault("wrappers", []).append({"_target_": ZOO_WRAPPERS.get(name, name), **kwargs})
        elif name.startswith("minigrid.wrappers."):  # Farama's MiniGrid (the `minigrid` extra)
            try:
                __import__("minigrid")
            except ImportError:
                problems.add("env_wrapper", f"names {name}: pip install 'rlexp[minigrid]' (Farama's MiniGrid)")
                continue
            env.setdefault("wrappers", []).append({"_target_": name, **kwargs})
            env["imports"] = ["minigrid"]
        else:
            problems.add("env_wrapper", f"names {name}, which rlexp does not have; remove it, or give an installed "
                                        "gymnasium wrapper in env.wrappers")
    if "frame_stack" in values and not env.get("preprocess"):  # (SB3's VecFrameStack, over the row's wrappers)
        env.setdefault("wrappers", []).append({"_target_": "rlexp.envs.wrappers.StackFramesLast",
                                               "n_stack": int(values["frame_stack"])})
    elif "frame_stack" in values:
        env["frame_stack"] = int(values["frame_stack"])
    elif env.get("preprocess"):
        env["frame_stack"] = 1  # SB3 stacks nothing unless the row says frame_stack
    return env


def normalization(row: ZooRow, values: dict[str, Any], problems: Problems) -> dict[str, bool]:
    """RL Zoo's `normalize` (true, or "{'norm_obs': .., 'norm_reward': ..}") as normalize_obs/normalize_reward;
    VecNormalize's clipping at 10 and its gamma (the row's, as RL Zoo sets it) are rlexp's."""
    value = values.get("normalize", False)
    if isinstance(value, bool):
        return {"normalize_obs": value, "normalize_reward": value}
    options = {"norm_obs": True, "norm_reward": True, **problems.attempt(
        lambda: literal_dict(value, "normalize", row), {})}
    extra = set(options) - {"norm_obs", "norm_reward", "gamma"}
    if extra:
        problems.add("normalize", f"sets {sorted(extra)[0]}; rlexp's normalisation takes norm_obs and norm_reward "
                                  "(clipping at 10, as VecNormalize's default)")
    return {"normalize_obs": bool(options["norm_obs"]), "normalize_reward": bool(options["norm_reward"])}


# ----- agents ---------------------------------------------------------------------------------------------
def policy_keys(row: ZooRow, values: dict[str, Any], options: dict[str, Any], problems: Problems) -> dict[str, Any]:
    """The agent keys the policy sets: its optimizer (SB3's), and gSDE's expln / SAC's mean clip where read."""
    keys = optimizer_options(row, options.get("optimizer"), values, problems)
    keys |= {key: options[key] for key in ("use_expln", "clip_mean", "n_quantiles", "n_critics") if key in options}
    return keys


def on_policy_agent(row: ZooRow, values: dict[str, Any], options: dict[str, Any], n_envs: int,
                    problems: Problems) -> dict[str, Any]:
    lr, lr_schedule = schedule(values["learning_rate"])
    agent: dict[str, Any] = {"lr": lr, "lr_schedule": lr_schedule, "gamma": float(values["gamma"]),
                             "n_steps": int(values["n_steps"]), "lam": float(values["gae_lambda"]),
                             "use_sde": bool(values["use_sde"]), "sde_sample_freq": int(values["sde_sample_freq"]),
                             "log_std_init": options["log_std_init"], **normalization(row, values, problems)}
    rollout = agent["n_steps"] * n_envs
    if row.algo in ("ppo", "ppo_lstm", "trpo"):
        if not values["normalize_advantage"]:
            problems.add("normalize_advantage", f"= False: rlexp's {row.algo.upper()[:4]} always normalises "
                                                "advantages (SB3's default)")
        batch = int(values["batch_size"])
        if batch < 1 or batch < rollout and rollout % batch:  # (a batch of the whole rollout or more: 1 in SB3)
            problems.add("batch_size", f"= {batch} does not divide n_steps x n_envs = {rollout}; rlexp's "
                                       "minibatches are equal parts of the rollout")
        agent["mini_batches"] = max(rollout // max(batch, 1), 1)
    if row.algo in ("ppo", "ppo_lstm", "a2c"):
        agent.update(entropy_coef=coefficient(values, "ent_coef", problems),
                     value_loss_coef=2 * float(values["vf_coef"]), grad_norm=float(values["max_grad_norm"]))
    if row.algo in ("ppo", "ppo_lstm"):
        clip, clip_schedule = schedule(values["clip_range"])
        agent.update(ppo_epochs=int(values["n_epochs"]), clip_norm=clip, clip_schedule=clip_schedule,
                     kl_threshold=None, value_clip=None)
        if values["clip_range_vf"] is not None:  # SB3 regresses the clipped prediction only; rlexp's value_clip
            problems.add("clip_range_vf", "is not rlexp's value_clip (the larger of the clipped and unclipped "
                                          "losses); remove it")
        if values["target_kl"] is not None:  # SB3 stops at the first minibatch past 1.5 x target_kl
            agent["kl_threshold"] = 1.5 * float(values["target_kl"])
    elif row.algo == "a2c":
        agent["normalize_advantage"] = bool(values["normalize_advantage"])
    elif row.algo == "trpo":
        if values["target_kl"] is None:
            problems.add("target_kl", "= null: TRPO's trust region needs a KL bound (SB3's default 0.01)")
        agent.update(max_kl=float(values["target_kl"] or 0.01), kl_reduction="mean",
                     cg_iterations=int(values["cg_max_steps"]), cg_damping=float(values["cg_damping"]),
                     line_search_shrink=float(values["line_search_shrinking_factor"]),
                     actor_iterations=int(values["line_search_max_iter"]),
                     critic_iterations=int(values["n_critic_updates"]),
                     fvp_n_steps=int(values["sub_sampling_factor"]), entropy_coef=0.0)
    return agent | policy_keys(row, values, options, problems)


def ars_agent(row: ZooRow, values: dict[str, Any], sections: dict[str, Any], problems: Problems) -> dict[str, Any]:
    """sb3-contrib's ARS: LinearPolicy (no bias, clipped actions) or MlpPolicy (biases, tanh-squashed actions), its
    hidden layers from the model section; one episode per candidate. rlexp runs the candidates in parallel env
    copies (env.n_envs = 2 x n_delta), which changes no result: each still runs one fresh episode."""
    if int(values["n_eval_episodes"]) != 1:
        problems.add("n_eval_episodes", f"= {values['n_eval_episodes']}: rlexp's ARS runs one episode per candidate")
    for key in ("delta_std", "alive_bonus_offset"):
        if as_number(values[key]) is None:
            problems.add(key, f"= {values[key]!r} is not a number")
    linear = str(values.get("policy", "LinearPolicy")) == "LinearPolicy"
    kwargs = problems.attempt(lambda: literal_dict(values.get("policy_kwargs", "dict()"), "policy_kwargs", row), {})
    layers = [layer for layer in sections["model"]["layers"] if not layer.get("output")]
    lr, lr_schedule = schedule(values["learning_rate"])
    return {"lr": lr, "lr_schedule": lr_schedule, "n_delta": int(values["n_delta"]),
            "n_top": None if values["n_top"] is None else int(values["n_top"]),
            "delta_std": as_number(values["delta_std"]) or 0.05, "zero_policy": bool(values["zero_policy"]),
            "alive_bonus_offset": as_number(values["alive_bonus_offset"]) or 0.0,
            "net_arch": [] if linear else [int(layer["units"]) for layer in layers],
            "with_bias": bool(kwargs.get("with_bias", not linear)),
            "squash_output": bool(kwargs.get("squash_output", not linear)),
            "activation": layers[0]["activation"] if layers and not linear else "relu",
            **normalization(row, values, problems)}


def coefficient(values: dict[str, Any], key: str, problems: Problems) -> float:
    number = as_number(values[key])
    if number is None:
        problems.add(key, f"= {values[key]!r} is not a number")
    return 0.0 if number is None else number


def replay(values: dict[str, Any], frames: bool = False) -> dict[str, Any]:
    buffer = {"max_size": int(values["buffer_size"]), "initial_size": int(values["learning_starts"]),
              "batch_size": int(values["batch_size"])}
    if frames:
        buffer["_target_"] = "rlexp.buffers.FrameBuffer"
    return buffer


def update_schedule(values: dict[str, Any], problems: Problems) -> dict[str, Any]:
    """train_freq: env steps (a number, or SB3's [n, "step"]), or SB3's [n, "episode"] as
    agent.train_freq_unit=episode."""
    frequency, unit = values["train_freq"], "step"
    if isinstance(frequency, list) and len(frequency) == 2 and frequency[1] in ("step", "episode"):
        frequency, unit = frequency
    number = None if isinstance(frequency, list) else as_number(frequency)
    if number is None or not number.is_integer() or number < 1:
        problems.add("train_freq", f"= {values['train_freq']}: rlexp's train_freq is a whole number of env steps"
                                   ' or [n, "episode"]')
        number, unit = 1, "step"
    schedule = {"train_freq": int(number), "gradient_steps": int(values["gradient_steps"])}
    return schedule | ({"train_freq_unit": unit} if unit == "episode" else {})


def dqn_agent(row: ZooRow, values: dict[str, Any], image: bool, options: dict[str, Any], problems: Problems
              ) -> tuple[dict[str, Any], dict[str, Any]]:
    if float(values["tau"]) != 1.0:
        problems.add("tau", f"= {values['tau']}: rlexp's DQN copies the target network (tau 1)")
    lr, lr_schedule = schedule(values["learning_rate"])
    decay = float(values["exploration_fraction"]) * float(values.get("n_timesteps", 1e6))
    agent = {"lr": lr, "lr_schedule": lr_schedule, "gamma": float(values["gamma"]),
             **({"double": False} if row.algo == "dqn" else {}), "epsilon_start": float(values["exploration_initial_eps"]),
             "epsilon_end": float(values["exploration_final_eps"]), "epsilon_decay_steps": int(decay),
             "target_sync_steps": int(values["target_update_interval"]),
             "grad_norm": None if values["max_grad_norm"] is None else float(values["max_grad_norm"]),
             **update_schedule(values, problems),
             **normalization(row, values, problems)}
    return agent | policy_keys(row, values, options, problems), replay(values, frames=image)


def actor_critic_agent(row: ZooRow, values: dict[str, Any], options: dict[str, Any], problems: Problems
                       ) -> tuple[dict[str, Any], dict[str, Any]]:
    """DDPG, TD3, SAC, TQC and CrossQ."""
    lr, lr_schedule = schedule(values["learning_rate"])
    agent: dict[str, Any] = {"lr": lr, "lr_schedule": lr_schedule, "gamma": float(values["gamma"]),
                             **update_schedule(values, problems),
                             **normalization(row, values, problems), **policy_keys(row, values, options, problems)}
    if row.algo != "crossq":  # (no target networks)
        agent["tau"] = float(values["tau"])
    if row.algo in ("sac", "tqc", "crossq"):
        name = {"crossq": "CrossQ"}.get(row.algo, row.algo.upper())
        if int(values.get("target_update_interval", 1)) != 1:
            problems.add("target_update_interval", f"!= 1: rlexp's {name} updates its target critics every step")
        if values["use_sde_at_warmup"]:
            problems.add("use_sde_at_warmup", f"= True: rlexp's {name} warms up with uniform random actions")
        agent.update(entropy(values, problems), use_sde=bool(values["use_sde"]),
                     sde_sample_freq=int(values["sde_sample_freq"]), log_std_init=options["log_std_init"])
        if row.algo == "tqc":
            agent["top_quantiles_to_drop_per_net"] = int(values["top_quantiles_to_drop_per_net"])
        if row.algo == "crossq":
            agent.update(policy_delay=int(values["policy_delay"]), critic_layers=options["critic_layers"])
        return agent, replay(values)
    noise = values["noise_type"]
    if noise not in (None, "normal", "ornstein-uhlenbeck"):
        problems.add("noise_type", f"= {noise}: rlexp's exploration noise is normal or ornstein-uhlenbeck")
    agent.update(noise_type="ornstein_uhlenbeck" if noise == "ornstein-uhlenbeck" else "normal",
                 step_noise_coef=0.0 if noise is None else float(values["noise_std"]))
    if row.algo == "td3":
        agent.update(policy_delay=int(values["policy_delay"]), policy_noise_coef=float(values["target_policy_noise"]),
                     noise_clip=float(values["target_noise_clip"]))
    return agent, replay(values)


def entropy(values: dict[str, Any], problems: Problems) -> dict[str, Any]:
    """SAC's ent_coef ('auto', 'auto_<initial>' or a number) and target_entropy ('auto' or a number)."""
    coef, target = values["ent_coef"], values["target_entropy"]
    out: dict[str, Any] = {"ent_coef": "auto", "init_ent_coef": 1.0, "target_entropy": "auto"}
    start = as_number(coef[5:]) if isinstance(coef, str) and coef.startswith("auto_") else None
    if coef == "auto" or start is not None:
        out["init_ent_coef"] = 1.0 if start is None else start
    elif as_number(coef) is not None:
        out["ent_coef"] = as_number(coef)
    else:
        problems.add("ent_coef", f"= {coef!r}: SAC's ent_coef is 'auto', 'auto_<initial value>' or a number")
    if target != "auto":
        if as_number(target) is None:
            problems.add("target_entropy", f"= {target!r}: SAC's target_entropy is 'auto' or a number")
        else:
            out["target_entropy"] = as_number(target)
    return out
