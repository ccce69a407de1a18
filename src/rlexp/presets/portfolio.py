"""mode=autotune's portfolio: the values the agent is tuned with for other envs of the same kind (its tuned presets:
rlexp's, over RL Zoo's rows, and your own earlier autotunes; and RL Zoo's rows for env presets without one),
trained as the study's first trials after the baseline.
A study of ten trials seldom samples a working configuration of a dozen keys; values that work on a similar env
often do (portfolio warm-starting: Optuna's enqueue_trial with known-good configurations). The most similar env is
the same task with the other kind of actions (LunarLander-v3 for LunarLanderContinuous-v3: RL Zoo tunes both
with the same values), so such presets are candidates too, and come first."""
from __future__ import annotations

import dataclasses
import logging
import math
import re
from dataclasses import dataclass
from typing import Any, Callable

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
    same_task: bool = False  # an env of the pair's family (`env_family`), whatever its actions
    row: str | None = None  # RL Zoo's row it is (`file row`), where no tuned preset of the env holds it

    @property
    def label(self) -> str:
        """Where its values come from, as autotune names it: tuned/<name>.yaml, or the RL Zoo row."""
        if self.row is not None:
            return f"RL Zoo's row {self.row}"
        return f"tuned/{self.name}.yaml" + (" (yours)" if self.own else "")


def env_family(env_id: str) -> str:
    """An env id without its namespace, version and a `Continuous` suffix: LunarLanderContinuous-v3 and
    LunarLander-v3 are both LunarLander (the task with continuous or with discrete actions)."""
    name = re.sub(r"-v\d+$", "", env_id.split("/")[-1])
    return name.removesuffix("Continuous")


def tuned_presets(agent: str) -> list[tuple[str, str]]:
    """(tuned preset, env preset) of the agent, in every config source (Hydra's own listing of the group)."""
    from hydra.core.global_hydra import GlobalHydra

    from rlexp.presets.sources import preset_exists

    loader = GlobalHydra.instance().config_loader()
    names = loader.get_group_options("tuned")
    pairs = [(name, name[len(agent) + 1:]) for name in names if name.startswith(f"{agent}_")]
    return [(name, env) for name, env in pairs if env and preset_exists("env", env)]


def untuned_envs(agent: str) -> list[str]:
    """The env presets (but env=generic) without a tuned preset of the agent: their RL Zoo rows are candidates."""
    from hydra.core.global_hydra import GlobalHydra

    from rlexp.runs.dirs import GENERIC_ENV

    tuned = {env for _, env in tuned_presets(agent)}
    envs = GlobalHydra.instance().config_loader().get_group_options("env")
    return [env for env in envs if env not in tuned and env != GENERIC_ENV]


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


def set_keys(path: Any) -> set[str]:
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


def row_keys(row: Any) -> set[str]:
    """The hyperparameters an RL Zoo row sets (translated): its agent and buffer keys and env.n_envs."""
    from rlexp.presets.zoo import translate

    sections = translate(row)
    return ({f"agent.{key}" for key in sections["agent"]} | {f"buffer.{key}" for key in sections.get("buffer", {})}
            | {"env.n_envs"})


BUDGET_KEYS = ("buffer.initial_size",)  # shape the study's rungs (autotune sizes them from the pair's): kept unless searched


def candidates(agent: str, env_id: str, kind: str, keys: set[str], seed: int) -> list[Candidate]:
    """The agent's tuned presets for envs of `kind` (<actions>_<observations>) other than `env_id`, and for envs of
    its family (`env_family`) with the other kind of actions."""
    from hydra import compose
    from hydra.core.hydra_config import HydraConfig

    from rlexp.presets.fallbacks import env_kind
    from rlexp.presets.sources import hydra_preset
    from rlexp.presets.zoo.merge import merge_zoo, zoo_row

    found = []
    sources = [(name, env, True) for name, env in tuned_presets(agent)]
    sources += [(f"{agent}_{env}", env, False) for env in untuned_envs(agent)]
    for name, env, tuned in sources:
        path, own = hydra_preset("tuned", name) if tuned else (None, False)
        try:
            config = compose(config_name=HydraConfig.get().job.config_name,
                             overrides=[f"agent={agent}", f"env={env}"], return_hydra_config=True)
            row = None if own else zoo_row(agent, config)[0]
            if not tuned and row is None:
                continue  # an env preset with neither a tuned preset nor a row of the agent
            other_kind, same_task = env_kind(config.env, seed), env_family(str(config.env.id)) == env_family(env_id)
            observations_differ = other_kind.split("_")[1] != kind.split("_")[1]
            if str(config.env.id) == env_id or observations_differ or (other_kind != kind and not same_task):
                continue
            wanted = keys | ({key for key in set_keys(path) if key not in BUDGET_KEYS} if tuned else set())
            if row is not None:  # a shipped preset is what rlexp sets over the env's RL Zoo row: the row's values too
                config = merge_zoo(config, row, [], {}, over=OmegaConf.load(path) if tuned else None)
                wanted |= {key for key in row_keys(row) if key not in BUDGET_KEYS}
        except Exception as error:  # noqa: BLE001 - a preset that doesn't compose, an env this machine can't make
            # (no MuJoCo, no ROMs): not a candidate; said aloud for your own presets
            (log.warning if own else log.debug)(f"portfolio: {name} skipped: {error}")
            continue
        group_choices = {k: str(v) for k, v in config.hydra.runtime.choices.items()}
        found.append(Candidate(name, own, int(float(config.run.max_steps)),
                               preset_values(config, group_choices, wanted), same_task,
                               None if tuned else row.source.split(" (")[0]))
    return found


def portfolio(agent: str, env_id: str, kind: str, keys: set[str], pair: Callable[[set[str]], dict[str, Any]],
              max_steps: int, limit: int, seed: int) -> list[Candidate]:
    """Up to `limit` candidates: the user's own presets first, then those of the pair's task (`env_family`), then
    those tuned for a training length nearest the pair's (run.max_steps), then by name. A candidate keeps the
    searched keys' values, and of the keys it sets itself those that differ from the pair's (`pair(keys)`: the
    pair's own values of those keys); one that would train what the pair trains untuned (trial 0), or what an
    earlier candidate trains, is skipped. Its searched
    values are the trial's Optuna parameters where they lie in the search space; the others, and the values of
    keys the study does not search, it trains as fixed values (as the baseline's)."""
    if limit <= 0 or not keys:
        return []
    ranked = sorted(candidates(agent, env_id, kind, keys, seed),
                    key=lambda c: (not c.own, not c.same_task, abs(math.log(max(c.max_steps, 1) / max(max_steps, 1))),
                                   c.name))
    chosen: list[Candidate] = []
    for candidate in ranked:
        untuned = pair(set(candidate.values))
        values = {k: v for k, v in candidate.values.items() if k in keys or untuned.get(k, object()) != v}
        if all(untuned.get(k, object()) == v for k, v in values.items()):
            continue  # the pair's own values: trial 0 trains them
        if all(values != c.values for c in chosen):
            chosen.append(dataclasses.replace(candidate, values=values))
        if len(chosen) == limit:
            break
    return chosen
