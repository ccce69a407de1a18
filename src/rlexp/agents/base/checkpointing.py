"""Checkpoints of an agent: weights, and for resume the whole training state, in one .ckpt (npz) file."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from rlexp.errors import UserError
from rlexp.runs.checkpoints import PREVIOUS, read_arrays, read_state
from rlexp.runs.files import write_atomic


class Checkpointing:
    """`Agent`'s `save` and `load` (the agent's name, not its module, identifies a checkpoint)."""

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
        naming it (rlexp.runs.checkpoints)."""
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

    def restore_state(self, state: dict[str, Any]) -> None:
        """An algorithm's own progress from a checkpoint's JSON state (e.g. DQN's last target sync), after `load`
        or a population's resume has restored the rest."""

    def trainable_variables(self, optimizer_name: str) -> list[tf.Variable]:
        """The variables the named optimizer updates (default: the model of the same name)."""
        return self.models()[optimizer_name].trainable_variables
