"""`OnPolicyAgent`: the family's constructor, its model and optimizer, and the fused graph loop of rollout +
update cycles; the policy distribution, recurrent state and rollouts are its parts (`policy`, `recurrent`,
`rollouts`)."""
from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import tensorflow as tf

from rlexp.agents.base import Agent
from rlexp.agents.distributions import no_autograph
from rlexp.agents.on_policy.policy import PolicyDistribution
from rlexp.agents.on_policy.recurrent import RecurrentState
from rlexp.agents.on_policy.rollouts import Rollouts
from rlexp.checks.memory import Need, activation_floats, init_default, space_bytes
from rlexp.envs.spaces import space_kind
from rlexp.errors import UserError


class OnPolicyAgent(PolicyDistribution, RecurrentState, Rollouts, Agent):
    """Agents that learn from fresh rollouts of `n_steps` per env (A2C, PPO, TRPO).

    The rollout runs in the graph: the policy acts in TensorFlow, the envs step through
    `tf.numpy_function`, and time-limit truncations are bootstrapped with the critic's value. Several
    rollout + update cycles run in one graph call (at least `STEPS_PER_CALL` env steps, each cycle with its
    own scheduled learning rate), so small rollouts (A2C's 5 steps) don't pay Python's per-call cost.
    Subclasses provide `forward(obs) -> (policy output, value)` and `update(batch) -> metrics` (graph code).

    Args (besides `Agent`'s):
        n_steps: transitions per env per rollout.
        log_std_init: continuous actions: initial log standard deviation of the Gaussian policy.
        state_dependent_std: continuous actions: the policy head outputs the log std too (clipped to
            [-20, 2]) instead of a learned state-independent vector.
        use_sde: continuous actions: generalised state-dependent exploration (Raffin et al. 2022): the
            noise is the policy's last hidden features times a random matrix drawn from N(0, std^2)
            every `sde_sample_freq` steps (-1: once per rollout); std is a learned [features, actions] matrix.
        use_expln: gSDE's stds from their logs by SB3's expln (log1p(x) + 1 above 0) instead of exp.
        sequence_length: recurrent models: the rollout is cut into sequences of this many steps per env
            (None: the whole rollout), each starting from the hidden state stored at its first step;
            minibatches are whole sequences (truncated backpropagation through time).
    Continuous actions are sampled unbounded and clipped to the action space when stepping; the
    unclipped sample is what the log-probabilities are computed for (as SB3 does). MultiDiscrete and
    MultiBinary actions use factorised categorical and Bernoulli distributions.
    """

    critic = True  # the model has a value head (VPG without a baseline has none)
    column_keys = ("gamma", "lam")  # members' values read per env column by the rollouts' returns
    STEPS_PER_CALL = 2048  # target reward, early stopping and progress are checked between calls
    XLA_STEPS_PER_CALL = 8192  # an XLA-compiled loop's call (~0.1 s for PPO CartPole): 8% faster than 2,048
    XLA_MIN_STEPS = 100_000  # agent.jit_compile=auto compiles the loops of fits this long (see `xla_loop`)
    jit_update = True  # `update` is pure TensorFlow (XLA can compile it)
    # whether jit_compile=auto compiles a gSDE policy's loop too: per algorithm, where learning.md's gSDE section
    # measured the XLA loop against the plain graph on the same seeds (PPO Pendulum: worse on 4 of 20 seeds)
    xla_auto_with_sde = False
    numpy_acting = True  # act with NumPy mirrors of MLP models during rollouts (see `_numpy_rollout`)
    # With a GraphVectorEnv, roll out entirely in the graph (TensorFlow acting, the env stepped with TF ops)
    # instead of acting in NumPy: it pays where rollouts are most of the work (A2C CartPole 4.7 vs 5.4 s per
    # 200k steps) but not for PPO (4.7 vs 4.5 s per 100k: its bigger graph takes ~0.8 s longer to build).
    graph_env_rollouts = False

    def __init__(self, envs: gym.vector.VectorEnv, model=None, buffer=None, *, n_steps: int = 128,
                 log_std_init: float = 0.0, state_dependent_std: bool = False, use_sde: bool = False,
                 sde_sample_freq: int = -1, use_expln: bool = False, sequence_length: int | None = None,
                 **kwargs) -> None:
        from rlexp.checks.values import whole

        self.n_steps = n_steps = whole("agent.n_steps", n_steps, 1)
        self.sequence_length = int(sequence_length or n_steps)
        if self.sequence_length < 1 or self.n_steps % self.sequence_length:
            raise UserError(f"agent.sequence_length={sequence_length} must divide agent.n_steps={n_steps}")
        self.rnn_states: list[tf.Variable] = []  # recurrent models: each state per env, carried across rollouts
        self.log_std_init, self.state_dependent_std = float(log_std_init), bool(state_dependent_std)
        self.sde = bool(use_sde) and space_kind(envs.single_action_space) == "continuous"
        self.expln = bool(use_expln)
        self.sde_sample_freq = int(sde_sample_freq) if int(sde_sample_freq) > 0 else int(n_steps)
        if self.sde and self.state_dependent_std:
            raise UserError("agent.use_sde and agent.state_dependent_std exclude each other; pick one")
        super().__init__(envs, model, buffer, **kwargs)
        self.updates_per_call = max(1, -(-self.STEPS_PER_CALL // (self.n_steps * self.member_envs)))  # `decide_xla`
        if self.lr_schedule == "kl_adaptive":  # the rate adapts to each update's KL: one cycle per call
            self.updates_per_call = 1

    @classmethod
    def memory_needs(cls, observation_space, action_space, n_envs, params, buffer, model) -> list[Need]:
        """The rollout's storage (observations, the final ones of vector observations, actions and five floats
        a transition) and the activations of the update's largest batch (a PPO minibatch, else the rollout),
        besides a replay buffer's storage (ACER)."""
        from rlexp.envs.spaces import is_image

        n_steps = int(params.get("n_steps") or init_default(cls, "n_steps", 1))
        rows = n_steps * n_envs
        image = is_image(observation_space)
        per_row = space_bytes(observation_space) * (1 if image else 2) + space_bytes(action_space) + 20
        batches = max(int(params.get("mini_batches") or init_default(cls, "mini_batches", 1)), 1)
        batch_rows = rows // batches
        floats = activation_floats(model, observation_space.shape, 2 if cls.critic else 1, image)
        keys = f"agent.n_steps={n_steps} x env.n_envs={n_envs}"
        fix = "agent.n_steps or env.n_envs"
        if init_default(cls, "mini_batches") is not None:
            fix += " (or raise agent.mini_batches)"
        return [*super().memory_needs(observation_space, action_space, n_envs, params, buffer, model),
                Need("rollout storage", rows * per_row, f"{rows:,} transitions x {per_row} bytes", keys, fix),
                Need("the update's activations", batch_rows * floats * 4, f"{batch_rows:,} rows x {floats * 4:,} "
                     "bytes", keys, fix)]

    @property
    def steps_in_graph(self) -> bool:
        return (self.graph_env_rollouts or self.xla_loop) and super().steps_in_graph

    @property
    def xla_loop(self) -> bool:
        """Whether the fused loop (rollouts stepping a graph env, and the updates) is compiled with XLA as one
        program: with `agent.jit_compile=true`, or `auto` for a fit of `XLA_MIN_STEPS` env steps or more (with
        gSDE only where `xla_auto_with_sde`). The compilation costs ~1.5 s more than the plain graph's first
        call; PPO CartPole's steady state then runs ~1.9x faster (docs/performance.md). Decided once, when the
        agent's first graph is built."""
        if getattr(self, "_xla_decided", None) is not None:
            return self._xla_decided
        wanted = self.jit_setting is True or (self.jit_setting == "auto" and self.max_steps >= self.XLA_MIN_STEPS
                                              and (self.xla_auto_with_sde or not self.sde))
        return (wanted and self.jit_update and not self.recurrent and self.precision == "float32"
                and super().steps_in_graph)

    def decide_xla(self) -> bool:
        """Fix `xla_loop` before the first graph is built; an XLA loop runs `XLA_STEPS_PER_CALL` env steps a call."""
        if getattr(self, "_xla_decided", None) is None:
            self._xla_decided = self.xla_loop
            if self._xla_decided and self.lr_schedule != "kl_adaptive":
                self.updates_per_call = max(1, -(-self.XLA_STEPS_PER_CALL // (self.n_steps * self.member_envs)))
        return self._xla_decided

    # ----- model and optimizer ------------------------------------------------------------------------
    def model_kwargs(self) -> dict[str, Any]:
        """build_model options for the model holding the policy head."""
        return {"latent_of": "policy"} if self.sde else {}

    def build(self) -> None:
        """One model with policy and value heads (A2C, PPO); TRPO builds separate actor and critic."""
        heads = {"policy": self.policy_units} | ({"value": 1} if self.critic else {})
        self.model = self.build_model(heads, **self.model_kwargs())
        self.make_recurrent_state(self.model)
        self.make_log_std()
        self.optimizer = self.make_optimizer()
        self.optimizer.build(self.trainable_variables())

    def make_optimizer(self):
        """The family's optimizer; under a float16 policy wrapped in Keras's LossScaleOptimizer (see `minimize`)."""
        optimizer = super().make_optimizer()
        if self.precision == "mixed_float16":
            import keras

            optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
        return optimizer

    @no_autograph
    def minimize(self, tape: tf.GradientTape, loss: tf.Tensor, variables: list[tf.Variable],
                 grad_norm: float | None = None) -> None:
        """One optimizer step on `loss` (recorded on `tape`), gradients clipped to the global norm `grad_norm`.
        Under float16 the gradients are those of the loss times the loss scale (clipped at the scaled norm);
        the LossScaleOptimizer unscales them, skips steps with non-finite ones and adapts the scale."""
        scale = getattr(self.optimizer, "dynamic_scale", None)
        if scale is None:
            grads = tape.gradient(loss, variables)
        else:
            scale = tf.convert_to_tensor(scale)
            grads = tape.gradient(loss, variables, output_gradients=tf.cast(scale, loss.dtype))
        if self.members is not None:
            self.members_minimize(grads, variables, grad_norm)
            return
        if grad_norm is not None:
            grads, _ = tf.clip_by_global_norm(grads, grad_norm if scale is None else grad_norm * scale)
        self.optimizer.apply_gradients(zip(grads, variables))

    def std_variables(self) -> list[tf.Variable]:
        """The learned log std (continuous actions with a state-independent or gSDE std)."""
        return [self.log_std] if self.action_kind == "continuous" and not self.state_dependent_std else []

    def trainable_variables(self, optimizer_name: str = "model") -> list[tf.Variable]:
        return self.model.trainable_variables + self.std_variables()

    @no_autograph
    def forward(self, obs: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """(policy head output, state values [batch]). A recurrent model reads the envs' current states (or,
        given `sequence_inputs`, runs over the sequences and returns outputs flattened time-major)."""
        if self.recurrent:
            return self.recurrent_forward(obs)[:2]
        outputs = self.model(obs)
        return self.policy_head(outputs), self.head_values(outputs)

    @no_autograph
    def head_values(self, outputs) -> tf.Tensor:
        """State values [batch] from the model's outputs (zeros for a model without a value head)."""
        if not self.critic:
            out = outputs[0] if isinstance(outputs, (list, tuple)) else outputs
            return tf.zeros(tf.shape(out)[:1])
        return outputs[1][:, 0]

    def update(self, batch: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        """Learn from one rollout ([T, N, ...] tensors plus `last_values`); graph code."""
        raise NotImplementedError  # abstract

    def extra_variables(self) -> dict[str, tf.Variable]:
        if self.action_kind == "continuous" and not self.state_dependent_std:
            return {"log_std": self.log_std}
        return {}

    def resume_variables(self) -> dict[str, tf.Variable]:
        return {"sde_noise": self.sde_noise} if self.sde else {}

    # ----- the fused graph loop ------------------------------------------------------------------------
    def train_iteration(self) -> dict[str, float]:
        if not hasattr(self, "_train_fn"):
            xla = self.decide_xla()  # the update is compiled with the loop that calls it
            separate_xla = None if xla else self.jit_compile and self.jit_update
            self._update_fn = tf.function(self.update, jit_compile=separate_xla)
            self._train_fn = tf.function(self._fused_iterations, jit_compile=xla)
        rollout = self.n_steps * self.member_envs  # a population's steps are each member's
        cycles = max(1, min(self.updates_per_call, -(-self.steps_left() // rollout)))
        scheduled = self.schedules()
        # fixed length: no retrace for the last, shorter call
        lrs = np.zeros(self.updates_per_call, np.float32)
        values = np.zeros((self.updates_per_call, len(scheduled)), np.float32)
        for k in range(cycles):
            lrs[k] = self.current_lr(self.steps + k * rollout)
            values[k] = [value_at(self.steps + k * rollout) for _, value_at in scheduled.values()]
        metrics = self.call_graph_loop(self._train_fn, tf.constant(cycles), tf.constant(lrs), tf.constant(values),
                                       max_steps=self.updates_per_call * self.n_steps)
        if self.members is not None:  # each member's metrics
            return {k: v.numpy() for k, v in metrics.items()}
        return {k: float(v) for k, v in metrics.items()}

    def schedules(self) -> dict[str, tuple[tf.Variable, Any]]:
        """Hyperparameters on a schedule besides the learning rate (e.g. PPO's clip range), name -> (variable,
        value at a step count): each cycle of a fused call assigns the variable its value at the cycle's start."""
        return {}

    @no_autograph
    def _fused_iterations(self, obs: tf.Tensor, cycles: tf.Tensor, lrs: tf.Tensor,
                          scheduled: tf.Tensor) -> dict[str, tf.Tensor]:
        """`cycles` rollout + update cycles in one graph call, cycle i with learning rate `lrs[i]` and the
        `schedules` variables set to `scheduled[i]`; returns the mean metrics.

        Written with `tf.while_loop` rather than AutoGraph: converting the loop (and the updates it calls)
        cost ~0.7 s of every run's first call."""
        rollout = self.rollout_function()
        schedule_variables = [variable for variable, _ in self.schedules().values()]

        def cycle(i, obs, totals):
            for optimizer in self.optimizers().values():
                optimizer.learning_rate.assign(lrs[i])
            for j, variable in enumerate(schedule_variables):
                variable.assign(scheduled[i, j])
            obs, batch = rollout(obs)
            metrics = self._update_fn(batch)
            return i + 1, obs, {k: totals[k] + metrics[k] for k in totals}

        # the loop's totals start at zeros shaped as the update's metrics, read off a trace that is never run:
        # the first cycle taken out of the loop would put a second copy of the rollout and the update into the
        # graph (and into XLA's program, whose compilation it made ~0.9 s longer)
        zeros = {k: tf.zeros(spec.shape, spec.dtype) for k, spec in self._metric_specs(rollout, obs).items()}
        _, obs, totals = tf.while_loop(lambda i, *_: i < cycles, cycle, (tf.constant(0), obs, zeros))
        return {k: v / tf.cast(cycles, tf.float32) for k, v in totals.items()} | {"obs": obs}

    def _metric_specs(self, rollout, obs: tf.Tensor) -> dict[str, tf.TensorSpec]:
        """The update's metrics (name -> spec) after a rollout from `obs`: a trace of one cycle into a graph of
        its own, which `_update_fn` keeps and the loop's body uses again."""
        if not hasattr(self, "_metrics_spec"):
            cycle = tf.function(lambda o: self._update_fn(rollout(o)[1]), autograph=False)
            outputs = cycle.get_concrete_function(tf.TensorSpec.from_tensor(obs)).structured_outputs
            self._metrics_spec = {k: tf.TensorSpec.from_tensor(v) for k, v in outputs.items()}
        return self._metrics_spec
