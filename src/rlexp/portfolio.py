"""mode=autotune's portfolio: the values the agent's tuned presets hold for other envs of the same kind (rlexp's,
from RL Zoo's tuned rows, and your own earlier autotunes), trained as the study's first trials after the baseline.
A study of ten trials seldom samples a working configuration of a dozen keys; values that work on a similar env
often do (portfolio warm-starting: Optuna's enqueue_trial with known-good configurations)."""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf

log = logging.getLogger("rlexp")


@dataclass
class Candidate:
    """A tuned preset of the agent on another env: its name, whether it is the user's own, its training length,
    and its values of the searched keys and of those it sets itself."""

    name: str
    own: bool
    max_steps: int
    values: dict[str, Any]


def tuned_presets(agent: str) -> list[tuple[str, str]]:
    """(tuned preset, env preset) of the agent, in every config source (Hydra's own listing of the group)."""
    from hydra.core.global_hydra import GlobalHydra

    from rlexp.fallback import preset_exists

    loader = GlobalHydra.instance().config_loader()
    names = loader.get_group_options("tuned")
    pairs = [(name, name[len(agent) + 1:]) for name in names if name.startswith(f"{agent}_")]
    return [(name, env) for name, env in pairs if env and preset_exists("env", env)]


def preset_values(config: DictConfig, group_choices: dict[str, str], keys: set[str]) -> dict[str, Any]:
    """A composed configuration's values of `keys` (a config group's: the preset it chose)."""
    values: dict[str, Any] = {}
    for key in sorted(keys):
        if key in ("model", "buffer"):
            if key in group_choices:
                values[key] = group_choices[key]
            continue
        value = OmegaConf.select(config, key, default=None)
        if isinstance(value, DictConfig):
            continue
        value = OmegaConf.to_container(value) if OmegaConf.is_config(value) else value
        if isinstance(value, (bool, int, float, str)) or (
                isinstance(value, list) and all(isinstance(v, (bool, int, float, str)) for v in value)):
            values[key] = value
    return values


def own_keys(path: Any) -> set[str]:
    """The hyperparameters a tuned preset sets: its agent, model and buffer keys, env.n_envs (the rest of env is
    the other env's own), and the model/buffer presets its `defaults` pick."""
    preset = OmegaConf.load(path)
    keys = {f"{section}.{key}" for section in ("agent", "model", "buffer")
            for key in (preset.get(section) or {}) if key != "_target_"}
    keys |= {"env.n_envs"} if "n_envs" in (preset.get("env") or {}) else set()
    for entry in preset.get("defaults") or []:
        if isinstance(entry, DictConfig):
            keys |= {group.split("/")[-1] for group in entry if group.split("/")[-1] in ("model", "buffer")}
    return keys


def candidates(agent: str, env_id: str, kind: str, keys: set[str], seed: int) -> list[Candidate]:
    """The agent's tuned presets for envs of `kind` (<actions>_<observations>) other than `env_id`."""
    from hydra import compose
    from hydra.core.hydra_config import HydraConfig

    from rlexp.fallback import env_kind, hydra_preset

    found = []
    for name, env in tuned_presets(agent):
        try:
            config = compose(config_name=HydraConfig.get().job.config_name,
                             overrides=[f"agent={agent}", f"env={env}"], return_hydra_config=True)
            if str(config.env.id) == env_id or env_kind(config.env, seed) != kind:
                continue
        except Exception as error:  # noqa: BLE001 - a preset that doesn't compose, an env this machine can't make
            log.debug(f"portfolio: tuned/{name}.yaml skipped: {error}")  # (no MuJoCo, no ROMs): not a candidate
            continue
        group_choices = {k: str(v) for k, v in config.hydra.runtime.choices.items()}
        path, own = hydra_preset("tuned", name)
        found.append(Candidate(name, own, int(float(config.run.max_steps)),
                               preset_values(config, group_choices, keys | own_keys(path))))
    return found


def portfolio(agent: str, env_id: str, kind: str, keys: set[str], baseline: dict[str, Any], max_steps: int,
              limit: int, seed: int) -> list[Candidate]:
    """Up to `limit` candidates, each with values unlike the baseline's and the earlier ones': the user's own
    presets first, then those tuned for a training length nearest the pair's (run.max_steps), then by name. A
    candidate's searched values are the trial's Optuna parameters where they lie in the search space; the others,
    and the values of keys the study does not search, it trains as fixed values (as the baseline's)."""
    if limit <= 0 or not keys:
        return []
    ranked = sorted(candidates(agent, env_id, kind, keys, seed),
                    key=lambda c: (not c.own, abs(math.log(max(c.max_steps, 1) / max(max_steps, 1))), c.name))
    chosen: list[Candidate] = []
    for candidate in ranked:
        if candidate.values != baseline and all(candidate.values != c.values for c in chosen):
            chosen.append(candidate)
        if len(chosen) == limit:
            break
    return chosen
