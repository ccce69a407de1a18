"""Run dirs and checkpoints: where a run writes, which checkpoint a command means, the config a run was trained
with, and what +resume may change; plus what Hydra says about the current command."""
from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import omegaconf
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from rlexp.errors import UserError

CHECKPOINT = Path("checkpoints") / "last.ckpt"
log = logging.getLogger("rlexp")
GENERIC_ENV = "generic"  # the env preset that takes any gymnasium id in env.id


def env_display_name(choice: str | None, env_id: str) -> str:
    """How run dirs and studies name an env: its preset's name (`cartpole`), or for env=generic the id it runs,
    usable as a file name: `MountainCar-v0`, `ALE/Pong-v5` -> `ALE-Pong-v5`, `my_envs:Corridor-v0` -> `Corridor-v0`."""
    if choice and str(choice) != GENERIC_ENV:
        return str(choice)
    name = str(env_id).rsplit(":", 1)[-1]
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.") or GENERIC_ENV


# run_name in conf/config.yaml (omegaconf 2.4, which Hydra 1.4 needs, renames register_new_resolver)
_register = OmegaConf.register_resolver if omegaconf.__version__ >= "2.4" else OmegaConf.register_new_resolver
_register("rlexp.env_name", env_display_name, replace=True)


def env_command(choice: str | None, env_id: str) -> str:
    """The env part of a command line that selects this env again: `env=cartpole`, `env=generic env.id=<id>`."""
    if choice and str(choice) != GENERIC_ENV:
        return f"env={choice}"
    return f"env={GENERIC_ENV} env.id={env_id}"


def run_config(cfg: DictConfig) -> dict[str, Any]:
    container = OmegaConf.to_container(cfg, resolve=True)
    container.pop("hydra", None)
    return container


def original_cwd() -> Path:
    try:
        return Path(HydraConfig.get().runtime.cwd)
    except ValueError:
        return Path.cwd()


def absolute(path: str | Path) -> Path:
    """A path from the command line, relative to the directory the command was started in."""
    path = Path(path).expanduser()
    return path if path.is_absolute() else original_cwd() / path


def find_checkpoint(cfg: DictConfig, explicit: str | None) -> Path:
    """The checkpoint to play: `+checkpoint` (a run dir or a .ckpt), else the newest matching run's."""
    from rlexp.agents.base import Agent

    if explicit:
        path = absolute(explicit)
        if path.is_dir():
            path = path / CHECKPOINT
        last = path.with_name(CHECKPOINT.name)
        if not path.exists() and path.name == "best.ckpt" and last.exists():
            log.info(f"{path} does not exist ({no_best_reason(last)}): using {last}")
            return last
        if not path.exists():
            raise UserError(f"+checkpoint={explicit}: {path} does not exist; pass a run dir "
                            "(outputs/<date>/<time>_<agent>_<env>) or a .ckpt file")
        return path
    for root in ("outputs", "multirun"):  # training runs first; a sweep's trials only where there is none
        candidates = [(ckpt.stat().st_mtime, ckpt) for ckpt in (original_cwd() / root).glob(f"**/{CHECKPOINT}")]
        for _, ckpt in sorted(candidates, reverse=True):
            try:
                stored = Agent.read_state(ckpt).get("config", {})
            except UserError as e:
                log.warning(f"warning: skipped a damaged checkpoint: {str(e).split('; ')[0]}")
                continue
            if stored.get("agent", {}).get("_target_") == cfg.agent._target_ and \
                    stored.get("env", {}).get("id") == cfg.env.id:
                if root == "multirun":
                    log.info(f"no training run of this agent and env under outputs/: the newest sweep trial's, "
                             f"{ckpt.parent.parent} (+checkpoint=<run dir> picks another)")
                return ckpt
    name = HydraConfig.get().runtime.choices
    raise UserError(f"no trained run of agent={name.get('agent')} on {cfg.env.id} under outputs/ or multirun/; "
                    "train first "
                    f"(python -m rlexp agent={name.get('agent')} {env_command(name.get('env'), cfg.env.id)}) "
                    "or pass +checkpoint=<run dir>")


def no_best_reason(last: Path) -> str:
    """Why a run has no best.ckpt, from its last checkpoint: no evaluation yet, or too few episodes."""
    from rlexp.agents.base import Agent

    state = Agent.read_state(last)
    config = state.get("config") or {}
    if int((config.get("run") or {}).get("eval_interval") or 0) > 0:
        return "no evaluation during training yet"
    window = (config.get("agent") or {}).get("reward_buffer_size", "?")
    return (f"a best needs a full agent.reward_buffer_size={window} window of episodes; the run has "
            f"{int(state.get('episodes', 0)):,}")


def stored_config(ckpt: Path, cfg: DictConfig, stored: dict[str, Any] | None = None) -> DictConfig:
    """The config a checkpoint was trained with (or `stored`, read from `ckpt`'s run otherwise), with this
    command's mode, play.* and explicit run.* settings."""
    from rlexp.agents.base import Agent

    stored = Agent.read_state(ckpt).get("config") if stored is None else stored
    if not stored:
        raise UserError(f"checkpoint {ckpt} has no stored config; it was not written by `python -m rlexp`")
    merged = with_legacy_defaults(OmegaConf.create(stored))
    for key in ("mode", "play"):
        merged[key] = cfg[key]
    merged.setdefault("run", cfg.run)
    for override in task_overrides():  # run.* keeps the stored values unless set on this command line
        key = override.split("=", 1)[0].lstrip("+~")
        if key.startswith("run."):
            OmegaConf.update(merged, key, OmegaConf.select(cfg, key), force_add=True)
    if cfg.mode == "eval" and not merged.run.get("eval_episodes"):
        raise UserError(f"mode=eval: run.eval_episodes={merged.run.get('eval_episodes')} (the run's own setting "
                        f"unless set here) evaluates nothing; pass run.eval_episodes={cfg.run.eval_episodes or 20}")
    return merged


# keys that run configs written before them lack, with the behaviour those runs had
LEGACY_DEFAULTS = {"env.life_loss_terminal": False, "run.eval_deterministic": True,
                   "agent.opt_rho": 0.99, "agent.opt_momentum": 0.0, "agent.opt_centered": False}
# the same for one agent's keys: {agent _target_: {key: value}}
GSDE_EXP = {"use_expln": False}
LEGACY_AGENT_DEFAULTS = {"rlexp.agents.TRPO": {"kl_reduction": "sum", **GSDE_EXP}, "rlexp.agents.PPO": GSDE_EXP,
                         "rlexp.agents.A2C": GSDE_EXP, "rlexp.agents.VPG": GSDE_EXP,
                         "rlexp.agents.SAC": {**GSDE_EXP, "clip_mean": 2.0}}


def with_legacy_defaults(config: DictConfig) -> DictConfig:
    """A stored run config with the keys it predates set to what they meant for it, and the module paths that
    moved since as they are named now (resume, eval, plot)."""
    for key, value in LEGACY_DEFAULTS.items():
        section, name = key.split(".")
        if section in config and name not in config[section]:
            OmegaConf.update(config, key, value, force_add=True)
    env = config.get("env")
    if env is not None and env.get("wrappers"):  # module paths that moved since (rlexp.wrappers.X)
        from rlexp.envs.wrappers import current_target

        for spec in env.wrappers:
            if isinstance(spec, DictConfig) and "_target_" in spec:
                spec._target_ = current_target(str(spec._target_))
    agent = config.get("agent")
    for name, value in LEGACY_AGENT_DEFAULTS.get(agent.get("_target_") if agent is not None else None, {}).items():
        if name not in agent:
            OmegaConf.update(config, f"agent.{name}", value, force_add=True)
    return config


def task_overrides() -> list[str]:
    try:
        return list(HydraConfig.get().overrides.task)
    except ValueError:
        return []


def flat(node: Any, prefix: str = "") -> dict[str, Any]:
    """{dotted key: leaf value} of a config section."""
    if isinstance(node, dict):
        return {k: v for key, sub in node.items() for k, v in flat(sub, f"{prefix}{key}.").items()}
    return {prefix[:-1]: node}


def check_resume_overrides(cfg: DictConfig, stored: DictConfig) -> None:
    """+resume continues a run with its own settings: this command's agent/env/model/buffer/seed values may
    repeat the run's (the command it was trained with), and only run.* may differ."""
    fixed = ("agent", "env", "model", "buffer", "seed")
    touched = {o.split("=", 1)[0].lstrip("+~") for o in task_overrides()}
    touched = {key for key in touched if key.split(".")[0] in fixed}
    here = flat({k: OmegaConf.to_container(cfg, resolve=True).get(k) for k in fixed})
    there = flat({k: OmegaConf.to_container(stored, resolve=True).get(k) for k in fixed})
    differ = sorted(k for k in set(here) | set(there) if any(k == t or k.startswith(f"{t}.") for t in touched)
                    and here.get(k) != there.get(k))
    if differ:
        shown = ", ".join(f"{k} (run: {there.get(k)!r}, here: {here.get(k)!r})" for k in differ[:3])
        raise UserError(f"+resume continues the run with its own settings, and these differ: {shown}"
                        f"{' ...' if len(differ) > 3 else ''}; drop them (only run.* can change on resume), or "
                        "start a new run from its weights with +init_from=<run dir>")


def new_run_dir(cfg: DictConfig) -> Path:
    """A fresh training run's dir name: the sweep's trial dir, else run_dir (outputs/<date>/<time>_<agent>_<env>,
    the env named by `env_display_name`), checked to be writable. Not made yet: `claim_run_dir` makes it once
    training starts."""
    from rlexp.runs.files import check_writable

    if in_sweep():
        run_dir = Path(HydraConfig.get().runtime.output_dir)
    else:
        run_dir = hydra_run_dir() or absolute(str(cfg.run_dir))
    check_writable(run_dir, run_dir_key(cfg))
    return run_dir


def hydra_run_dir() -> Path | None:
    """hydra.run.dir where the user set it (Hydra's way to choose a run's folder), else None: rlexp's default
    `.` leaves the choice to run_dir."""
    try:
        chosen = str(HydraConfig.get().run.dir)
    except ValueError:
        return None
    return None if chosen in (".", "") else absolute(chosen)


def drop_empty_hydra_run_dir() -> None:
    """Hydra makes hydra.run.dir before any task runs: a command that wrote nothing there (play, eval, a refused
    run) leaves no empty folder behind."""
    path = hydra_run_dir()
    if path is not None and path.is_dir() and not any(path.iterdir()):
        path.rmdir()


def run_dir_key(cfg: DictConfig) -> str:
    """The setting that names a fresh run's dir, as key=value for messages."""
    if in_sweep():
        return f"hydra.sweep.dir={HydraConfig.get().sweep.dir}"
    if hydra_run_dir() is not None:
        return f"hydra.run.dir={HydraConfig.get().run.dir}"
    return f"run_dir={cfg.run_dir}"


def claim_run_dir(run_dir: Path) -> Path:
    """Make the run dir `new_run_dir` named and return it; where another run holds that name (one started in the
    same second, even one that named it at the same moment), the next free `<name>_<n>`: the mkdir is the claim,
    so two runs never share a dir. A sweep's trial dir is its own."""
    if in_sweep():
        run_dir.mkdir(parents=True, exist_ok=True)
        return run_dir
    if run_dir == hydra_run_dir():  # the folder the user named, which Hydra made: that one or none
        run_dir.mkdir(parents=True, exist_ok=True)
        if any(run_dir.iterdir()):
            raise UserError(f"hydra.run.dir={HydraConfig.get().run.dir}: {run_dir} holds files already; continue "
                            f"its run with +resume={run_dir}, or pick an empty or new folder")
        return run_dir
    candidate, n = run_dir, 1
    while True:
        try:
            candidate.mkdir(parents=True)
            return candidate
        except FileExistsError:
            candidate, n = run_dir.with_name(f"{run_dir.name}_{n}"), n + 1


def unclaim_run_dir(run_dir: Path, made: list[Path]) -> None:
    """Undo `claim_run_dir` for a run refused before it wrote anything: the dir goes if it holds nothing but its
    (released) lock, and so do the empty folders of `made`, which the claim created, deepest first."""
    from rlexp.runs.lock import LOCK_NAME

    if run_dir.is_dir() and {p.name for p in run_dir.iterdir()} <= {LOCK_NAME}:
        (run_dir / LOCK_NAME).unlink(missing_ok=True)
        run_dir.rmdir()
    for folder in sorted(made, key=lambda p: len(p.parts), reverse=True):
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()


def write_run_config(run_dir: Path, cfg: DictConfig) -> None:
    """The composed config and this command's overrides in <run dir>/.hydra/ (Hydra's layout)."""
    from rlexp.runs.files import write_atomic

    config = OmegaConf.to_yaml(OmegaConf.create(run_config(cfg)))
    overrides = OmegaConf.to_yaml(OmegaConf.create(task_overrides()))
    write_atomic(run_dir / ".hydra" / "config.yaml", lambda f: f.write(config.encode()))
    write_atomic(run_dir / ".hydra" / "overrides.yaml", lambda f: f.write(overrides.encode()))


def choices() -> dict[str, str]:
    try:
        return {k: str(v) for k, v in HydraConfig.get().runtime.choices.items()}
    except ValueError:
        return {}


def in_sweep() -> bool:
    from hydra.types import RunMode

    try:
        return HydraConfig.get().mode == RunMode.MULTIRUN
    except ValueError:
        return False
