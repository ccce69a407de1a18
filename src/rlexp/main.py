"""The rlexp command: `python -m rlexp [group=option ...] [key=value ...]` (train, play, eval; --multirun tunes)."""
from __future__ import annotations

import gc
import logging
import os
import sys
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from rlexp.errors import Started, TrialFailed, UserError

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # before TensorFlow is imported (lazily, in the task)

log = logging.getLogger("rlexp")
CHECKPOINT = Path("checkpoints") / "last.ckpt"


def _setup_tensorflow(cfg: DictConfig) -> None:
    """Quiet TensorFlow, seeded and deterministic. Its thread pools are set in `configure_threads`, once the
    envs say whether observations are images."""
    from rlexp.quiet import import_tensorflow

    import_tensorflow()
    import keras
    import tensorflow as tf

    tf.get_logger().setLevel(logging.ERROR)
    for gpu in tf.config.list_physical_devices("GPU"):  # parallel trials can share one GPU
        tf.config.experimental.set_memory_growth(gpu, True)
    if cfg.seed is not None:
        keras.utils.set_random_seed(int(cfg.seed))
        tf.config.experimental.enable_op_determinism()


def thread_counts(run: Any, image_obs: bool, cores: int | None = None) -> tuple[int, int]:
    """(inter-op, intra-op) TensorFlow threads from run.tf_inter_threads / run.tf_threads (0: TF's default).

    `auto`: MLP graphs are many small ops, so two inter-op threads running independent ops side by side
    (two critics, target and online networks, backward matmuls) beat splitting each small op across cores
    (DQN 1.5x, TD3 1.4x faster on 2 cores); image models have large convolutions, so one op at a time on
    all cores.
    """
    cores = cores or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()) or 1
    auto = (1, 0) if image_obs else (min(2, cores), max(1, cores // 2))
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


def configure_threads(run: Any, image_obs: bool) -> None:
    """Set TensorFlow's thread pools (before its first op; a later trial in the same process keeps them)."""
    import tensorflow as tf

    inter, intra = thread_counts(run, image_obs)
    try:
        tf.config.threading.set_inter_op_parallelism_threads(inter)
        tf.config.threading.set_intra_op_parallelism_threads(intra)
    except RuntimeError:  # TensorFlow already started in this process (a sweep's earlier trial)
        log.debug("TensorFlow's thread pools are already set; keeping them")


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
    from rlexp.envs import space_kind

    kind = space_kind(envs.single_action_space)
    if kind not in cls.action_spaces:
        fits = sorted(name for name, c in AGENTS.items() if kind in c.action_spaces)
        name = next((n for n, c in AGENTS.items() if c is cls), cls.__name__)
        raise UserError(f"agent={name} does not support {kind} actions ({env_id}: {envs.single_action_space}); "
                        f"agents that fit: {', '.join(fits) or 'none yet'}")


def _instantiate(node: Any, **kwargs: Any) -> Any:
    """hydra.utils.instantiate, re-raising our own one-line errors instead of Hydra's wrapper."""
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    try:
        return instantiate(node, **kwargs)
    except InstantiationException as e:
        if isinstance(e.__cause__, UserError):
            raise e.__cause__ from None
        if isinstance(e.__cause__, (ValueError, TypeError)):  # a value of the wrong type in the config
            target = str(node.get("_target_", "")).rsplit(".", 1)[-1]
            raise UserError(f"{target} rejected its config: {e.__cause__}; check the values set on the command "
                            "line (e.g. agent.lr=3e-4) against the preset's types") from None
        raise


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


def build_agent(cfg: DictConfig, n_envs: int | None = None, render_mode: str | None = None):
    """Envs, buffer and agent from a composed config (the agent preset's `_target_` names the class)."""
    from rlexp.envs import env_from_config

    cls = agent_class(cfg.agent._target_)
    check_types("agent", {k: v for k, v in cfg.agent.items() if k != "_target_"}, cls)
    overrides = {"render_mode": render_mode} if render_mode else {}
    if n_envs is not None:
        overrides["n_envs"] = n_envs
    envs = env_from_config(cfg.env, cfg.seed, **overrides)
    check_pairing(cls, envs, cfg.env.id)
    from rlexp.envs import is_image

    configure_threads(cfg.run, is_image(envs.single_observation_space))
    buffer = None
    if cls.off_policy:
        buffer_target = str(cfg.buffer.get("_target_", ""))
        if not buffer_target.startswith("rlexp.buffers."):
            raise UserError(f"buffer _target_ {buffer_target!r} is not an rlexp buffer (rlexp.buffers.ReplayBuffer, "
                            "rlexp.buffers.FrameBuffer or rlexp.buffers.RolloutBuffer)")
        from rlexp import buffers

        check_types("buffer", {k: v for k, v in cfg.buffer.items() if k != "_target_"},
                    getattr(buffers, buffer_target.rsplit(".", 1)[-1], object))
        buffer = _instantiate(cfg.buffer)
    model = OmegaConf.to_container(cfg.model, resolve=True)
    # an agent built to play or evaluate (n_envs given) never trains: its rollout's minibatch split doesn't apply
    playing = {"mini_batches": 1} if n_envs is not None and "mini_batches" in cfg.agent else {}
    agent = _instantiate(cfg.agent, envs=envs, model=model, buffer=buffer, seed=cfg.seed, **playing,
                        clip_rewards=bool(cfg.env.clip_rewards), mixed_precision=cfg.run.get("mixed_precision", False),
                        _convert_="all")
    return agent


def startup_done() -> None:
    """End of startup: freeze what imports and the agent's build allocated (~440k long-lived objects of
    TensorFlow, Keras and the models) so the cyclic garbage collector's full collections stop walking
    them, and turn it back on (`main` turns it off for the startup). Full collections had cost ~0.13 s
    each, ~0.9 s per CartPole run (0.23 s of them in A2C's first call)."""
    gc.freeze()
    gc.enable()


def _run_config(cfg: DictConfig) -> dict[str, Any]:
    container = OmegaConf.to_container(cfg, resolve=True)
    container.pop("hydra", None)
    return container


def _original_cwd() -> Path:
    try:
        return Path(HydraConfig.get().runtime.cwd)
    except ValueError:
        return Path.cwd()


def _absolute(path: str | Path) -> Path:
    """A path from the command line, relative to the directory the command was started in."""
    path = Path(path).expanduser()
    return path if path.is_absolute() else _original_cwd() / path


def find_checkpoint(cfg: DictConfig, explicit: str | None) -> Path:
    """The checkpoint to play: `+checkpoint` (a run dir or a .ckpt), else the newest matching run's."""
    from rlexp.agents.base import Agent

    if explicit:
        path = _absolute(explicit)
        if path.is_dir():
            path = path / CHECKPOINT
        if not path.exists():
            raise UserError(f"+checkpoint={explicit}: {path} does not exist; pass a run dir "
                            "(outputs/<date>/<time>_<agent>_<env>) or a .ckpt file")
        return path
    candidates = []
    for root in ("outputs", "multirun"):
        for ckpt in (_original_cwd() / root).glob(f"**/{CHECKPOINT}"):
            candidates.append((ckpt.stat().st_mtime, ckpt))
    for _, ckpt in sorted(candidates, reverse=True):
        try:
            stored = Agent.read_state(ckpt).get("config", {})
        except UserError:
            continue
        if stored.get("agent", {}).get("_target_") == cfg.agent._target_ and stored.get("env", {}).get("id") == cfg.env.id:
            return ckpt
    name = HydraConfig.get().runtime.choices
    raise UserError(f"no trained run of agent={name.get('agent')} on {cfg.env.id} under outputs/; train first "
                    f"(python -m rlexp agent={name.get('agent')} env={name.get('env')}) or pass +checkpoint=<run dir>")


def _stored_config(ckpt: Path, cfg: DictConfig) -> DictConfig:
    """The config a checkpoint was trained with, with this command's mode, play.* and explicit run.* settings."""
    from rlexp.agents.base import Agent

    stored = Agent.read_state(ckpt).get("config")
    if not stored:
        raise UserError(f"checkpoint {ckpt} has no stored config; it was not written by `python -m rlexp`")
    merged = OmegaConf.create(stored)
    for key in ("mode", "play"):
        merged[key] = cfg[key]
    merged.setdefault("run", cfg.run)
    for override in _task_overrides():  # run.* keeps the stored values unless set on this command line
        key = override.split("=", 1)[0].lstrip("+~")
        if key.startswith("run."):
            OmegaConf.update(merged, key, OmegaConf.select(cfg, key), force_add=True)
    return merged


def _task_overrides() -> list[str]:
    try:
        return list(HydraConfig.get().overrides.task)
    except ValueError:
        return []


def _flat(node: Any, prefix: str = "") -> dict[str, Any]:
    """{dotted key: leaf value} of a config section."""
    if isinstance(node, dict):
        return {k: v for key, sub in node.items() for k, v in _flat(sub, f"{prefix}{key}.").items()}
    return {prefix[:-1]: node}


def check_resume_overrides(cfg: DictConfig, stored: DictConfig) -> None:
    """+resume continues a run with its own settings: this command's agent/env/model/buffer/seed values may
    repeat the run's (the command it was trained with), and only run.* may differ."""
    fixed = ("agent", "env", "model", "buffer", "seed")
    touched = {o.split("=", 1)[0].lstrip("+~") for o in _task_overrides()}
    touched = {key for key in touched if key.split(".")[0] in fixed}
    here = _flat({k: OmegaConf.to_container(cfg, resolve=True).get(k) for k in fixed})
    there = _flat({k: OmegaConf.to_container(stored, resolve=True).get(k) for k in fixed})
    differ = sorted(k for k in set(here) | set(there) if any(k == t or k.startswith(f"{t}.") for t in touched)
                    and here.get(k) != there.get(k))
    if differ:
        shown = ", ".join(f"{k} (run: {there.get(k)!r}, here: {here.get(k)!r})" for k in differ[:3])
        raise UserError(f"+resume continues the run with its own settings, and these differ: {shown}"
                        f"{' ...' if len(differ) > 3 else ''}; drop them (only run.* can change on resume), or "
                        "start a new run from its weights with +init_from=<run dir>")


def new_run_dir(cfg: DictConfig) -> Path:
    """A fresh training run's dir: the sweep's trial dir, else run_dir (outputs/<date>/<time>_<agent>_<env>),
    with a numeric suffix when a run of the same second holds that name. Not made yet."""
    if _in_sweep():
        return Path(HydraConfig.get().runtime.output_dir)
    run_dir = _absolute(str(cfg.run_dir))
    candidate, n = run_dir, 1
    while candidate.exists():
        candidate, n = run_dir.with_name(f"{run_dir.name}_{n}"), n + 1
    return candidate


def write_run_config(run_dir: Path, cfg: DictConfig) -> None:
    """The composed config and this command's overrides in <run dir>/.hydra/ (Hydra's layout)."""
    from rlexp.files import write_atomic

    config = OmegaConf.to_yaml(OmegaConf.create(_run_config(cfg)))
    overrides = OmegaConf.to_yaml(OmegaConf.create(_task_overrides()))
    write_atomic(run_dir / ".hydra" / "config.yaml", lambda f: f.write(config.encode()))
    write_atomic(run_dir / ".hydra" / "overrides.yaml", lambda f: f.write(overrides.encode()))


def init_weights(agent: Any, source: str) -> Path:
    """+init_from: a run dir's last checkpoint (or a .ckpt file) gives the weights and normaliser statistics."""
    ckpt = _absolute(source)
    if ckpt.is_dir():
        ckpt = ckpt / CHECKPOINT
    if not ckpt.exists():
        raise UserError(f"+init_from={source}: {ckpt} does not exist; pass a run dir or a .ckpt file")
    try:
        agent.load(ckpt, weights_only=True)
    except ValueError as e:  # Keras: the layer shapes differ
        raise UserError(f"+init_from={source}: its model does not fit this one ({e}); use the run's model "
                        "preset and layers") from None
    return ckpt


def warn_if_no_update(agent: Any, cfg: DictConfig) -> None:
    first = agent.first_update_step()
    if agent.steps < first and int(float(cfg.run.max_steps)) <= first:
        log.warning(f"warning: run.max_steps={cfg.run.max_steps} ends before the first gradient step, at "
                    f"{first:,} env steps (a full rollout, or buffer.initial_size); nothing will be learned")


def make_evaluator(cfg: DictConfig, run_dir: Path):
    """Evaluation during training (run.eval_interval > 0) on its own envs, seeded apart from training's."""
    interval = int(cfg.run.get("eval_interval") or 0)
    if interval <= 0:
        return None
    from rlexp.evaluation import Evaluator

    return Evaluator(lambda: eval_envs(cfg), interval, int(cfg.run.eval_episodes), run_dir,
                     keep=int(cfg.run.get("keep_checkpoints") or 0))


def train(cfg: DictConfig) -> float | dict[str, float]:
    from rlexp.checks import check_presets, check_settings
    from rlexp.logs import attach_run_log, detach_run_log

    resume, init_from = cfg.get("resume"), cfg.get("init_from")
    if resume and init_from:
        raise UserError("+resume continues a run, +init_from starts a new one from a run's weights: pass one of them")
    if resume:
        run_dir = _absolute(resume)
        ckpt = run_dir / CHECKPOINT
        if not ckpt.exists():
            raise UserError(f"+resume={resume}: no checkpoint at {ckpt}; pass the run dir of a training run")
        stored = _stored_config(ckpt, cfg)
        if str(stored.get("fallback", "auto")) not in ("auto", "none"):  # compare like with like
            from rlexp.fallback import merge_fallback

            cfg = merge_fallback(cfg, str(stored.fallback), _task_overrides())
        check_resume_overrides(cfg, stored)
        cfg = stored
        check_settings(cfg)
    else:
        check_presets(cfg, _choices())
        from rlexp.fallback import apply_fallback

        cfg = apply_fallback(cfg, _choices(), _task_overrides())
        run_dir = new_run_dir(cfg)
    _setup_tensorflow(cfg)
    agent = build_agent(cfg)
    if init_from and not resume:
        log.info(f"initial weights from {init_weights(agent, str(init_from))}")
    warn_if_no_update(agent, cfg)
    startup_done()
    if resume:
        from rlexp.files import remove_leftovers

        remove_leftovers(run_dir, run_dir / "checkpoints")  # half-written files of the killed run
    else:
        run_dir.mkdir(parents=True, exist_ok=True)
        write_run_config(run_dir, cfg)
    handler = attach_run_log(run_dir)
    try:
        return _train(agent, cfg, run_dir, ckpt if resume else None)
    finally:
        detach_run_log(handler)


def _train(agent: Any, cfg: DictConfig, run_dir: Path, resume_from: Path | None) -> float | dict[str, float]:
    evaluator = make_evaluator(cfg, run_dir)
    if resume_from is not None:
        state = agent.load(resume_from)
        if evaluator is not None:
            evaluator.restore(agent.steps)
        log.info(f"resumed {run_dir} at step {state['steps']:,} ({state['episodes']:,} episodes)")
    if not cfg.agent.get("quiet"):
        log.info(f"training {type(agent).__name__} on {cfg.env.id} ({cfg.env.n_envs} envs) -> {run_dir}")
    tracker = make_tracker(cfg, run_dir)
    failed = True
    try:
        summary = agent.fit(cfg.run.max_steps, cfg.run.target_reward, run_dir=run_dir,
                            checkpoint_interval=float(cfg.run.checkpoint_interval),
                            history_interval=float(cfg.run.history_interval), progress=_progress_mode(cfg),
                            config=_run_config(cfg), tracker=tracker, evaluator=evaluator)
        returns = [] if summary["reason"] == "interrupted" else evaluate(agent, cfg)
        precision = int(cfg.agent.display_precision)
        mean, std = _mean_std(returns)
        if returns:
            tracker.scalars(agent.steps, {"eval/mean_return": mean, "eval/std_return": std})
        failed = False
    finally:
        tracker.close(failed)
        if evaluator is not None:
            evaluator.close()
    log.info(f"done ({summary['reason']}): {summary['steps']:,} steps in {summary['seconds']:.1f} s "
             f"({summary['steps_per_s']:,.0f} steps/s) | "
             + (f"eval {mean:.{precision}f} ± {std:.{precision}f} over {len(returns)} episodes" if returns else "no eval")
             + f" | run dir: {run_dir}")
    log.info(f"next: python -m rlexp mode=play +checkpoint={run_dir} +video_dir=videos | "
             f"python -m rlexp mode=eval +checkpoint={run_dir} | python -m rlexp +resume={run_dir}")
    agent.envs.close()
    if _in_sweep():  # a trial of rlexp's sweeper gets every objective back (the float elsewhere)
        from rlexp.sweep import trial_metrics

        metrics = trial_metrics(mean, evaluator.rows if evaluator is not None else [], agent.steps,
                                summary["seconds"])
        if metrics is not None:
            return metrics
    return mean


def _choices() -> dict[str, str]:
    try:
        return {k: str(v) for k, v in HydraConfig.get().runtime.choices.items()}
    except ValueError:
        return {}


def _in_sweep() -> bool:
    from hydra.types import RunMode

    try:
        return HydraConfig.get().mode == RunMode.MULTIRUN
    except ValueError:
        return False


def _progress_mode(cfg: DictConfig) -> str:
    """Live bar on a terminal, log lines otherwise and in sweeps (many trials share one console)."""
    mode = str(cfg.run.progress)
    return "log" if mode == "auto" and _in_sweep() else mode


def make_tracker(cfg: DictConfig, run_dir: Path):
    """TensorBoard always; Weights & Biases with logger=wandb (grouped by sweep in --multirun)."""
    from rlexp.tracking import TensorBoard, Trackers, Wandb

    trackers = [TensorBoard(run_dir / "tb")]
    logger = cfg.get("logger") or {}
    if logger.get("name") == "wandb":
        group = Path(HydraConfig.get().sweep.dir).name if _in_sweep() else None
        settings = dict(OmegaConf.to_container(logger, resolve=True))
        settings["name"] = settings.pop("run_name", None)
        trackers.append(Wandb(settings, _run_config(cfg), run_dir, default_group=group))
    if _in_sweep():
        from rlexp.sweep import trial_reporter

        reporter = trial_reporter(int(float(cfg.run.max_steps)), on_eval=int(cfg.run.get("eval_interval") or 0) > 0)
        if reporter is not None:
            trackers.append(reporter)
    return Trackers(trackers)


def _mean_std(returns: list[float]) -> tuple[float, float]:
    import numpy as np

    return (float(np.mean(returns)), float(np.std(returns))) if returns else (float("nan"), float("nan"))


def eval_envs(cfg: DictConfig):
    """Envs for deterministic evaluation episodes (the agent resets them with its own evaluation seed, apart
    from the training envs' seeds)."""
    from rlexp.envs import env_from_config

    return env_from_config(cfg.env, cfg.seed, n_envs=min(int(cfg.run.eval_episodes), 32), vectorization="sync")


def evaluate(agent, cfg: DictConfig) -> list[float]:

    episodes = int(cfg.run.eval_episodes)
    if episodes <= 0:
        return []
    envs = eval_envs(cfg)
    try:
        return agent.evaluate(envs, episodes)
    finally:
        envs.close()


def play_or_eval(cfg: DictConfig) -> float:
    from rlexp.play import play, writable_dir

    ckpt = find_checkpoint(cfg, cfg.get("checkpoint"))
    run_cfg = _stored_config(ckpt, cfg)
    for key in ("video_dir", "frame_dir", "demo_dir"):  # fail before loading anything
        if cfg.get(key):
            writable_dir(cfg[key], key)
    if cfg.get("demo_dir"):
        from rlexp.demos import DATASET_ID

        if (Path(cfg.demo_dir).expanduser() / DATASET_ID).exists():
            raise UserError(f"+demo_dir={cfg.demo_dir} holds demonstrations already; pick a new directory")
    _setup_tensorflow(run_cfg)
    log.info(f"loaded {ckpt}")
    precision = int(run_cfg.agent.display_precision)
    if cfg.mode == "eval":
        agent = build_agent(run_cfg, n_envs=1)
        startup_done()
        agent.load(ckpt, weights_only=True)
        returns = evaluate(agent, run_cfg)
        mean, std = _mean_std(returns)
        log.info(f"eval: {mean:.{precision}f} ± {std:.{precision}f} over {len(returns)} episodes")
        return mean
    capture = bool(cfg.get("video_dir") or cfg.get("frame_dir"))
    if not cfg.get("render"):
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # off-screen rendering needs no display
    render_mode = "rgb_array" if capture else ("human" if cfg.get("render") else None)
    agent = build_agent(run_cfg, n_envs=1, render_mode=render_mode)
    startup_done()
    agent.load(ckpt, weights_only=True)
    name = ckpt.parent.parent.name
    recorder = None
    if cfg.get("demo_dir"):
        from rlexp.demos import DemoRecorder

        recorder = DemoRecorder()
    returns = play(agent, agent.envs, episodes=int(cfg.play.episodes), video_dir=cfg.get("video_dir"),
                   frame_dir=cfg.get("frame_dir"), frame_frequency=int(cfg.play.frame_frequency),
                   frame_delay=float(cfg.play.frame_delay), render=bool(cfg.get("render")), fps=int(cfg.play.fps),
                   name=name, recorder=recorder)
    agent.envs.close()
    if recorder is not None:
        path = recorder.write(_absolute(cfg.demo_dir), run_cfg.env.id,
                              type(agent).__name__, agent.observation_space, agent.action_space)
        log.info(f"demonstrations: {path} ({len(recorder.episodes)} episodes, Minari format); train from them "
                 f"with agent=dqfd agent.demos={cfg.demo_dir}")
    if cfg.get("video_dir") and (cfg.get("logger") or {}).get("name") == "wandb":
        from rlexp.tracking import Wandb

        settings = dict(OmegaConf.to_container(cfg.logger, resolve=True))
        settings["name"] = settings.pop("run_name", None) or f"{name}_play"
        tracker = Wandb(settings, {"checkpoint": str(ckpt), "mode": "play"}, Path(cfg.video_dir))
        try:
            tracker.video(Path(cfg.video_dir) / f"{name}.mp4")
        finally:
            tracker.close()
    return _mean_std(returns)[0]


def plot_runs(cfg: DictConfig) -> float:
    """mode=plot: +runs=[dirA,dirB] or a glob; seeds of one configuration are grouped (see rlexp.plotting)."""
    from rlexp.plotting import plot_runs as plot

    patterns = cfg.get("runs")
    if not patterns:
        raise UserError("mode=plot needs runs: +runs=[outputs/<date>/<run>,...] or +runs='outputs/*/*_ppo_cartpole'")
    patterns = [patterns] if isinstance(patterns, str) else [str(p) for p in patterns]
    base = _original_cwd()
    output = Path(cfg.get("output") or "runs.png")
    output = output if output.is_absolute() else base / output
    gamma = cfg.get("gamma")
    groups = plot(patterns, base, output, None if gamma is None else float(gamma))
    runs = sum(len(g.runs) for g in groups)
    log.info(f"plot: {output} ({runs} runs in {len(groups)} group(s)); statistics: {output.with_suffix('.md')}")
    return float(runs)


PRESET_GROUPS = ("agent", "env", "model", "buffer", "tuned", "logger", "sweep")


def init_presets(cfg: DictConfig) -> float:
    """mode=init +dir=DIR: copies of the shipped presets to edit; run them with --config-dir DIR, where a
    file of the same name replaces the shipped one. Existing files are kept."""
    from importlib import resources

    if not cfg.get("dir"):
        raise UserError("mode=init needs a directory: python -m rlexp mode=init +dir=myconf")
    target = _absolute(str(cfg.dir))
    if target.exists() and not target.is_dir():
        raise UserError(f"+dir={cfg.dir} is a file; pass a directory")
    shipped = resources.files("rlexp.conf")
    written = kept = 0
    files = [("", shipped.joinpath("agent_base.yaml"))]
    files += [(group, p) for group in PRESET_GROUPS for p in shipped.joinpath(group).iterdir() if p.name.endswith(".yaml")]
    for group, preset in files:
        path = target / group / preset.name
        if path.exists():
            kept += 1
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(preset.read_text())
        written += 1
    log.info(f"{written} presets copied to {target}" + (f" ({kept} existing files kept)" if kept else "")
             + f"; edit or add presets there and run: python -m rlexp --config-dir {cfg.dir} agent=... env=...")
    return float(written)


MODES = {"train": train, "play": play_or_eval, "eval": play_or_eval, "plot": plot_runs, "init": init_presets}


@hydra.main(version_base="1.3", config_path="pkg://rlexp.conf", config_name="config")
def main(cfg: DictConfig) -> float:
    """Compose the config, dispatch `mode`, return the objective (mean evaluation return)."""
    gc.disable()  # until `startup_done`: importing TensorFlow and building the agent only allocate
    from rlexp.agents.base import TrainingDiverged

    Started.value = True
    try:
        if cfg.mode not in MODES:
            raise UserError(f"mode={cfg.mode} is unknown; use one of {', '.join(MODES)}")
        from rlexp.checks import check_settings

        check_settings(cfg)
        return MODES[cfg.mode](cfg)
    except UserError as e:
        _fail(str(e), 2)
    except TrainingDiverged as e:
        _fail(f"training diverged: {e}; the last good checkpoint is in checkpoints/last.ckpt", 1)
    except OSError as e:  # disk full, permissions, ...: the previous checkpoint stays complete
        _fail(f"could not write {e.filename or 'a file'}: {e.strerror or e}; the previous checkpoint is intact "
              "(free space or fix permissions, then +resume)", 1)
    finally:  # a sweep's next trial in this process: this trial's objects can be collected again
        gc.unfreeze()
        gc.enable()


def _fail(message: str, code: int) -> None:
    """One line and an exit code; in a sweep the trial is recorded as failed with that line instead."""
    log.error(f"error: {message}")
    if _in_sweep():
        raise TrialFailed(message) from None
    sys.exit(code)


def cli() -> None:
    """The `rlexp` command: Hydra's own errors before the task starts (unknown group option, bad override
    syntax, missing config) are user input errors too, so they exit with 2 like ours."""
    # the agent and env presets pick the default network; an explicit model=auto means the same default
    sys.argv = [arg for arg in sys.argv if arg != "model=auto"]
    try:
        main()
    except SystemExit as e:
        if e.code == 1 and not Started.value:
            sys.exit(2)
        raise


if __name__ == "__main__":
    cli()
