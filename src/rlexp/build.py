"""Building what a run needs from its composed config: TensorFlow set up (seed, determinism, thread pools),
the envs, the replay buffer and the agent, with one-line errors for values that don't fit."""
from __future__ import annotations

import gc
import logging
import os
from typing import Any, Mapping, NamedTuple

from omegaconf import DictConfig, OmegaConf, open_dict

from rlexp.errors import UserError

log = logging.getLogger("rlexp")


def setup_tensorflow(cfg: DictConfig) -> None:
    """Quiet TensorFlow, seeded and deterministic. Its thread pools are set in `configure_threads`, once the
    envs say whether observations are images."""
    from rlexp.runtime.quiet import import_tensorflow

    import_tensorflow()
    import keras
    import tensorflow as tf

    tf.get_logger().setLevel(logging.ERROR)
    for gpu in tf.config.list_physical_devices("GPU"):  # parallel trials can share one GPU
        tf.config.experimental.set_memory_growth(gpu, True)
    if cfg.seed is not None:
        keras.utils.set_random_seed(int(cfg.seed))
        tf.config.experimental.enable_op_determinism()


def thread_counts(run: Any, image_obs: bool, cores: int | None = None, wide_ops: bool = False) -> tuple[int, int]:
    """(inter-op, intra-op) TensorFlow threads from run.tf_inter_threads / run.tf_threads (0: TF's default).

    `auto`: MLP graphs are many small ops, so two inter-op threads running independent ops side by side
    (two critics, target and online networks, backward matmuls) beat splitting each small op across cores
    (DQN 1.5x, TD3 1.4x faster on 2 cores); image models have large convolutions, so one op at a time on
    all cores. `wide_ops`: an on-policy population's XLA program, whose batched matmuls are N members' work each,
    gets all cores beside two inter-op threads (PPO CartPole, 8 members: 1.2x); an off-policy population's graph
    keeps a single run's split, which its two critics use (docs/performance.md, "Populations").
    """
    cores = cores or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()) or 1
    if image_obs:
        auto = (1, 0)
    else:
        auto = (min(2, cores), cores if wide_ops else max(1, cores // 2))
    counts = []
    for key, default in zip(("tf_inter_threads", "tf_threads"), auto):
        value = run.get(key, "auto")
        if value == "auto":
            counts.append(default)
        elif isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            counts.append(value)
        else:
            raise UserError(f"run.{key}={value!r} must be auto or a number of threads (0: all cores)")
    return counts[0], counts[1]


def configure_threads(run: Any, image_obs: bool, wide_ops: bool = False) -> None:
    """Set TensorFlow's thread pools (before its first op). Once TensorFlow runs in this process (a sweep's
    earlier trial run in-process, or the Python API) its pools stay as they are: a warning names each count
    that could not apply and the one in effect."""
    from rlexp.runtime.quiet import import_tensorflow

    import_tensorflow(start=False)  # quietly, its symbols private, if this is the first import (a script's)
    import tensorflow as tf

    kept = []
    for key, pool, count in zip(("tf_inter_threads", "tf_threads"), ("inter_op", "intra_op"),
                                thread_counts(run, image_obs, wide_ops=wide_ops)):
        try:
            getattr(tf.config.threading, f"set_{pool}_parallelism_threads")(count)
        except RuntimeError:  # TensorFlow started already, with another count
            in_effect = getattr(tf.config.threading, f"get_{pool}_parallelism_threads")()
            kept.append(f"run.{key}={count} can't apply, {in_effect or 'all cores (0)'} {pool.replace('_', '-')} "
                        "threads in effect")
    if kept:
        log.warning(f"warning: TensorFlow already runs in this process: {'; '.join(kept)} (a new process, as "
                    "each trial of a sweep's default launcher, takes the settings)")


def agent_class(target: str) -> type:
    """The agent class named by a preset's `_target_`; only rlexp's agents may be built from YAML."""
    from rlexp.agents import AGENTS

    classes = {f"rlexp.agents.{cls.__name__}": cls for cls in AGENTS.values()}
    classes.update({f"{cls.__module__}.{cls.__name__}": cls for cls in AGENTS.values()})
    if target not in classes:
        raise UserError(f"agent _target_ {target!r} is not an rlexp agent; use one of "
                        f"{', '.join(sorted(f'rlexp.agents.{c.__name__}' for c in AGENTS.values()))}")
    return classes[target]


def check_pairing(cls: type, envs: Any, env_id: str) -> None:
    """One line when the agent can't act in the env's action space, naming the agents that can."""
    from rlexp.agents import AGENTS
    from rlexp.envs.spaces import space_kind

    kind = space_kind(envs.single_action_space)
    if kind not in cls.action_spaces:
        fits = sorted(name for name, c in AGENTS.items() if kind in c.action_spaces)
        name = next((n for n, c in AGENTS.items() if c is cls), cls.__name__)
        raise UserError(f"agent={name} does not support {kind} actions ({env_id}: {envs.single_action_space}); "
                        f"agents that fit: {', '.join(fits) or 'none yet'}")


def _hydra_whitelists() -> bool:
    import inspect

    from hydra.utils import instantiate

    return "_execution_whitelist_" in inspect.signature(instantiate).parameters


HYDRA_WHITELISTS = _hydra_whitelists()  # hydra-core 1.4's instantiate takes the targets it may build


def instantiate(node: Any, **kwargs: Any) -> Any:
    """hydra.utils.instantiate, re-raising our own one-line errors instead of Hydra's wrapper. Objects given in
    `kwargs` (envs, buffers) are passed to the constructor as they are: Hydra would put them into a config node
    first, garbage in reference cycles with them, which keeps them alive to the exit once `startup_done` freezes
    it (the ALE's emulators are then reported as leaked at the exit)."""
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    target = str(node.get("_target_", "")).rsplit(".", 1)[-1]
    convert = kwargs.pop("_convert_", None)
    options = {"_convert_": convert} if convert else {}
    if HYDRA_WHITELISTS:  # Hydra 1.4: the one target this call builds (an agent or buffer class rlexp checked)
        options["_execution_whitelist_"] = [str(node.get("_target_", ""))]
    try:
        factory = instantiate(node, _partial_=True, **options)
        return factory(**kwargs)
    except InstantiationException as e:
        if isinstance(e.__cause__, UserError):
            raise e.__cause__ from None
        if isinstance(e.__cause__, (ValueError, TypeError)):  # a value of the wrong type in the config
            raise rejected(target, e.__cause__) from None
        raise
    except (ValueError, TypeError) as e:
        raise rejected(target, e) from None


def rejected(target: str, error: Exception) -> UserError:
    return UserError(f"{target} rejected its config: {error}; check the values set on the command line (e.g. "
                     "agent.lr=3e-4) against the preset's types")


def check_types(section: str, node: Any, cls: type) -> None:
    """One line for a config value whose type doesn't fit the constructor's annotation (agent.lr=abc)."""
    import types
    import typing

    hints: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        if "__init__" in vars(klass):
            try:
                hints.update(typing.get_type_hints(klass.__init__))
            except Exception:  # noqa: BLE001 - unresolvable annotations: skip the check for that class
                continue
    wanted = {float: "a number", int: "an integer", bool: "true or false", str: "a string"}
    for key, value in node.items():
        hint = hints.get(key)
        options = set(typing.get_args(hint)) if isinstance(hint, types.UnionType) else {hint}
        if value is None and type(None) in options:
            continue
        simple = [t for t in options if t in wanted]
        if not simple or len(simple) != len(options - {type(None)}):
            continue
        ok = any((t is bool and isinstance(value, bool))
                 or (t is float and isinstance(value, (int, float)) and not isinstance(value, bool))
                 or (t is int and not isinstance(value, bool) and (isinstance(value, int) or
                                                                  (isinstance(value, float) and value.is_integer())))
                 or (t is str and isinstance(value, str)) for t in simple)
        if not ok:
            raise UserError(f"{section}.{key}={value!r} must be {' or '.join(wanted[t] for t in simple)}")


PROBE_ABOVE = 64  # env.n_envs beyond which the run's memory is checked on one probe env before the envs are made


def check_memory_first(cfg: DictConfig, cls: type, buffer: Any, model: Mapping[str, Any]) -> None:
    """The run's memory needs (rlexp.checks.memory) from the spaces of one probe env, before env.n_envs envs are made
    (the agent checks them again once built): a run too large for the machine is refused without making a
    million env copies first."""
    from rlexp.checks.memory import check_fits
    from rlexp.envs.make import probe_spaces
    from rlexp.envs.spaces import is_image

    obs_space, action_space = probe_spaces(cfg.env, cfg.seed)
    preset = cls.resolve_model(model, is_image(obs_space))
    params = OmegaConf.to_container(cfg.agent, resolve=True)
    check_fits(cls.memory_needs(obs_space, action_space, int(cfg.env.n_envs), params, buffer, preset))


class Checked(NamedTuple):
    """What `check_config` found the config to build: the agent class, its replay buffer (None on-policy) and the
    model preset as a plain dict."""
    cls: type
    buffer: Any
    model: dict[str, Any]


def check_config(cfg: DictConfig, n_envs: int | None = None) -> Checked:
    """The checks a config passes before any env is made or run dir claimed: the agent's class and the types of
    its values, the buffer's, and (for more than `PROBE_ABOVE` envs) the run's memory needs from one probe env."""
    cls = agent_class(cfg.agent._target_)
    check_types("agent", {k: v for k, v in cfg.agent.items() if k != "_target_"}, cls)
    buffer = None
    if not cls.off_policy and str((cfg.get("buffer") or {}).get("_target_", "")).endswith("HerReplayBuffer"):
        raise UserError(f"buffer=her relabels replayed goals: it is for off-policy agents (SAC, TQC, TD3, DDPG, "
                        f"CrossQ), not {cls.__name__}; leave buffer= out")
    if cls.off_policy:
        buffer_target = str(cfg.buffer.get("_target_", ""))
        if not buffer_target.startswith("rlexp.buffers."):
            raise UserError(f"buffer _target_ {buffer_target!r} is not an rlexp buffer (rlexp.buffers.ReplayBuffer, "
                            "rlexp.buffers.FrameBuffer or rlexp.buffers.RolloutBuffer)")
        from rlexp import buffers

        check_types("buffer", {k: v for k, v in cfg.buffer.items() if k != "_target_"},
                    getattr(buffers, buffer_target.rsplit(".", 1)[-1], object))
        buffer = instantiate(cfg.buffer)  # sizes only: its storage is allocated as it fills
    model = OmegaConf.to_container(cfg.model, resolve=True)
    if int(cfg.env.n_envs) > PROBE_ABOVE and n_envs is None:
        check_memory_first(cfg, cls, buffer, model)
    return Checked(cls, buffer, model)


def build_agent(cfg: DictConfig, n_envs: int | None = None, render_mode: str | None = None,
                checked: Checked | None = None, seeds: list[int] | None = None,
                member_values: dict[str, list[float]] | None = None, threads: bool = True):
    """Envs, buffer and agent from a composed config (the agent preset's `_target_` names the class), `checked`
    by `check_config` (which runs here when it is not given); with `seeds` a population of one member per seed, each
    with its own envs (rlexp.agents.base.population). `threads=False`: TensorFlow's thread pools stay as the agent
    built before it in this process set them (a population member's evaluation agent)."""
    from rlexp.envs.make import env_from_config
    from rlexp.models.networks import is_recurrent

    cls, buffer, model = checked or check_config(cfg, n_envs)
    overrides = {"render_mode": render_mode} if render_mode else {}
    if n_envs is not None:
        overrides["n_envs"] = n_envs
    if seeds is None:
        envs = env_from_config(cfg.env, cfg.seed, **overrides)
    else:
        from rlexp.envs.members import member_envs

        envs = member_envs([env_from_config(cfg.env, seed, **overrides) for seed in seeds])
    check_pairing(cls, envs, cfg.env.id)
    from rlexp.envs.spaces import is_image

    image_obs = is_image(envs.single_observation_space)
    population_xla = seeds is not None and len(seeds) > 1 and not getattr(cls, "off_policy", False)
    if threads:
        configure_threads(cfg.run, image_obs, wide_ops=population_xla)
    # an agent built to play or evaluate (n_envs given) never trains: its rollout's minibatch split doesn't apply
    playing = {"mini_batches": 1} if n_envs is not None and "mini_batches" in cfg.agent else {}
    setting = cfg.run.get("mixed_precision", False)
    if seeds is not None and setting == "auto":  # populations compute in float32 (a member's config records it)
        setting = False
    precision = resolve_precision(setting, cls, image_obs, is_recurrent(model), model)
    with open_dict(cfg):  # the run config records what `auto` chose (a resume elsewhere keeps it)
        cfg.run.mixed_precision = precision
        cfg.run.eval_deterministic = resolve_eval_deterministic(cfg.run.get("eval_deterministic", "auto"), cfg.env.id)
        if cfg.run.get("final_eval_deterministic") is not None:  # null: as eval_deterministic
            cfg.run.final_eval_deterministic = resolve_eval_deterministic(cfg.run.final_eval_deterministic, cfg.env.id)
    population = {} if seeds is None else {"seeds": seeds, "member_values": member_values or None}
    agent = instantiate(cfg.agent, envs=envs, model=model, buffer=buffer, seed=cfg.seed, **playing, **population,
                        clip_rewards=bool(cfg.env.clip_rewards), mixed_precision=precision, _convert_="all")
    return agent


BF16_CPU_FLAGS = {"avx512_bf16", "amx_bf16"}


def cpu_has_bfloat16(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether the CPU multiplies bfloat16 natively (AVX512-BF16 or AMX), from /proc/cpuinfo's flags."""
    try:
        with open(cpuinfo) as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        return False
    return bool(BF16_CPU_FLAGS & set(flags))


AUTO_BFLOAT16_MIN_UNITS = 256  # narrower MLPs ran no faster in bfloat16 (SAC Pendulum, 64-64: 0.96x)


def resolve_precision(setting: bool | str, cls: type, image_obs: bool, recurrent: bool = False,
                      model: Mapping[str, Any] | None = None) -> bool | str:
    """run.mixed_precision, with `auto` decided: bfloat16 on a CPU with bfloat16 instructions and no GPU, for
    feed-forward models where it was measured to pay and to learn as float32 does
    (benchmarks/results/mixed_precision.md, learning.md): image models of the on-policy agents, and vector
    models with layers of at least 256 units for agents with `auto_bfloat16` (SAC); float32 elsewhere
    (MLPs and LSTMs of the on-policy agents ran slower, and DQN, which acts from Python, too)."""
    if setting != "auto":
        return setting
    import tensorflow as tf

    if image_obs:
        eligible = cls.mixed_precision_support and not cls.off_policy
    else:
        widest = max((int(layer.get("units") or 0) for layer in (model or {}).get("layers") or []), default=0)
        eligible = cls.auto_bfloat16 and widest >= AUTO_BFLOAT16_MIN_UNITS
    if not eligible or recurrent or tf.config.list_physical_devices("GPU") or not cpu_has_bfloat16():
        return False
    return "bfloat16"


def resolve_eval_deterministic(setting: bool | str, env_id: str) -> bool:
    """run.eval_deterministic, with `auto` decided as RL Zoo scores: actions drawn from the policy on Atari
    games, the deterministic policy everywhere else."""
    if setting != "auto":
        return bool(setting)
    from rlexp.envs.spaces import is_atari

    return not is_atari(env_id)


def startup_done() -> None:
    """End of startup: freeze what imports and the agent's build allocated (~440k long-lived objects of
    TensorFlow, Keras and the models) so the cyclic garbage collector's full collections stop walking
    them, and turn it back on (`main` turns it off for the startup). Full collections had cost ~0.13 s
    each, ~0.9 s per CartPole run (0.23 s of them in A2C's first call)."""
    gc.freeze()
    gc.enable()
