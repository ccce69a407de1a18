"""The chosen presets are complete (an env preset has every make_envs key, an agent preset a _target_, a model
preset layers), and where a chosen preset was read from."""
from __future__ import annotations

import inspect
from pathlib import Path

from omegaconf import DictConfig

from rlexp.errors import UserError


def preset_file(group: str, name: str) -> str:
    """Where the chosen preset `group/name.yaml` was read from (the first config source holding it)."""
    try:
        from hydra.core.hydra_config import HydraConfig

        sources = HydraConfig.get().runtime.config_sources
    except ValueError:
        return f"{group}/{name}.yaml"
    for source in sources:
        path = str(source.path)
        if source.schema == "file":
            candidate = Path(path) / group / f"{name}.yaml"
            if candidate.exists():
                return str(candidate)
        elif source.schema == "pkg":
            from importlib import resources

            try:
                if resources.files(path).joinpath(group, f"{name}.yaml").is_file():
                    return f"{group}/{name}.yaml (shipped with rlexp)"
            except (ModuleNotFoundError, TypeError):
                continue
    return f"{group}/{name}.yaml"


def check_presets(cfg: DictConfig, choices: dict[str, str]) -> None:
    """The chosen presets are complete: an env preset has every make_envs key (`defaults: [generic]`), an
    agent preset a _target_, a model preset layers."""
    from rlexp.envs.make import make_envs

    env_keys = {"id", "clip_rewards", *(p for p in inspect.signature(make_envs).parameters
                                        if p not in ("env_id", "seed", "render_mode", "first_copy", "_"))}
    given = set(cfg.env.keys())
    missing, unknown = sorted(env_keys - given), sorted(given - env_keys)
    where = preset_file("env", choices.get("env", "?"))
    if unknown:
        raise UserError(f"env preset {where}: unknown key {unknown[0]!r}; env keys are {', '.join(sorted(env_keys))}")
    if missing:
        raise UserError(f"env preset {where} lacks {', '.join(missing)}; start it with `defaults: [generic]` "
                        "(or the preset it varies)")
    check_env_id(cfg, choices)
    if "_target_" not in cfg.agent:
        raise UserError(f"agent preset {preset_file('agent', choices.get('agent', '?'))} has no _target_; start it "
                        "with `defaults: [ppo]` (the agent it tunes) or set _target_: rlexp.agents.<Agent>")
    if not cfg.model.get("layers"):
        raise UserError(f"model preset {preset_file('model', choices.get('model', '?'))} has no layers; "
                        "start from a copy of conf/model/mlp.yaml (python -m rlexp mode=init +dir=myconf)")


def check_env_id(cfg: DictConfig, choices: dict[str, str]) -> None:
    """env.id is the chosen env preset's own id (or the preset is generic): the preset's name picks the tuned preset
    and names the run, so an env.id of another env under it would train a mix of the two."""
    import sys

    from hydra_plugins.rlexp_searchpath import user_config_dir

    from rlexp.presets.sources import env_preset_for_id, preset_values
    from rlexp.runs.dirs import GENERIC_ENV

    choice, env_id = choices.get("env"), str(cfg.env.id)
    own = preset_values("env", choice).get("id") if choice and choice != GENERIC_ENV else None
    if own is None or str(own) == env_id:
        return
    preset = env_preset_for_id(env_id, user_config_dir(sys.argv[1:]))
    use = f"env={preset}, its preset" if preset else f"env={GENERIC_ENV} env.id={env_id} (any gymnasium id)"
    raise UserError(f"env.id={env_id}: env={choice} is the preset of {own} (its tuned presets and the run's name "
                    f"are {own}'s); train {env_id} with {use}")
