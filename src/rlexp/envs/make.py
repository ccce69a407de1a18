"""Vectorised gymnasium environments, with Atari preprocessing from gymnasium's own wrappers."""
from __future__ import annotations

import functools
import importlib
import inspect
from typing import Any, Callable, Mapping, Sequence

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleVectorEnv

from rlexp.envs.envpool import EnvPoolAtari
from rlexp.envs.envpool import available as envpool_available
from rlexp.envs.graph import GRAPH_ENVS
from rlexp.envs.spaces import is_structured
from rlexp.envs.wrappers import LifeLossInfo, current_target
from rlexp.errors import UserError


def _atari_wrappers(screen_size: int, frame_stack: int, max_frame: bool, noop_max: int, life_loss: bool) -> list:
    def preprocess(env: gym.Env) -> gym.Env:
        env = gym.wrappers.AtariPreprocessing(env, noop_max=noop_max, frame_skip=4 if max_frame else 1,
                                              screen_size=screen_size, grayscale_obs=True, scale_obs=False)
        if life_loss:
            env = LifeLossInfo(env)
        return gym.wrappers.FrameStackObservation(env, frame_stack) if frame_stack > 1 else env

    return [preprocess]


class SameStepCartPoleVectorEnv(CartPoleVectorEnv):
    """gymnasium's NumPy-vectorised CartPole (all envs advance in one array step, ~2.5x faster than 8
    env copies in a Python loop), restarting finished episodes in the same step like the other vector envs.

    gymnasium's version restarts them on the *next* step (which then yields a dummy transition); here the
    finished envs are reset right away from the same reset distribution and `info["final_obs"]` holds
    their last observation.
    """

    metadata = {**CartPoleVectorEnv.metadata, "autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}

    def step(self, action):
        obs, rewards, terminated, truncated, info = super().step(action)
        done = terminated | truncated
        if done.any():
            info = {"final_obs": obs, "_final_obs": done}
            self.state[:, done] = self.np_random.uniform(low=self.low, high=self.high, size=(4, int(done.sum())))
            self.steps[done] = 0
            self.prev_done[:] = False  # nothing left for the parent's next-step reset
            obs = self.state.T.astype(np.float32)
        return obs, rewards, terminated, truncated, info


NUMPY_VECTOR_ENVS = {"CartPole-v0": SameStepCartPoleVectorEnv, "CartPole-v1": SameStepCartPoleVectorEnv}
VECTOR_MIN_ENVS = 4  # a batched CartPole step costs ~50 µs whatever the count; an env copy ~10 µs


WRAPPER_MODULES = ("gymnasium.wrappers.", "rlexp.envs.wrappers.")  # where env.wrappers may come from (+ env.imports)
# env ids whose package registers them on import: (id prefix, module, what to install)
ID_PACKAGES = (("MiniGrid-", "minigrid", "minigrid", "'rlexp[minigrid]' (Farama's MiniGrid)"),
               ("BabyAI-", "minigrid", "minigrid", "'rlexp[minigrid]' (Farama's MiniGrid)"),
               ("Fetch", "rlexp.envs.robotics", "gymnasium_robotics", "'rlexp[robotics]' (Farama's gymnasium-robotics)"))


def package_of(env_id: str) -> tuple[str, str, str] | None:
    """(module to import, the package it needs, what to install) of an id a known package registers (MiniGrid's,
    gymnasium-robotics' Fetch envs), or None."""
    return next(((module, package, install) for prefix, module, package, install in ID_PACKAGES
                 if env_id.startswith(prefix)), None)


def register_package_ids(env_id: str) -> None:
    """Import the package that registers `env_id` (MiniGrid's ids: minigrid; Fetch: gymnasium-robotics), so no
    env.imports is needed; one line naming what to install where it is missing."""
    found = package_of(env_id)
    if found is None:
        return
    module, package, install = found
    try:
        importlib.import_module(module)
    except ImportError:
        raise UserError(f"env.id={env_id} is {package}'s: pip install {install}") from None


def import_env_modules(modules: Sequence[str], key: str = "env.imports") -> None:
    """Import the modules an env preset lists in `env.imports` (their gymnasium registrations run)."""
    for module in modules or ():
        try:
            importlib.import_module(str(module))
        except ImportError as e:
            raise UserError(f"{key}: module {module!r} can't be imported ({e}); install it or fix the name") from None


def env_wrappers(specs: Sequence[Mapping[str, Any]], imports: Sequence[str] = ()) -> list[Callable[[gym.Env], gym.Env]]:
    """`env.wrappers` entries ({_target_: a wrapper class, **its keyword arguments}) as functions env -> env.
    A target must be one of gymnasium's wrappers, rlexp.envs.wrappers, or come from a module in `env.imports`."""
    allowed = (*WRAPPER_MODULES, *(f"{m}." for m in imports or ()))
    wrappers = []
    for spec in specs or ():
        spec = dict(spec)
        target = current_target(str(spec.pop("_target_", "")))
        if not target.startswith(allowed):
            raise UserError(f"env.wrappers: _target_ {target!r} must be a gymnasium.wrappers or rlexp.envs.wrappers "
                            "class, or come from a module listed in env.imports")
        module, _, name = target.rpartition(".")
        try:
            cls = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError) as e:
            raise UserError(f"env.wrappers: _target_ {target!r} can't be found ({e})") from None
        wrappers.append(functools.partial(_wrap, cls, target, spec))
    return wrappers


def _wrap(cls: type, target: str, kwargs: dict[str, Any], env: gym.Env) -> gym.Env:
    try:
        return cls(env, **kwargs)
    except (TypeError, ValueError) as e:
        raise UserError(f"env.wrappers: {target} rejected its arguments: {e}") from None


def make_envs(env_id: str, n_envs: int = 1, seed: int | None = None, *, vectorization: str = "auto",
              preprocess: bool = False, max_frame: bool = True, frame_stack: int = 4, screen_size: int = 84,
              noop_max: int = 30, life_loss_terminal: bool = False, max_episode_steps: int | None = None,
              render_mode: str | None = None,
              kwargs: dict[str, Any] | None = None, imports: Sequence[str] = (),
              wrappers: Sequence[Mapping[str, Any]] = (), first_copy: gym.Env | None = None,
              **_: Any) -> gym.vector.VectorEnv:
    """Build `n_envs` copies of `env_id`, stepped together, reset with `seed`.

    Episodes restart automatically in the same step (`info["final_obs"]` holds the last observation).
    `vectorization`: sync (env copies stepped in this process), async (one worker process per env),
    vector (one NumPy-batched env, where gymnasium has one: CartPole), graph (one batched env that also
    steps inside TF graphs, where rlexp has one: Pendulum, CartPole; `rlexp.envs.graph`), envpool (Atari
    with preprocessing, emulated and preprocessed by EnvPool on its own threads; `rlexp.envs.envpool`) or
    auto (graph, else vector, where they exist and pay: CartPole from `VECTOR_MIN_ENVS` envs, Pendulum
    always; envpool for preprocessed Atari where EnvPool is installed; else sync). With `render_mode`
    vector, graph and envpool fall back to sync.
    `preprocess` applies Atari preprocessing (noop reset, max-and-skip, grayscale, resize, frame stack);
    with `life_loss_terminal` each step that loses a life is flagged in `info["life_loss"]` (`LifeLossInfo`).
    `imports`: modules to import first (their gymnasium registrations run); `env_id` may also be
    "module:EnvId-v0". `wrappers`: [{_target_: wrapper class, **kwargs}] applied to each env copy (see
    `env_wrappers`); envs with wrappers are built as sync or async env copies.
    `first_copy`: an env copy already made with these same values (the probe's, `probe_spaces`), taken as the first
    of sync copies instead of making one more; closed if the copies are not sync.
    """
    try:
        return _make_envs(env_id, n_envs, seed, vectorization, preprocess, max_frame, frame_stack, screen_size,
                          noop_max, life_loss_terminal, max_episode_steps, render_mode, kwargs, imports, wrappers,
                          first_copy)
    finally:
        if first_copy is not None and not getattr(first_copy, "_taken", False):
            first_copy.close()


def _make_envs(env_id: str, n_envs: int, seed: int | None, vectorization: str, preprocess: bool, max_frame: bool,
               frame_stack: int, screen_size: int, noop_max: int, life_loss_terminal: bool,
               max_episode_steps: int | None, render_mode: str | None, kwargs: dict[str, Any] | None,
               imports: Sequence[str], wrappers: Sequence[Mapping[str, Any]],
               first_copy: gym.Env | None) -> gym.vector.VectorEnv:
    from rlexp.checks.values import check_env_values, check_seed

    seed = check_seed(seed, "seed")
    counts = check_env_values(dict(n_envs=n_envs, frame_stack=frame_stack, screen_size=screen_size,
                                   noop_max=noop_max, max_episode_steps=max_episode_steps, preprocess=preprocess,
                                   max_frame=max_frame, life_loss_terminal=life_loss_terminal,
                                   vectorization=vectorization))
    n_envs, frame_stack, screen_size, noop_max, max_episode_steps = (counts[k] for k in (
        "n_envs", "frame_stack", "screen_size", "noop_max", "max_episode_steps"))
    if render_mode:  # MuJoCo's OpenGL backend is picked before MuJoCo is imported (by `imports` or the env)
        from rlexp.envs.rendering import offscreen_rendering

        offscreen_rendering(render_mode)
    import_env_modules(imports)
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise UserError(f"env.kwargs={kwargs!r} must be a mapping of the env's keyword arguments; set them one by one: "
                        "+env.kwargs.<name>=<value>")
    if ":" in env_id:  # gymnasium's module:EnvId form
        module, env_id = env_id.split(":", 1)
        import_env_modules([module], key="env.id")
    register_package_ids(env_id)
    extra_wrappers = env_wrappers(wrappers, imports)
    if life_loss_terminal and not preprocess:
        raise UserError("env.life_loss_terminal=true flags lost lives of Atari games: set env.preprocess=true too "
                        "(or env.life_loss_terminal=false)")
    if vectorization == "auto":
        plain = not (preprocess or kwargs or extra_wrappers)
        pays = n_envs >= VECTOR_MIN_ENVS and plain
        if env_id in GRAPH_ENVS and (pays or env_id not in NUMPY_VECTOR_ENVS and plain):
            vectorization = "graph"
        elif preprocess and not (kwargs or extra_wrappers or render_mode) and envpool_available(env_id, noop_max):
            vectorization = "envpool"
        else:
            vectorization = "vector" if env_id in NUMPY_VECTOR_ENVS and pays else "sync"
    if vectorization == "envpool" and render_mode:  # EnvPool doesn't render: play and videos use env copies
        vectorization = "sync"
    from rlexp.envs.copies import check_env_copies

    check_env_copies(env_id, n_envs, "sync" if render_mode and vectorization in ("vector", "graph") else vectorization)
    if vectorization == "envpool":
        if not preprocess or kwargs or extra_wrappers:
            raise UserError("env.vectorization=envpool runs Atari ids with env.preprocess=true and no env.kwargs "
                            "or env.wrappers; use env.vectorization=sync")
        envs = EnvPoolAtari(env_id, n_envs, seed, frame_stack=frame_stack, screen_size=screen_size,
                            noop_max=noop_max, max_frame=max_frame, max_episode_steps=max_episode_steps,
                            life_loss=life_loss_terminal)
        envs.reset(seed=seed)  # what the agent's own reset with this seed will return again
        return envs
    if vectorization in ("vector", "graph"):
        batched_envs, kind = {"vector": (NUMPY_VECTOR_ENVS, "NumPy-batched"),
                              "graph": (GRAPH_ENVS, "graph")}[vectorization]
        if env_id not in batched_envs or preprocess or kwargs or extra_wrappers:
            raise UserError(f"env.vectorization={vectorization}: there is no {kind} {env_id} (with these options); "
                            f"use env.vectorization=sync ({kind}: {', '.join(batched_envs)})")
        if not render_mode:  # rendering (play, videos) uses env copies
            spec = gym.spec(env_id)
            envs = batched_envs[env_id](n_envs, int(max_episode_steps or spec.max_episode_steps))
            envs.spec = spec
            envs.reset(seed=seed)
            return envs
        vectorization = "sync"
    make_kwargs = dict(kwargs or {})
    atari = []
    if preprocess:
        make_kwargs.setdefault("frameskip", 1)  # AtariPreprocessing does the skipping
        atari = _atari_wrappers(screen_size, frame_stack, max_frame, noop_max, life_loss_terminal)
    if max_episode_steps:
        make_kwargs["max_episode_steps"] = int(max_episode_steps)
    if render_mode:
        make_kwargs["render_mode"] = render_mode
    try:
        gym.spec(env_id)
    except gym.error.Error as e:
        raise UserError(f"env.id={env_id!r} is not a registered gymnasium id ({e}); "
                        "pick a preset (env=cartpole, env=pong, ...) or a registered id") from None
    except ModuleNotFoundError as e:
        raise UserError(f"env.id={env_id!r} needs a package that is not installed ({e.name})") from None
    copy_wrappers = [*atari, *extra_wrappers,
                     FlattenStructured.wrap if vectorization == "sync" else FlattenStructured.wrap_marked]
    try:
        if first_copy is not None and vectorization == "sync":
            envs = sync_copies(first_copy, env_id, n_envs, copy_wrappers, make_kwargs)
        else:
            envs = gym.make_vec(env_id, num_envs=n_envs, vectorization_mode=vectorization, wrappers=copy_wrappers,
                                vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}, **make_kwargs)
    except (gym.error.DependencyNotInstalled, ModuleNotFoundError, ImportError) as e:
        raise UserError(f"env.id={env_id!r} can't be built: {e}") from None
    except (TypeError, ValueError, gym.error.Error) as e:
        if not kwargs or render_mode and "render_mode" in str(e):
            raise
        raise UserError(rejected_kwargs(env_id, dict(kwargs), e)) from None
    envs.reset(seed=seed)
    if isinstance(envs, gym.vector.SyncVectorEnv):
        envs.structured_observation_space = getattr(envs.envs[0], "structured_space", None)
    else:  # worker processes: every copy has the attribute (`wrap_marked`)
        envs.structured_observation_space = envs.get_attr("structured_space")[0]
    return envs


def sync_copies(first_copy: gym.Env, env_id: str, n_envs: int, copy_wrappers: Sequence[Callable],
                make_kwargs: dict[str, Any]) -> gym.vector.SyncVectorEnv:
    """What `gym.make_vec(..., vectorization_mode="sync")` builds, with `first_copy` as its first copy."""
    import dataclasses

    def new_copy() -> gym.Env:
        env = gym.make(env_id, **make_kwargs)
        for wrap in copy_wrappers:
            env = wrap(env)
        return env

    envs = gym.vector.SyncVectorEnv([lambda: first_copy, *[new_copy] * (n_envs - 1)],
                                    autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    first_copy._taken = True  # type: ignore[attr-defined]
    spec = gym.spec(env_id)
    envs.spec = dataclasses.replace(spec, kwargs={**spec.kwargs, **make_kwargs, "vectorization_mode": "sync",
                                                  **({"num_envs": n_envs} if n_envs != 1 else {})})
    return envs


def rejected_kwargs(env_id: str, kwargs: dict[str, Any], error: Exception) -> str:
    """One line for env.kwargs that `env_id`'s constructor refused, with the arguments it takes."""
    reason = str(error).split(" was raised from the environment creator")[0]
    takes = ""
    try:
        creator = gym.spec(env_id).entry_point
        if isinstance(creator, str):
            creator = gym.envs.registration.load_env_creator(creator)
        names = [name for name, p in inspect.signature(creator).parameters.items()
                 if name != "render_mode" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        takes = f"; {env_id} takes {', '.join(names)}" if names else f"; {env_id} takes no keyword arguments"
    except (gym.error.Error, ImportError, AttributeError, TypeError, ValueError):
        pass
    return (f"env.kwargs={kwargs}: {env_id} rejected them ({reason}){takes}; fix or remove them "
            "(~env.kwargs.<name> removes one)")


class FlattenStructured(gym.wrappers.FlattenObservation):
    """gymnasium's FlattenObservation for Dict/Tuple observations, keeping the original space (the model
    splits the flat vector into its parts again: `observation_parts`)."""

    def __init__(self, env: gym.Env) -> None:
        self.structured_space = env.observation_space
        super().__init__(env)

    @classmethod
    def wrap(cls, env: gym.Env) -> gym.Env:
        return cls(env) if is_structured(env.observation_space) else env

    @classmethod
    def wrap_marked(cls, env: gym.Env) -> gym.Env:
        """`wrap`, other envs marked with `structured_space = None` (readable through a vector env's get_attr)."""
        return cls(env) if is_structured(env.observation_space) else StructureMarker(env)


class StructureMarker(gym.Wrapper):
    """An env whose observations are not Dict/Tuple (see `FlattenStructured.wrap_marked`)."""

    structured_space = None


def stepping(envs: gym.vector.VectorEnv) -> str:
    """How `envs` step, as a run's first lines say it: '8 envs on EnvPool', '1 env in-process', ..."""
    from rlexp.envs.graph import GraphVectorEnv

    if isinstance(envs, EnvPoolAtari):
        how = "on EnvPool"
    elif isinstance(envs, GraphVectorEnv):
        how = "stepped inside TensorFlow graphs"
    elif isinstance(envs, gym.vector.AsyncVectorEnv):
        how = "in worker processes"
    elif isinstance(envs, gym.vector.SyncVectorEnv):
        how = "in-process"
    elif type(envs) in NUMPY_VECTOR_ENVS.values():
        how = "batched in NumPy"
    else:
        how = type(envs).__name__
    return f"{envs.num_envs:,} env{'' if envs.num_envs == 1 else 's'} {how}"


def env_from_config(env_cfg: Any, seed: int | None, **overrides: Any) -> gym.vector.VectorEnv:
    """`make_envs` from an `env` config group (a mapping with id, n_envs, preprocess, ...). The first request
    with the values of a probe (`probe_spaces`) takes the probe's env copy as its first copy."""
    params = dict(env_cfg)
    params.update(overrides)
    first_copy = None
    if _SPARE:  # the probe's copy is for the first envs made after it: taken if they match, else closed
        first_copy = _SPARE.pop(probe_key(env_cfg, seed, overrides), None)
        close_probe_copies()
    return make_envs(params.pop("id"), seed=seed, first_copy=first_copy, **params)


def close_probe_copies() -> None:
    """Close the probe's env copy that no envs took (a process that makes no envs after its checks)."""
    for spare in _SPARE.values():
        spare.close()
    _SPARE.clear()


_PROBED: dict[str, tuple[gym.Space, gym.Space]] = {}
_SPARE: dict[str, gym.Env] = {}  # the last probe's env copy, until envs with its values are made


def probe_key(env_cfg: Any, seed: int | None, overrides: Mapping[str, Any] | None = None) -> str:
    """The values that make one env copy what it is: all but the number of copies and their vectorisation."""
    import json

    from omegaconf import DictConfig, OmegaConf

    params = OmegaConf.to_container(env_cfg, resolve=True) if isinstance(env_cfg, DictConfig) else dict(env_cfg)
    params = {**params, **(overrides or {})}
    return json.dumps({k: v for k, v in params.items() if k not in ("n_envs", "vectorization")} | {"seed": seed},
                      sort_keys=True, default=str)


def probe_spaces(env_cfg: Any, seed: int | None) -> tuple[gym.Space, gym.Space]:
    """(observation space, action space) of one env of `env_cfg`, made once per process and config: the checks
    before a run (the env's kind for the fallback, the memory a large run takes) share that one copy, and the
    run's envs take it as their first copy (`env_from_config`). The number of copies and their vectorisation do
    not change the spaces, so they are not part of the key."""
    key = probe_key(env_cfg, seed)
    if key not in _PROBED:
        envs = env_from_config(env_cfg, seed, n_envs=1, vectorization="sync")  # (closes an earlier probe's copy)
        _PROBED[key] = envs.single_observation_space, envs.single_action_space
        _SPARE[key] = envs.envs[0]
        envs.closed = True  # its one copy lives on: gymnasium < 1.3 closes a vector env it collects unless closed
    return _PROBED[key]
