"""`Agent`: what every agent is made of. Its constructor (checks, envs, normaliser, generators, progress
state), the hooks algorithms implement, the building blocks they build with (models, optimizers, learning-rate
schedules) and stepping the envs; the fit loop, acting and evaluation, checkpoints and stepping a graph env
inside a graph are its parts (`loop`, `acting`, `checkpointing`, `graph_steps`).
"""
from __future__ import annotations

import collections
import contextlib
import math
from typing import Any, Mapping, Sequence

import gymnasium as gym
import numpy as np
import tensorflow as tf

from rlexp.agents.base.acting import Acting
from rlexp.agents.base.checkpointing import Checkpointing
from rlexp.agents.base.graph_steps import GraphSteps
from rlexp.agents.base.loop import FitLoop
from rlexp.agents.base.population import PopulationLoop
from rlexp.checks.memory import Need, check_fits, init_default
from rlexp.envs.normalize import Normalizer
from rlexp.envs.spaces import is_image, is_structured, observation_parts, space_kind
from rlexp.envs.wrappers import with_lost_lives
from rlexp.errors import UserError
from rlexp.models.networks import build_model, has_batch_renorm, is_recurrent
from rlexp.runs.history import History

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


def load_model_preset(name: str) -> dict[str, Any]:
    """Read conf/model/<name>.yaml from the installed package."""
    from importlib import resources

    import yaml

    path = resources.files("rlexp.conf").joinpath("model", f"{name}.yaml")
    if not path.is_file():
        raise UserError(f"model preset {name!r} does not exist (see conf/model/)")
    return yaml.safe_load(path.read_text())


class Agent(PopulationLoop, FitLoop, Acting, Checkpointing, GraphSteps):
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
        optimizer: 'adam' (Keras'), 'adam_torch' (PyTorch's, SB3's: epsilon added to the bias-corrected root),
            'rmsprop' (Keras' RMSprop, as in A2C papers and SB3) or 'rmsprop_tf' (TensorFlow 1's RMSProp, SB3's
            RMSpropTFLike: its mean square starts at one).
        opt_rho, opt_momentum, opt_centered: RMSprop's discount (PyTorch's alpha), momentum and centring.
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
        jit_compile: XLA: 'auto' compiles the on-policy agents' fused loop (rollouts and updates) where a graph
            env steps inside it, in fits of 100k env steps or more, and nothing else; True that loop in any fit
            and each update step everywhere else; False nothing.
        mixed_precision: compute in 16-bit floats with float32 variables, optimizer state, target networks,
            outputs and losses: True (float16 on a GPU, bfloat16 on a CPU), 'float16', 'bfloat16' or False (PPO,
            A2C, VPG); off-policy agents (DQN, DQfD, DDPG, TD3, SAC, NAF) compute in bfloat16 only.
        seeds: train a population (rlexp.agents.base.population): a count (members seeded `seed`, `seed` + 1, ...)
            or the members' seeds; `envs` then holds each member's envs (rlexp.envs.make_member_envs).
        member_values: a population's hyperparameters that differ between members, name -> one value per member
            (the class's `member_keys`: e.g. {"lr": [3e-4, 1e-3]}).
    Dict and Tuple observations are flattened (gymnasium's FlattenObservation); the model splits them again.
    """

    action_spaces: tuple[str, ...] = ("discrete", "continuous")
    recurrent_models = False  # supports model presets with lstm/gru layers
    mixed_precision_support = False
    batch_renorm_models = False  # models with batch_renorm layers (CrossQ: it calls them with training=True)
    float16_support = False  # float16 compute needs loss scaling (on-policy `minimize`); bfloat16 does not
    auto_bfloat16 = False  # run.mixed_precision=auto may pick bfloat16 for vector models (see build.resolve_precision)
    off_policy = False
    member_keys: tuple[str, ...] = ()  # hyperparameters a population's members may differ in (run.members)
    default_models = {"image": "nature_cnn", "vector": "mlp"}  # what model=auto builds
    lr_schedules: tuple[str, ...] = ("constant", "linear")

    def __init__(self, envs: gym.vector.VectorEnv, model: Mapping[str, Any] | str | None = None,
                 buffer: Any = None, *, seed: int | None = None, gamma: float = 0.99, lr: float = 7e-4,
                 lr_schedule: str = "constant", schedule_steps: float | None = None, optimizer: str = "adam",
                 beta1: float = 0.9, beta2: float = 0.999, opt_epsilon: float = 1e-7, opt_rho: float = 0.99,
                 opt_momentum: float = 0.0, opt_centered: bool = False, reward_buffer_size: int = 100,
                 divergence_monitoring_steps: int | None = None, plateau_reduce_factor: float = 0.9,
                 plateau_reduce_patience: int = 10, early_stop_patience: int = 3, log_frequency: int = 10,
                 display_precision: int = 2, quiet: bool = False, clip_rewards: bool = False,
                 normalize_obs: bool = False, normalize_reward: bool = False,
                 bootstrap_truncation: bool = True, jit_compile: bool | str = "auto",
                 mixed_precision: bool | str = False, seeds: int | Sequence[int] | None = None,
                 member_values: Mapping[str, Sequence[float]] | None = None) -> None:
        autoreset = getattr(envs, "metadata", {}).get("autoreset_mode", gym.vector.AutoresetMode.SAME_STEP)
        if autoreset != gym.vector.AutoresetMode.SAME_STEP:
            raise UserError(f"rlexp needs vector envs that reset in the step an episode ends: build them with "
                            f"rlexp.envs.make_envs, or gym.make_vec(..., vector_kwargs={{'autoreset_mode': "
                            f"gym.vector.AutoresetMode.SAME_STEP}}) (got {autoreset})")
        from rlexp.checks.values import check_seed

        seed = check_seed(seed)
        self.members = None
        if seeds is not None:  # a population: one member per seed (rlexp.agents.base.population)
            from rlexp.agents.base.population import population_members

            self.members, self._member_random = population_members(type(self), envs, seed, seeds,
                                                                    vars(self) | locals())
            seed = self.members.seeds[0]
            if buffer is not None:  # each member's own replay, sampled by its own generator
                buffer = self.member_buffer(buffer)
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
        if optimizer not in ("adam", "adam_torch", "rmsprop", "rmsprop_tf"):
            raise UserError(f"agent.optimizer={optimizer!r} must be 'adam', 'adam_torch', 'rmsprop' or 'rmsprop_tf'")
        self.gamma, self.lr, self.lr_schedule, self.optimizer_name = float(gamma), float(lr), lr_schedule, optimizer
        self.beta1, self.beta2, self.opt_epsilon = float(beta1), float(beta2), float(opt_epsilon)
        self.opt_rho, self.opt_momentum, self.opt_centered = float(opt_rho), float(opt_momentum), bool(opt_centered)
        for name, value in dict(opt_rho=self.opt_rho, opt_momentum=self.opt_momentum).items():
            if not 0 <= value < 1:
                raise UserError(f"agent.{name}={value} must be in [0, 1)")
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
        if not any(jit_compile is option for option in (True, False)) and jit_compile != "auto":
            raise UserError(f"agent.jit_compile={jit_compile!r} must be auto, true or false")
        self.jit_setting = jit_compile
        self.jit_compile = jit_compile is True  # XLA for the update steps
        if normalize_obs and self.image_obs:
            raise UserError("agent.normalize_obs=true is for vector observations; image observations are scaled "
                            "to [0, 1] already")
        if self.members is None:
            self.normalizer = Normalizer(tuple(self.observation_space.shape), self.n_envs, self.gamma,
                                         bool(normalize_obs), bool(normalize_reward))
        else:  # each member's own statistics (its own discount: `apply_member_values`)
            from rlexp.envs.normalize import MemberNormalizers

            self.normalizer = MemberNormalizers([
                Normalizer(tuple(self.observation_space.shape), self.members.envs, self.gamma, bool(normalize_obs),
                           bool(normalize_reward)) for _ in range(self.members.count)])
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
        if has_batch_renorm(self.model_preset) and not self.batch_renorm_models:
            raise UserError(f"model={self.model_preset.get('name')} has batch_renorm layers, which only CrossQ trains "
                            f"(it says when they learn); pick another model for {type(self).__name__}")
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
        if self.members is not None:
            from rlexp.agents.base.members import MemberGenerators

            self.tf_rng = MemberGenerators(self.members.seeds)
        if buffer is not None and self.members is None:
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
        self._obs = self._reset_envs(seed if self.members is None else self.members.seeds)
        with dtype_policy(self.precision):
            self.build()
        if member_values:
            if self.members is None:
                raise UserError("run.members: members' own values need a population; set run.seeds too")
            self.apply_member_values(member_values)

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
        (rlexp.checks.memory): here the buffer's storage; families add theirs."""
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
            make = lambda: build_model(preset or self.model_preset, (self.obs_shape[0] + extra_inputs,), heads,  # noqa: E731
                                       name=name)
            return make() if self.members is None else self.stacked_model(make, name)
        if self.members is not None:  # each member's model built as its single run builds it, then stacked
            return self.stacked_model(lambda: self._build_one_model(heads, name, preset, latent_of), name)
        return self._build_one_model(heads, name, preset, latent_of)

    def _build_one_model(self, heads: Mapping[str, int], name: str, preset: Mapping[str, Any] | None,
                         latent_of: str | None):
        channels_first = self.image_obs and len(self.obs_shape) == 3 and self.obs_shape[0] < self.obs_shape[-1]
        return build_model(preset or self.model_preset, self.obs_shape, heads, input_dtype=self.obs_dtype,
                           channels_first=channels_first, name=name, latent_of=latent_of, parts=self.obs_parts)

    def make_optimizer(self):
        """Keras's Adam or RMSprop, with fused update kernels, or TensorFlow 1's RMSProp (rlexp.models.optimizers)."""
        from rlexp.models.optimizers import FusedAdam, FusedRMSprop, RMSpropTFLike

        if self.optimizer_name in ("rmsprop", "rmsprop_tf"):
            kind = RMSpropTFLike if self.optimizer_name == "rmsprop_tf" else FusedRMSprop
            return kind(learning_rate=self.lr, rho=self.opt_rho, momentum=self.opt_momentum,
                        centered=self.opt_centered, epsilon=self.opt_epsilon)
        return FusedAdam(learning_rate=self.lr, beta_1=self.beta1, beta_2=self.beta2, epsilon=self.opt_epsilon,
                         torch_epsilon=self.optimizer_name == "adam_torch")

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

    @property
    def member_envs(self) -> int:
        """Envs per member: all of them in a single run (a population's step counts are each member's)."""
        return self.n_envs if self.members is None else self.members.envs

    def _reset_envs(self, seed: int | list[int | None] | None, update_statistics: bool = True) -> np.ndarray:
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
                self._finished.append((self.steps + int(i) % self.member_envs + 1, float(self._episode_returns[i]),
                                       int(i) // self.member_envs))
                self._episode_returns[i] = 0.0
        self.steps += self.member_envs
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
