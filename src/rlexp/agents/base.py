"""Shared training machinery: env stepping, episode bookkeeping, the fit loop, checkpoints, evaluation.

Algorithms subclass a family's base (`on_policy.OnPolicyAgent`, `off_policy.OffPolicyAgent`), which subclass
`Agent`, and implement only their own maths:
`build` (models, optimizers), `train_iteration` (collect + update) and `policy` (actions for play).
"""
from __future__ import annotations

import collections
import json
import logging
import contextlib
import math
import signal
import threading
import time
from pathlib import Path
from typing import Any, Mapping

import gymnasium as gym
import numpy as np
import tensorflow as tf

from rlexp.agents.distributions import no_autograph
from rlexp.checkpoints import PREVIOUS, read_arrays, read_state
from rlexp.envs import is_image, is_structured, observation_parts, space_kind
from rlexp.errors import UserError
from rlexp.files import write_atomic
from rlexp.graph_envs import GraphVectorEnv
from rlexp.history import History, plot_history
from rlexp.memory import Need, check_fits, init_default
from rlexp.models import build_model, is_recurrent
from rlexp.normalize import Normalizer
from rlexp.progress import Progress
from rlexp.wrappers import with_lost_lives

log = logging.getLogger("rlexp")

MIXED_PRECISION = (False, True, "float16", "bfloat16")


def precision_policy(mixed_precision: bool | str, float16: bool = True) -> str:
    """The Keras dtype policy for run.mixed_precision: for True float16 on a GPU (where `float16`: the agent
    scales its losses) and bfloat16 otherwise."""
    if not mixed_precision:
        return "float32"
    if mixed_precision is True:
        return "mixed_float16" if float16 and tf.config.list_physical_devices("GPU") else "mixed_bfloat16"
    return f"mixed_{mixed_precision}"


@contextlib.contextmanager
def dtype_policy(name: str):
    """Keras's global dtype policy set to `name` while models are built, then restored."""
    import keras

    previous = keras.mixed_precision.dtype_policy()
    keras.mixed_precision.set_dtype_policy(name)
    try:
        yield
    finally:
        keras.mixed_precision.set_dtype_policy(previous)


class TrainingDiverged(RuntimeError):
    """A loss or parameter became NaN or infinite."""


@contextlib.contextmanager
def stop_on_interrupt(stop: list[bool]):
    """Ctrl-C (SIGINT) or SIGTERM sets stop[0]: the loop ends at the next iteration boundary with a consistent
    checkpoint. A second Ctrl-C interrupts at once (the previous checkpoint stays loadable)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        if stop[0] and signum == signal.SIGINT:
            raise KeyboardInterrupt
        stop[0] = True
        log.warning("stopping after this iteration and saving a checkpoint (Ctrl-C again to stop at once)")

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def load_model_preset(name: str) -> dict[str, Any]:
    """Read conf/model/<name>.yaml from the installed package."""
    from importlib import resources

    import yaml

    path = resources.files("rlexp.conf").joinpath("model", f"{name}.yaml")
    if not path.is_file():
        raise UserError(f"model preset {name!r} does not exist (see conf/model/)")
    return yaml.safe_load(path.read_text())


class Agent:
    """Base agent: owns the loop (collect, train, log, save); algorithms override what differs.

    Args:
        envs: a gymnasium vector env (see `rlexp.envs.make_envs`).
        model: a model preset (mapping) or preset name; None or 'auto' picks one from the observations.
        buffer: a replay buffer (off-policy agents).
        seed: seeds NumPy, TensorFlow, Keras's initialisers and the envs' resets, and turns on TensorFlow's
            op determinism: same-seed runs give the same weights and history (None: nondeterministic).
        gamma: discount factor.
        lr, beta1, beta2, opt_epsilon: Adam's learning rate and parameters.
        lr_schedule: 'constant' or 'linear' (decays to 0 at the fit's max_steps).
        schedule_steps: env steps over which linear schedules decay to 0 (None: the fit's max_steps). Set it
            to stop a run partway through a longer schedule, e.g. the first 10M frames of RL Zoo's 40M.
        optimizer: 'adam' or 'rmsprop' (RMSprop with rho 0.99 and `opt_epsilon`, as in A2C papers and SB3).
        reward_buffer_size: episodes in the running mean reward; the best mean (best.ckpt) and plateaus count
            only means over a full window.
        divergence_monitoring_steps: steps after which plateau LR reduction and early stopping act (None: off).
        plateau_reduce_factor: LR multiplier when the mean reward has not improved for
            `plateau_reduce_patience` episodes; `early_stop_patience` such reductions in a row stop training.
        log_frequency: episodes between progress log lines.
        display_precision: decimals in printed rewards.
        quiet: print nothing while training.
        clip_rewards: learn from sign(reward) (returns are still reported unclipped).
        normalize_obs: normalise vector observations with running statistics (saved in checkpoints,
            applied in play and eval).
        normalize_reward: scale rewards by the running std of the discounted return.
        bootstrap_truncation: treat time-limit truncation as non-terminal (bootstrap from the final
            observation); False treats it as an episode end like termination.
        jit_compile: compile the update (gradient) steps with XLA.
        mixed_precision: compute in 16-bit floats with float32 variables, optimizer state, target networks,
            outputs and losses: True (float16 on a GPU, bfloat16 on a CPU), 'float16', 'bfloat16' or False (PPO,
            A2C, VPG); off-policy agents (DQN, DQfD, DDPG, TD3, SAC, NAF) compute in bfloat16 only.
    Dict and Tuple observations are flattened (gymnasium's FlattenObservation); the model splits them again.
    """

    action_spaces: tuple[str, ...] = ("discrete", "continuous")
    recurrent_models = False  # supports model presets with lstm/gru layers
    mixed_precision_support = False
    float16_support = False  # float16 compute needs loss scaling (on-policy `minimize`); bfloat16 does not
    auto_bfloat16 = False  # run.mixed_precision=auto may pick bfloat16 for vector models (see build.resolve_precision)
    off_policy = False
    default_models = {"image": "nature_cnn", "vector": "mlp"}  # what model=auto builds
    lr_schedules: tuple[str, ...] = ("constant", "linear")

    def __init__(self, envs: gym.vector.VectorEnv, model: Mapping[str, Any] | str | None = None,
                 buffer: Any = None, *, seed: int | None = None, gamma: float = 0.99, lr: float = 7e-4,
                 lr_schedule: str = "constant", schedule_steps: float | None = None, optimizer: str = "adam",
                 beta1: float = 0.9, beta2: float = 0.999, opt_epsilon: float = 1e-7, reward_buffer_size: int = 100,
                 divergence_monitoring_steps: int | None = None, plateau_reduce_factor: float = 0.9,
                 plateau_reduce_patience: int = 10, early_stop_patience: int = 3, log_frequency: int = 10,
                 display_precision: int = 2, quiet: bool = False, clip_rewards: bool = False,
                 normalize_obs: bool = False, normalize_reward: bool = False,
                 bootstrap_truncation: bool = True, jit_compile: bool = False,
                 mixed_precision: bool | str = False) -> None:
        autoreset = getattr(envs, "metadata", {}).get("autoreset_mode", gym.vector.AutoresetMode.SAME_STEP)
        if autoreset != gym.vector.AutoresetMode.SAME_STEP:
            raise UserError(f"rlexp needs vector envs that reset in the step an episode ends: build them with "
                            f"rlexp.envs.make_envs, or gym.make_vec(..., vector_kwargs={{'autoreset_mode': "
                            f"gym.vector.AutoresetMode.SAME_STEP}}) (got {autoreset})")
        from rlexp.checks import check_seed

        seed = check_seed(seed)
        if seed is not None:  # Keras initialisers, Python's and NumPy's generators, deterministic ops (as the CLI)
            import keras

            keras.utils.set_random_seed(int(seed))
            tf.config.experimental.enable_op_determinism()
        if is_structured(envs.single_observation_space):
            raise UserError("Dict/Tuple observations: build the envs with rlexp.envs.make_envs, which flattens them "
                            "for the agent (the model splits them into their parts again)")
        # Dict/Tuple observations arrive flattened by make_envs, which keeps their structure here
        self.structured_space = getattr(envs, "structured_observation_space", None)
        self.obs_parts = observation_parts(self.structured_space) if self.structured_space is not None else None
        self.envs = envs
        self.n_envs = envs.num_envs
        self.observation_space = envs.single_observation_space
        self.action_space = envs.single_action_space
        self.action_kind = space_kind(self.action_space)
        if self.action_kind not in self.action_spaces:
            raise UserError(f"{type(self).__name__} does not support {self.action_kind} action spaces "
                            f"({self.action_space})")
        for name, value in dict(gamma=gamma, lr=lr).items():
            if not 0 < float(value) <= 1:
                raise UserError(f"agent.{name}={value} must be in (0, 1]")
        if lr_schedule not in self.lr_schedules:
            raise UserError(f"agent.lr_schedule={lr_schedule!r} must be one of {', '.join(self.lr_schedules)} "
                            f"for {type(self).__name__}")
        if optimizer not in ("adam", "rmsprop"):
            raise UserError(f"agent.optimizer={optimizer!r} must be 'adam' or 'rmsprop'")
        self.gamma, self.lr, self.lr_schedule, self.optimizer_name = float(gamma), float(lr), lr_schedule, optimizer
        self.beta1, self.beta2, self.opt_epsilon = float(beta1), float(beta2), float(opt_epsilon)
        if schedule_steps is not None and float(schedule_steps) < 1:
            raise UserError(f"agent.schedule_steps={schedule_steps} must be at least 1 (or null: run.max_steps)")
        self.schedule_steps = None if schedule_steps is None else int(float(schedule_steps))
        self.reward_buffer_size = int(reward_buffer_size)
        self.divergence_monitoring_steps = divergence_monitoring_steps
        self.plateau_reduce_factor, self.plateau_reduce_patience = float(plateau_reduce_factor), int(plateau_reduce_patience)
        self.early_stop_patience = int(early_stop_patience)
        self.log_frequency, self.display_precision, self.quiet = log_frequency, int(display_precision), bool(quiet)
        self.clip_rewards = bool(clip_rewards)
        self.bootstrap_truncation = bool(bootstrap_truncation)
        self.seed = seed
        self.buffer = buffer

        self.image_obs = is_image(self.observation_space)
        self.obs_dtype = np.uint8 if self.image_obs else np.float32
        self.jit_compile = bool(jit_compile)
        if normalize_obs and self.image_obs:
            raise UserError("agent.normalize_obs=true is for vector observations; image observations are scaled "
                            "to [0, 1] already")
        self.normalizer = Normalizer(tuple(self.observation_space.shape), self.n_envs, self.gamma,
                                     bool(normalize_obs), bool(normalize_reward))
        self.obs_shape = tuple(self.observation_space.shape)
        self.n_actions = int(self.action_space.n) if self.action_kind == "discrete" else int(np.prod(self.action_space.shape))
        if self.action_kind == "multi_discrete" and len(self.action_space.shape) != 1:
            raise UserError(f"MultiDiscrete actions must be one-dimensional (got shape {self.action_space.shape})")
        self.model_preset = self._resolve_model(model)
        check_fits(type(self).memory_needs(self.observation_space, self.action_space, self.n_envs, vars(self),
                                           buffer, self.model_preset))
        self.recurrent = is_recurrent(self.model_preset)
        if self.recurrent and not self.recurrent_models:
            raise UserError(f"model={self.model_preset.get('name')} has recurrent (lstm/gru) layers, which "
                            f"{type(self).__name__} does not support (PPO, A2C and VPG do); pick another model")
        if mixed_precision not in MIXED_PRECISION:
            raise UserError(f"run.mixed_precision={mixed_precision!r} must be one of "
                            f"{', '.join(map(str, MIXED_PRECISION))}")
        if mixed_precision and not self.mixed_precision_support:
            raise UserError(f"run.mixed_precision is supported by PPO, A2C, VPG and the off-policy agents, not "
                            f"{type(self).__name__}")
        if mixed_precision == "float16" and not self.float16_support:
            raise UserError(f"run.mixed_precision=float16 needs loss scaling, which {type(self).__name__} does not "
                            "do; use run.mixed_precision=bfloat16")
        self.precision = precision_policy(mixed_precision, self.float16_support)

        self.rng = np.random.default_rng(seed)
        # without a seed, one from the OS's entropy (from_non_deterministic_state refuses to run once an earlier
        # seeded agent has turned op determinism on)
        tf_seed = seed if seed is not None else int(np.random.SeedSequence().entropy % 2**63)
        self.tf_rng = tf.random.Generator.from_seed(tf_seed)
        if buffer is not None:
            buffer.rng = self.rng

        # progress state (saved in checkpoints)
        self.steps = 0
        self.episodes = 0
        self.train_time = 0.0
        self.best_reward = -math.inf  # best running mean reward
        self.rewards: collections.deque[float] = collections.deque(maxlen=self.reward_buffer_size)
        self.lr_scale = 1.0  # plateau reductions
        self.adaptive_scale = 1.0  # lr_schedule=kl_adaptive
        self.plateau_count = self.early_stop_count = 0
        self.history = History()
        self.max_steps = 1
        self.pause_step: int | None = None  # a fused call stops here too (the next evaluation during training)

        self._episode_returns = np.zeros(self.n_envs)
        self._finished: list[tuple[int, float]] = []
        self._obs = self._reset_envs(seed)
        with dtype_policy(self.precision):
            self.build()

    # ----- to implement in algorithms -------------------------------------------------------------
    def build(self) -> None:
        """Create models, optimizers and graph functions."""
        raise NotImplementedError  # abstract

    def train_iteration(self) -> dict[str, float]:
        """Collect experience (through `env_step`) and update; return scalar metrics (losses)."""
        raise NotImplementedError  # abstract

    def policy(self, obs: tf.Tensor) -> tf.Tensor:
        """Deterministic actions for a batch of observations (play and eval with run.eval_deterministic)."""
        raise NotImplementedError  # abstract

    def sample_policy(self, obs: tf.Tensor, rng: tf.random.Generator) -> tf.Tensor:
        """Actions drawn from the agent's stochastic policy with `rng`, for stochastic evaluation (RL Zoo's
        --stochastic). Agents whose policy is deterministic (TD3, DDPG, NAF) act as `policy`."""
        return self.policy(obs)

    def models(self) -> dict[str, Any]:
        return {"model": self.model}

    def optimizers(self) -> dict[str, Any]:
        return {"model": self.optimizer}

    def extra_variables(self) -> dict[str, tf.Variable]:
        """tf.Variables saved in checkpoints besides model weights and optimizer state."""
        return {}

    def resume_variables(self) -> dict[str, tf.Variable]:
        """Training-only tf.Variables (e.g. exploration noise per env): in full checkpoints, restored on resume."""
        return {}

    @classmethod
    def memory_needs(cls, observation_space: gym.Space, action_space: gym.Space, n_envs: int,
                     params: Mapping[str, Any], buffer: Any, model: Mapping[str, Any]) -> list[Need]:
        """The large allocations of a run with these spaces, `n_envs` envs, constructor arguments `params`
        (missing ones: their defaults), replay `buffer` and model preset, estimated before any is made
        (rlexp.memory): here the buffer's storage; families add theirs."""
        if buffer is None or not hasattr(buffer, "memory_need"):
            return []
        n_steps = int(params.get("n_steps") or init_default(cls, "n_steps", 1))
        return [buffer.memory_need(observation_space, action_space, n_envs, n_steps)]

    # ----- building blocks ------------------------------------------------------------------------
    @classmethod
    def resolve_model(cls, model: Mapping[str, Any] | str | None, image_obs: bool) -> dict[str, Any]:
        """A model preset (mapping or name); None or 'auto' (or no layers): the default for the observations."""
        if model is None or isinstance(model, str):
            name = model or "auto"
            model = load_model_preset(name) if name != "auto" else {"name": "auto"}
        model = dict(model)
        if model.get("name") == "auto" or not model.get("layers"):
            kind = "image" if image_obs else "vector"
            model = load_model_preset(model.get(kind) or cls.default_models[kind])
        return model

    def _resolve_model(self, model: Mapping[str, Any] | str | None) -> dict[str, Any]:
        return self.resolve_model(model, self.image_obs)

    def build_model(self, heads: Mapping[str, int], name: str = "model", preset: Mapping[str, Any] | None = None,
                    extra_inputs: int = 0, latent_of: str | None = None):
        """A Keras model from the model preset with the given output heads (name -> units).

        extra_inputs: features appended to (vector) observations, e.g. the action of a Q(s, a) critic.
        """
        if extra_inputs:
            if len(self.obs_shape) != 1:
                raise UserError(f"{type(self).__name__} needs vector observations, got shape {self.obs_shape}")
            return build_model(preset or self.model_preset, (self.obs_shape[0] + extra_inputs,), heads, name=name)
        channels_first = self.image_obs and len(self.obs_shape) == 3 and self.obs_shape[0] < self.obs_shape[-1]
        return build_model(preset or self.model_preset, self.obs_shape, heads, input_dtype=self.obs_dtype,
                           channels_first=channels_first, name=name, latent_of=latent_of, parts=self.obs_parts)

    def make_optimizer(self):
        """Keras's Adam or RMSprop, with fused update kernels (rlexp.optimizers)."""
        from rlexp.optimizers import FusedAdam, FusedRMSprop

        if self.optimizer_name == "rmsprop":
            return FusedRMSprop(learning_rate=self.lr, rho=0.99, epsilon=self.opt_epsilon)
        return FusedAdam(learning_rate=self.lr, beta_1=self.beta1, beta_2=self.beta2, epsilon=self.opt_epsilon)

    def current_lr(self, steps: int | None = None) -> float:
        """The learning rate at `steps` env steps (default: now)."""
        frac = self.schedule_fraction(self.lr_schedule, self.steps if steps is None else steps)
        return self.lr * frac * self.lr_scale * self.adaptive_scale

    def schedule_fraction(self, schedule: str, steps: int) -> float:
        """1 for a constant schedule; for 'linear' the fraction of the schedule left at `steps` (RL Zoo's `lin_`)."""
        if schedule != "linear":
            return 1.0
        return max(1.0 - steps / max(self.schedule_steps or self.max_steps, 1), 0.0)

    def _apply_lr(self) -> None:
        lr = self.current_lr()
        if lr != getattr(self, "_applied_lr", None):
            for opt in self.optimizers().values():
                opt.learning_rate = lr
            self._applied_lr = lr

    def _reset_envs(self, seed: int | None, update_statistics: bool = True) -> np.ndarray:
        obs, _ = self.envs.reset(seed=seed)
        self._episode_returns[:] = 0
        self._raw_obs = obs
        return self.normalizer.obs(obs, update=update_statistics).astype(self.obs_dtype, copy=False)

    def resume_seed(self) -> int | None:
        """The env seed for a run resumed at `self.steps`: derived from the run's seed and the step, so the
        episodes after a resume are new ones, not a replay of the run's first episodes."""
        if self.seed is None:
            return None
        return int(np.random.SeedSequence([int(self.seed), self.steps]).generate_state(1)[0])

    def env_step(self, actions: np.ndarray) -> tuple[np.ndarray, ...]:
        """Step all envs; track episodes. Returns obs, rewards, terminated, truncated, next_obs.

        `next_obs` is the observation each transition led to (the final one at episode ends, whereas
        `obs` is already the first observation of the next episode there). Observations and rewards are
        normalised (with `normalize_obs` / `normalize_reward`); `raw_transition` keeps this step's
        (rewards, next_obs) as the env gave them (rewards sign-clipped with `clip_rewards`) and `_raw_obs`
        the raw `obs`, for replay buffers, which store raw data (see `OffPolicyAgent.store_step`).
        """
        env_actions = actions
        if self.action_kind == "multi_discrete":
            env_actions = actions + self.action_space.start
        elif self.action_kind == "continuous":
            # np.clip's result, at half its cost on a few actions
            env_actions = np.minimum(np.maximum(actions, self.action_space.low), self.action_space.high)
        obs, rewards, terminated, truncated, info = self.envs.step(env_actions)
        self._episode_returns += rewards
        dones = terminated | truncated
        next_obs = obs
        if dones.any():
            next_obs = obs.copy()
            for i in np.flatnonzero(dones):
                next_obs[i] = info["final_obs"][i]
                self._finished.append((self.steps + int(i) + 1, float(self._episode_returns[i])))
                self._episode_returns[i] = 0.0
        self.steps += self.n_envs
        self.episode_ends = dones  # whole episodes (games), also where a lost life ends the bootstrap
        self._raw_obs, self.raw_transition = obs, (np.sign(rewards) if self.clip_rewards else rewards, next_obs)
        same = next_obs is obs
        obs = self.normalizer.obs(obs, update=True).astype(self.obs_dtype, copy=False)
        next_obs = obs if same else self.normalizer.obs(next_obs).astype(self.obs_dtype, copy=False)
        self._obs = obs
        rewards = self.normalizer.reward(rewards, dones)
        if self.clip_rewards:
            rewards = np.sign(rewards)
        if not self.bootstrap_truncation:
            terminated, truncated = dones, np.zeros_like(truncated)
        terminated = with_lost_lives(terminated, info)  # env.life_loss_terminal: no bootstrap at a lost life
        return obs, rewards.astype(np.float32), terminated, truncated, next_obs

    # ----- stepping a GraphVectorEnv inside a graph -------------------------------------------------
    @property
    def steps_in_graph(self) -> bool:
        """Whether graph loops step the envs with TF ops: a `GraphVectorEnv` and no (NumPy) normaliser."""
        return isinstance(self.envs, GraphVectorEnv) and not (self.normalizer.normalize_obs or
                                                              self.normalizer.normalize_reward)

    def graph_steps_begin(self, max_steps: int) -> None:
        """Before a graph call with at most `max_steps` `graph_env_step`s: hand the env state to TF variables."""
        if not hasattr(self, "_graph_log"):
            self._graph_log = tf.Variable(tf.zeros((max_steps, 2, self.n_envs), tf.float64))  # rewards, dones
            self._graph_log_rows = tf.Variable(0)
        if max_steps > self._graph_log.shape[0]:
            raise ValueError(f"{max_steps} env steps per graph call, more than the log's "
                             f"{self._graph_log.shape[0]} rows (sized by the first call)")
        self._graph_log_rows.assign(0)
        self.envs.to_graph()

    def graph_steps_end(self) -> None:
        """After that call: env state, step count and episode bookkeeping back in Python, as `env_step` does
        them (returns are summed in the same order)."""
        self.envs.from_graph()
        log = self._graph_log[: int(self._graph_log_rows)].numpy()
        rewards, dones = log[:, 0], log[:, 1] > 0
        finished = []
        for i in range(self.n_envs):
            start, running = 0, self._episode_returns[i]
            for t in np.flatnonzero(dones[:, i]):
                ret = np.cumsum(np.concatenate([[running], rewards[start:t + 1, i]]))[-1]
                finished.append((self.steps + int(t) * self.n_envs + i + 1, float(ret)))
                start, running = t + 1, 0.0
            self._episode_returns[i] = np.cumsum(np.concatenate([[running], rewards[start:, i]]))[-1]
        self._finished.extend(sorted(finished))
        self.steps += len(log) * self.n_envs

    def call_graph_loop(self, fn, *args: Any, max_steps: int) -> dict[str, tf.Tensor]:
        """fn(obs, *args) -> {"obs": final observations, ...}, a graph loop of at most `max_steps` vector env
        steps from `self._obs`. With `steps_in_graph` the env state goes in and out around the call and the
        final observations become `self._obs` (otherwise the Python env steps set it). Returns the rest."""
        if self.steps_in_graph:
            self.graph_steps_begin(max_steps)
        outputs = dict(fn(tf.convert_to_tensor(self._obs), *args))
        obs = outputs.pop("obs")
        if self.steps_in_graph:
            self.graph_steps_end()
            self._obs = obs.numpy()
        return outputs

    @no_autograph
    def graph_env_step(self, actions: tf.Tensor) -> tuple[tf.Tensor, ...]:
        """`env_step` inside a graph (see `steps_in_graph`): obs, float32 rewards, terminated, truncated,
        next_obs. Each step's rewards and episode ends go to a log that `graph_steps_end` reads (~5 ops a step:
        tracking the episodes here took ~0.2 ms per TD3 Pendulum step)."""
        if self.action_kind == "continuous":
            actions = tf.minimum(tf.maximum(actions, self.action_space.low), self.action_space.high)
        obs, rewards, terminated, truncated, next_obs = self.envs.graph_step(actions)
        dones = terminated | truncated
        row = self._graph_log_rows.read_value()
        self._graph_log.scatter_nd_update([[row]], tf.stack([rewards, tf.cast(dones, tf.float64)])[None])
        self._graph_log_rows.assign(row + 1)
        rewards = tf.cast(rewards, tf.float32)
        if self.clip_rewards:
            rewards = tf.sign(rewards)
        if not self.bootstrap_truncation:
            terminated, truncated = dones, tf.zeros_like(truncated)
        return obs, rewards, terminated, truncated, next_obs

    # ----- the loop -------------------------------------------------------------------------------
    @property
    def mean_reward(self) -> float:
        return float(np.mean(self.rewards)) if self.rewards else -math.inf

    @property
    def window_full(self) -> bool:
        """Whether the running mean covers a full `reward_buffer_size` window of episodes (a best needs one)."""
        return len(self.rewards) >= self.reward_buffer_size

    def _record_episodes(self, elapsed: float) -> bool:
        """Turn finished episodes into history rows; plateau logic. Returns True if the mean improved.

        The best mean (`best_reward`, best.ckpt) and the plateau logic count only means over a full window:
        the mean of the first few episodes says little about the weights."""
        improved = False
        monitoring = self.divergence_monitoring_steps is not None and self.steps >= float(self.divergence_monitoring_steps)
        for step, ret in self._finished:
            self.episodes += 1
            self.rewards.append(ret)
            mean = self.mean_reward
            if self.window_full and mean > self.best_reward:
                self.best_reward, improved = mean, True
                self.plateau_count = self.early_stop_count = 0
            elif self.window_full and monitoring:
                self.plateau_count += 1
                if self.plateau_count >= self.plateau_reduce_patience:
                    self.plateau_count = 0
                    self.early_stop_count += 1
                    self.lr_scale *= self.plateau_reduce_factor
                    log.info(f"plateau at step {step:,}: learning rate x{self.plateau_reduce_factor} -> {self.current_lr():.3g}")
            self.history.append(self.episodes, step, elapsed, ret, mean, self.best_reward)
        self._finished.clear()
        return improved

    def steps_left(self) -> int:
        """Env steps the next fused call may take: up to max_steps, or the next evaluation if sooner."""
        limit = self.max_steps if self.pause_step is None else min(self.max_steps, self.pause_step)
        return limit - self.steps

    def target_reached(self, target_reward: float | None) -> bool:
        enough = len(self.rewards) >= min(self.reward_buffer_size, 10)
        return target_reward is not None and enough and self.mean_reward >= float(target_reward)

    def stop_reason(self, max_steps: int, target_reward: float | None, interrupted: bool = False) -> str | None:
        """Why training ends now (max_steps, interrupted, target_reward, early_stop), or None to go on."""
        if self.steps >= max_steps:
            return "max_steps"
        if interrupted:
            return "interrupted"
        if self.target_reached(target_reward):
            return "target_reward"
        if self.early_stop_count >= self.early_stop_patience > 0:
            return "early_stop"
        return None

    def fit(self, max_steps: float, target_reward: float | None = None, run_dir: str | Path | None = None,
            checkpoint_interval: float = 30.0, history_interval: float = 2.0, progress: str = "auto",
            config: Mapping[str, Any] | None = None, tracker: Any = None, evaluator: Any = None,
            verbose: int = 1) -> dict[str, Any]:
        """Train until `max_steps` env steps, the target mean reward, or early stopping.

        With `run_dir`, writes history.parquet, history.png and checkpoints/{last,best}.ckpt there (the last.ckpt
        each save replaces stays as previous.ckpt, which resume falls back to if last.ckpt is damaged); best.ckpt
        holds the best mean over a full `reward_buffer_size` window of training episodes (none before the first
        full window), or with an `evaluator` (rlexp.evaluation.Evaluator) the best evaluation.
        `tracker` (see rlexp.tracking) receives episode returns, losses, learning rate, steps/s and evaluations;
        it is flushed with the history.
        `verbose` (Stable-Baselines3's): 0 prints nothing but warnings; 1 progress (`progress`: 'auto' a live bar
        on a terminal and log lines otherwise, 'bar', 'log' or 'none') and evaluations, on the console where
        nothing has configured logging (`rlexp.logs.verbosity`). The constructor's `quiet=True` leaves out the
        progress.
        Returns a summary of the whole run (all sessions of a resumed one): steps, seconds (training time),
        steps_per_s, reason, mean and best reward, episodes; session_steps and session_seconds of this call;
        already_finished when the run had ended before this call (nothing trained).
        """
        from rlexp.logs import verbosity

        with verbosity(verbose):
            return self._fit(max_steps, target_reward, run_dir, checkpoint_interval, history_interval,
                             progress if verbose else "none", config, tracker, evaluator)

    def _fit(self, max_steps: float, target_reward: float | None, run_dir: str | Path | None,
             checkpoint_interval: float, history_interval: float, progress: str, config: Mapping[str, Any] | None,
             tracker: Any, evaluator: Any) -> dict[str, Any]:
        """`fit`'s loop."""
        from rlexp.tracking import Tracker

        from rlexp.checks import check_fit_arguments

        check_fit_arguments(max_steps, target_reward, checkpoint_interval, history_interval)
        tracker = tracker or Tracker()
        self._tracked_steps = -self.TRACK_EVERY_STEPS
        self.max_steps = int(float(max_steps))
        run_dir = Path(run_dir) if run_dir else None
        if run_dir is not None:
            from rlexp.files import check_writable

            check_writable(run_dir, f"run_dir={run_dir}")
        self.config = dict(config or {})
        if run_dir is not None:
            self.history.path = run_dir / "history.parquet"
        bar = Progress(self.max_steps, "none" if self.quiet else progress, self.log_frequency or 10,
                       self.display_precision, initial_steps=self.steps, initial_episodes=self.episodes)
        start_steps = self.steps
        last_checkpoint = last_flush = last_best = time.perf_counter()
        best_pending = False
        session_start, base_time = time.perf_counter(), self.train_time
        stop, iterations = [False], 0
        try:
            with stop_on_interrupt(stop):
                while (reason := self.stop_reason(self.max_steps, target_reward, stop[0])) is None:
                    self._apply_lr()
                    self.pause_step = evaluator.next_step if evaluator is not None else None
                    metrics = self.train_iteration()
                    iterations += 1
                    self.check_finite(metrics)
                    self.train_time = base_time + time.perf_counter() - session_start
                    rows = len(self.history)
                    improved = self._record_episodes(self.train_time)
                    best_pending |= improved and evaluator is None  # with an evaluator, best.ckpt is its best
                    self._track(tracker, metrics, rows, start_steps, self.train_time - base_time)
                    bar.update(self.steps, self.episodes, self.mean_reward, self.best_reward)
                    if evaluator is not None and evaluator.due(self.steps):
                        session_start += self._evaluate_now(evaluator, tracker)
                    if run_dir is None:
                        continue
                    now = time.perf_counter()
                    if best_pending and now - last_best >= 1.0:
                        self.save(run_dir / "checkpoints" / "best.ckpt", full=False)
                        best_pending, last_best = False, now
                    if now - last_checkpoint >= checkpoint_interval:
                        self.save(run_dir / "checkpoints" / "last.ckpt", keep_previous=True)
                        tracker.flush()
                        last_checkpoint = last_flush = now
                    elif now - last_flush >= history_interval:
                        self.history.flush()
                        tracker.flush()
                        last_flush = now
        finally:
            bar.close()
        if run_dir is not None:
            if best_pending:
                self.save(run_dir / "checkpoints" / "best.ckpt", full=False)
            self.save(run_dir / "checkpoints" / "last.ckpt", keep_previous=True)
            tracker.flush()
            if len(self.history):
                plot_history({run_dir.name: self.history.columns()}, run_dir / "history.png")
            if evaluator is None and not (run_dir / "checkpoints" / "best.ckpt").exists():
                log.info(f"no checkpoints/best.ckpt: {self.episodes:,} episodes, fewer than one full "
                         f"agent.reward_buffer_size={self.reward_buffer_size} window (play and eval use last.ckpt)")
        return self._summary(reason, start_steps, base_time, already_finished=iterations == 0 and
                             reason != "interrupted")

    def _summary(self, reason: str, start_steps: int, base_time: float, already_finished: bool) -> dict[str, Any]:
        """What `fit` returns: the whole run's totals and this call's share."""
        seconds = self.train_time
        return dict(steps=self.steps, seconds=seconds, steps_per_s=self.steps / seconds if seconds > 0 else 0.0,
                    session_steps=self.steps - start_steps, session_seconds=self.train_time - base_time,
                    reason=reason, already_finished=already_finished, mean_reward=self.mean_reward,
                    best_reward=self.best_reward, episodes=self.episodes)

    def _evaluate_now(self, evaluator: Any, tracker: Any) -> float:
        """One evaluation during training: logged, tracked, checkpointed by the evaluator. Returns its
        duration, which the training time leaves out."""
        start = time.perf_counter()
        row = evaluator(self, self.train_time)
        tracker.scalars(self.steps, {"eval/mean_return": row["mean_return"], "eval/std_return": row["std_return"]})
        p = self.display_precision
        log.info(f"eval at step {self.steps:,}: {row['mean_return']:.{p}f} ± {row['std_return']:.{p}f} over "
                 f"{row['episodes']} {'' if evaluator.deterministic else 'stochastic '}episodes"
                 + (" (new best)" if row["improved"] else ""))
        return time.perf_counter() - start

    TRACK_EVERY_STEPS = 1000  # env steps between two writes of the training scalars

    def _track(self, tracker: Any, metrics: Mapping[str, float], first_row: int, start_steps: int,
               seconds: float) -> None:
        """Send the new episodes and this iteration's metrics to the tracker."""
        rows = self.history.rows
        for i in range(first_row, len(self.history)):
            tracker.scalars(rows["step"][i], {"episode/return": rows["episode_reward"][i],
                                              "episode/mean_return": rows["mean_reward"][i]})
        if self.steps - self._tracked_steps < self.TRACK_EVERY_STEPS:  # DQN iterates every few env steps
            return
        self._tracked_steps = self.steps
        tracker.scalars(self.steps, {**{f"train/{k}": v for k, v in metrics.items()},
                                     "train/learning_rate": self.current_lr(),
                                     "train/steps_per_s": (self.steps - start_steps) / max(seconds, 1e-9)})

    def first_update_step(self) -> int:
        """The fewest env steps (run.max_steps) of a run that makes a gradient step: a shorter one learns
        nothing. 0: the first iteration learns (an on-policy rollout is collected whole, past max_steps)."""
        return 0

    def check_finite(self, metrics: Mapping[str, float]) -> None:
        bad = [k for k, v in metrics.items() if not np.isfinite(v)]
        if bad:
            raise TrainingDiverged(f"non-finite {', '.join(bad)} at step {self.steps:,}")

    # ----- acting, evaluation ---------------------------------------------------------------------
    def flat_obs(self, obs: Any) -> np.ndarray:
        """A batch of observations as the agent sees them (Dict/Tuple observations flattened)."""
        if self.structured_space is None or isinstance(obs, np.ndarray):
            return obs
        batched = gym.vector.utils.batch_space(self.structured_space, len(obs) if not isinstance(obs, dict) else
                                               len(next(iter(obs.values()))))
        return np.stack([gym.spaces.flatten(self.structured_space, o)
                         for o in gym.vector.utils.iterate(batched, obs)]).astype(np.float32)

    def act(self, obs: np.ndarray, episode_starts: np.ndarray | None = None, deterministic: bool = True) -> np.ndarray:
        """Actions for a batch of observations: the policy's deterministic ones, or (`deterministic=False`)
        drawn from it with the evaluation generator. `episode_starts` flags the envs whose episode starts with
        this observation (recurrent policies reset their state there; None: all on the first call)."""
        obs = self.normalizer.obs(self.flat_obs(obs)).astype(self.obs_dtype, copy=False)
        actions = self.policy_actions(obs, episode_starts, deterministic)
        if self.action_kind == "continuous":
            actions = np.clip(actions, self.action_space.low, self.action_space.high)
        return actions

    def policy_actions(self, obs: np.ndarray, episode_starts: np.ndarray | None,
                       deterministic: bool = True) -> np.ndarray:
        """`policy` (or `sample_policy`) on a batch of (normalised) observations, as NumPy actions."""
        functions = self.__dict__.setdefault("_acting_functions", {})
        if not deterministic:
            _ = self.eval_rng  # the generator is made here, outside the graph
        if deterministic not in functions:
            functions[deterministic] = tf.function(
                self.policy if deterministic else lambda obs: self.sample_policy(obs, self.eval_rng))
        return functions[deterministic](tf.convert_to_tensor(obs)).numpy()

    @property
    def eval_rng(self) -> tf.random.Generator:
        """The generator of stochastic evaluation, apart from training's `tf_rng` (evaluating never shifts
        training's draws); `evaluate` restarts it from the evaluation seed."""
        if "_eval_rng" not in self.__dict__:
            self._eval_rng = tf.random.Generator.from_seed(self.eval_seed)
        return self._eval_rng

    @property
    def eval_seed(self) -> int:
        """Seed of the evaluation envs and generator: apart from training's (without a seed, the OS's entropy)."""
        if "_eval_seed" not in self.__dict__:
            entropy = int(np.random.SeedSequence().entropy % 2**31)
            self._eval_seed = self.seed + 10_000 if self.seed is not None else entropy
        return self._eval_seed

    def play(self, envs: gym.vector.VectorEnv, episodes: int = 1, video_dir: str | Path | None = None,
             frame_dir: str | Path | None = None, fps: int = 30, name: str = "play",
             deterministic: bool = True) -> list[float]:
        """Episodes in a 1-env vector env (make it with render_mode="rgb_array" to record
        `video_dir/<name>.mp4` or jpg frames). Returns each episode's return."""
        from rlexp.play import play

        return play(self, envs, episodes=episodes, video_dir=video_dir, frame_dir=frame_dir, fps=fps, name=name,
                    deterministic=deterministic)

    def evaluate(self, envs: gym.vector.VectorEnv, episodes: int, deterministic: bool = True) -> list[float]:
        """Run `episodes` episodes, spread over the given envs (each env's first episodes), with the
        deterministic policy or (`deterministic=False`) actions drawn from it. With a seed, each call starts
        from the same env seeds and generator state, so evaluations differ only by the weights. A recurrent
        policy's state restarts at episode starts and lost lives, as in training."""
        from rlexp.checks import whole

        episodes = whole("run.eval_episodes", episodes, 0)
        n = envs.num_envs
        quota = np.array([episodes // n + (i < episodes % n) for i in range(n)])
        returns: list[float] = []
        counted = np.zeros(n, int)
        running = np.zeros(n)
        obs, _ = envs.reset(seed=None if self.seed is None else self.eval_seed)
        if not deterministic:
            self.eval_rng.reset_from_seed(self.eval_seed)
        starts = np.ones(n, bool)
        while (counted < quota).any():
            obs, rewards, terminated, truncated, info = envs.step(self.act(obs, starts, deterministic))
            starts = with_lost_lives(terminated | truncated, info)  # a recurrent state restarts as in training
            running += rewards
            for i in np.flatnonzero(terminated | truncated):
                if counted[i] < quota[i]:
                    returns.append(float(running[i]))
                    counted[i] += 1
                running[i] = 0.0
        return returns

    # ----- checkpoints ----------------------------------------------------------------------------
    def _state(self) -> dict[str, Any]:
        return dict(agent=type(self).__name__, steps=self.steps, episodes=self.episodes, train_time=self.train_time,
                    best_reward=self.best_reward, rewards=list(self.rewards), lr_scale=self.lr_scale,
                    adaptive_scale=self.adaptive_scale,
                    plateau_count=self.plateau_count, early_stop_count=self.early_stop_count,
                    rng=self.rng.bit_generator.state, config=getattr(self, "config", {}),
                    observation_shape=list(self.obs_shape), n_actions=self.n_actions)

    def save(self, path: str | Path, full: bool = True, keep_previous: bool = False) -> None:
        """Write weights (and, if `full`, everything resume needs) atomically to one .ckpt (npz) file; with
        `keep_previous` the file it replaces stays as previous.ckpt beside it."""
        arrays: dict[str, np.ndarray] = {}
        for name, model in self.models().items():
            for i, w in enumerate(model.get_weights()):
                arrays[f"model/{name}/{i}"] = w
        for name, var in self.extra_variables().items():
            arrays[f"var/{name}"] = var.numpy()
        for k, v in self.normalizer.state_dict().items():
            arrays[f"normalizer/{k}"] = v
        if full:
            for name, var in self.resume_variables().items():
                arrays[f"resume/{name}"] = var.numpy()
            for name, opt in self.optimizers().items():
                for i, v in enumerate(opt.variables):
                    arrays[f"opt/{name}/{i}"] = np.asarray(v)
            arrays["tf_rng"] = self.tf_rng.state.numpy()
            if self.buffer is not None:
                for k, v in self.buffer.state_dict().items():
                    arrays[f"buffer/{k}"] = v
            for k, v in self.history.rows.items():
                arrays[f"history/{k}"] = np.asarray(v)
        state = self._state() | {"full": full}
        arrays["state"] = np.frombuffer(json.dumps(state, default=float).encode(), np.uint8)
        keep = Path(path).with_name(PREVIOUS) if keep_previous else None
        write_atomic(path, lambda f: np.savez(f, **arrays), keep=keep)
        if full:
            self.history.flush()

    @staticmethod
    def read_state(path: str | Path) -> dict[str, Any]:
        """The JSON state stored in a checkpoint (agent name, steps, config, ...); a damaged file is one line
        naming it (rlexp.checkpoints)."""
        return read_state(path)

    def load(self, path: str | Path, weights_only: bool = False) -> dict[str, Any]:
        """Restore a checkpoint written by `save` (weights only, or the full training state)."""
        state = self.read_state(path)
        if state.get("agent") != type(self).__name__:
            raise UserError(f"checkpoint {path} belongs to agent {state.get('agent')}, not {type(self).__name__}")
        if tuple(state.get("observation_shape", self.obs_shape)) != self.obs_shape or state.get("n_actions") != self.n_actions:
            raise UserError(f"checkpoint {path} was trained on another environment (observations "
                            f"{tuple(state.get('observation_shape'))}, {state.get('n_actions')} actions)")
        data = read_arrays(path)  # all of it, checksums verified, before anything is assigned
        for name, model in self.models().items():
            model.set_weights([data[f"model/{name}/{i}"] for i in range(len(model.get_weights()))])
        for name, var in self.extra_variables().items():
            var.assign(data[f"var/{name}"])
        self.normalizer.load_state_dict({k[11:]: data[k] for k in data if k.startswith("normalizer/")})
        if weights_only:
            return state
        if not state.get("full"):
            raise UserError(f"checkpoint {path} holds weights only; resume from checkpoints/last.ckpt")
        for name, var in self.resume_variables().items():
            var.assign(data[f"resume/{name}"])
        for name, opt in self.optimizers().items():
            model_vars = self.trainable_variables(name)
            if not opt.built:
                opt.build(model_vars)
            for i, v in enumerate(opt.variables):
                v.assign(data[f"opt/{name}/{i}"])
        self.tf_rng.reset(data["tf_rng"])
        if self.buffer is not None:
            self.buffer.load_state_dict({k[7:]: data[k] for k in data if k.startswith("buffer/")})
        rows = {k[8:]: data[k].tolist() for k in data if k.startswith("history/")}
        self.steps, self.episodes, self.train_time = int(state["steps"]), int(state["episodes"]), float(state["train_time"])
        self.best_reward = float(state["best_reward"])
        self.rewards.clear()
        self.rewards.extend(state["rewards"])
        self.lr_scale = float(state["lr_scale"])
        self.adaptive_scale = float(state.get("adaptive_scale", 1.0))
        self.plateau_count, self.early_stop_count = int(state["plateau_count"]), int(state["early_stop_count"])
        self.rng.bit_generator.state = state["rng"]
        if rows:
            self.history.replace(rows)
            self.history._flushed = -1
        # new episodes from a reset: normalised with the loaded statistics (left as saved), seeded from the
        # run's seed and step
        self._obs = self._reset_envs(self.resume_seed(), update_statistics=False)
        self.normalizer.returns[:] = 0.0
        return state

    def trainable_variables(self, optimizer_name: str) -> list[tf.Variable]:
        """The variables the named optimizer updates (default: the model of the same name)."""
        return self.models()[optimizer_name].trainable_variables

