"""Checkpoints of a population's members: each written, and read back, in the single-run checkpoint format
(`rlexp.agents.base.checkpointing`), so play, eval, plot and resume read a member as any run."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from rlexp.errors import UserError


def stopped_for_good(state: dict[str, Any]) -> bool:
    """Whether a member's checkpoint was written as it stopped (its target reached, or diverged), not to go on."""
    reason = str((state.get("population") or {}).get("reason"))
    return reason == "target_reward" or reason.startswith("diverged")


class MemberCheckpoints:
    """`PopulationLoop`'s checkpoint part: `save_member`, `load_member`, `resume_population`."""

    def _part(self, member: int, per_env: bool) -> slice | int:
        envs = self.members.envs
        return slice(member * envs, (member + 1) * envs) if per_env else member

    def _slice(self, value: np.ndarray, member: int, per_env: bool = False) -> np.ndarray:
        """A member's part of a population's array: its entry of a per-member one ([N, ...]), or `per_env` its
        rows ([N * E, ...]: a resume variable's, e.g. exploration noise per env); a scalar all share as it is."""
        value = np.asarray(value)
        return value[self._part(member, per_env)] if value.ndim else value

    def _put(self, variable, member: int, value, per_env: bool = False) -> None:
        """Write a member's part (`_slice`'s) of a population's variable."""
        full = np.array(variable.numpy())
        if full.ndim:
            full[self._part(member, per_env)] = value
        else:
            full = value
        variable.assign(full)

    def member_normalizer(self, member: int) -> Any:
        """A member's observation and reward normalisation (`rlexp.envs.normalize.Normalizer`)."""
        return self.normalizer.members[member]

    def member_rng(self, member: int) -> np.random.Generator:
        """The NumPy generator of a member (warm-up actions, replay samples); the agent's where members share it."""
        rngs = getattr(self, "member_rngs", None)
        return rngs[member] if rngs else self.rng

    def save_member(self, member: int, path: str | Path, full: bool = True, keep_previous: bool = False) -> None:
        """Member `member`'s checkpoint, as its single run writes it (rlexp.agents.base.checkpointing)."""
        import json

        from rlexp.runs.checkpoints import PREVIOUS
        from rlexp.runs.files import write_atomic

        record = self.member_records()[member]
        arrays: dict[str, np.ndarray] = {}
        for name, model in self.models().items():
            for i, w in enumerate(model.get_weights()):
                arrays[f"model/{name}/{i}"] = w[member]
        for name, var in self.extra_variables().items():
            arrays[f"var/{name}"] = self._slice(var.numpy(), member)
        for k, v in self.member_normalizer(member).state_dict().items():
            arrays[f"normalizer/{k}"] = v
        if full:
            for name, opt in self.optimizers().items():
                for i, v in enumerate(opt.variables):
                    arrays[f"opt/{name}/{i}"] = self._slice(v.numpy(), member)
            for name, var in self.resume_variables().items():
                arrays[f"resume/{name}"] = self._slice(var.numpy(), member, per_env=True)
            arrays["tf_rng"] = self.tf_rng.generators[member].state.numpy()
            if self.buffer is not None:
                for k, v in self.buffer.member_state_dict(member).items():
                    arrays[f"buffer/{k}"] = v
            for k, v in record.history.rows.items():
                arrays[f"history/{k}"] = np.asarray(v)
        state = self._state() | dict(steps=record.steps, episodes=record.episodes, train_time=record.train_time,
                                     best_reward=record.best_reward, rewards=list(record.rewards), lr_scale=1.0,
                                     adaptive_scale=1.0, plateau_count=0, early_stop_count=0,
                                     rng=self.member_rng(member).bit_generator.state,
                                     config=self.member_config(member), full=full,
                                     population=dict(seeds=self.members.seeds, member=member, reason=record.reason))
        arrays["state"] = np.frombuffer(json.dumps(state, default=float).encode(), np.uint8)
        keep = Path(path).with_name(PREVIOUS) if keep_previous else None
        write_atomic(path, lambda f: np.savez(f, **arrays), keep=keep)
        if full:
            record.history.flush()

    def member_config(self, member: int) -> dict[str, Any]:
        """The run config a member's checkpoint records: the population's, with the member's own seed."""
        config = dict(getattr(self, "config", {}) or {})
        if config:
            config["seed"] = self.members.seeds[member]
            config["run"] = dict(config.get("run") or {}) | {"seeds": None, "members": None}  # resumed alone: a run
            config["agent"] = dict(config.get("agent") or {}) | {
                key: values[member] for key, values in getattr(self, "member_values", {}).items()}
        return config

    def load_member(self, member: int, path: str | Path) -> dict[str, Any]:
        """Restore member `member` from its full checkpoint (a population's resume: every member from its own)."""
        from rlexp.runs.checkpoints import read_arrays, read_state

        state = read_state(path)
        if state.get("agent") != type(self).__name__ or not state.get("full"):
            raise UserError(f"checkpoint {path} is not a full {type(self).__name__} checkpoint")
        data = read_arrays(path)

        def put(variable, value) -> None:
            self._put(variable, member, value)

        for name, model in self.models().items():
            for i, variable in enumerate(model.weights):
                put(variable, data[f"model/{name}/{i}"])
        for name, var in self.extra_variables().items():
            put(var, data[f"var/{name}"])
        for name, opt in self.optimizers().items():
            for i, v in enumerate(opt.variables):
                if len(v.shape):
                    put(v, data[f"opt/{name}/{i}"])
                elif member == 0:
                    v.assign(data[f"opt/{name}/{i}"])
        for name, var in self.resume_variables().items():
            self._put(var, member, data[f"resume/{name}"], per_env=True)
        self.member_normalizer(member).load_state_dict({k[11:]: data[k] for k in data if k.startswith("normalizer/")})
        self.tf_rng.generators[member].reset(data["tf_rng"])
        self.member_rng(member).bit_generator.state = state["rng"]
        if self.buffer is not None:
            self.buffer.load_member_state_dict(member, {k[7:]: data[k] for k in data if k.startswith("buffer/")})
        record = self.member_records()[member]
        record.steps, record.episodes = int(state["steps"]), int(state["episodes"])
        record.train_time, record.best_reward = float(state["train_time"]), float(state["best_reward"])
        record.rewards.clear()
        record.rewards.extend(state["rewards"])
        record.reason = (state.get("population") or {}).get("reason") if stopped_for_good(state) else None
        rows = {k[8:]: data[k].tolist() for k in data if k.startswith("history/")}
        if rows:
            record.history.replace(rows)
            record.history._flushed = -1
        return state

    def resume_population(self, paths: Sequence[str | Path]) -> None:
        """Every member from its last checkpoint; the population goes on from their step (the same for all that
        train on), with new episodes as a single run's resume starts them."""
        from rlexp.runs.checkpoints import PREVIOUS, is_complete, read_state

        paths = [Path(p) for p in paths]
        states = [read_state(p) for p in paths]
        steps = [int(state["steps"]) for state in states]
        stopped = [stopped_for_good(state) for state in states]  # saved as they stopped, at their own step
        common = min((step for step, done in zip(steps, stopped) if not done), default=min(steps))
        for member, (path, step) in enumerate(zip(paths, steps)):
            if step > common and not stopped[member]:  # saved after the kill's victims: its previous save is the others' step
                previous = path.with_name(PREVIOUS)
                if not is_complete(previous) or int(read_state(previous)["steps"]) != common:
                    raise UserError(f"{path} is at step {step:,} and the population's other members at {common:,}, "
                                    f"with no checkpoint of this member at that step; resume the members one by one "
                                    f"(+resume=<member dir>)")
                paths[member] = previous
        loaded = [self.load_member(member, path) for member, path in enumerate(paths)]
        records = self.member_records()
        self.steps = max(r.steps for r in records)
        self.restore_state(next((s for s, done in zip(loaded, stopped) if not done), loaded[0]))
        self.members.active.assign([0.0 if r.reason else 1.0 for r in records])
        seeds = [int(np.random.SeedSequence([s, self.steps]).generate_state(1)[0]) for s in self.members.seeds]
        self._obs = self._reset_envs(seeds, update_statistics=False)  # normalised with the loaded statistics
        self.normalizer.reset_returns()
