"""Evaluation episodes: on fresh eval envs with the run's actions (the final evaluation, mode=eval, mode=play's
scores), and during training (RL Zoo's --eval-freq) every `interval` env steps, written to evaluations.parquet;
the best one is checkpoints/best.ckpt."""
from __future__ import annotations

import re
from array import array
from pathlib import Path
from typing import Any, Callable

import numpy as np

from omegaconf import DictConfig

from rlexp.runs.history import write_parquet

COLUMNS = ("step", "time", "mean_return", "std_return", "min_return", "max_return", "episodes")
TYPECODES = {"step": "q", "episodes": "q"}  # int64; the rest float64 ("d")
SERIES = re.compile(r"step_(\d+)\.ckpt$")


class Evaluator:
    """Runs `episodes` episodes (deterministic, or with actions drawn from the policy) on its own envs
    whenever training passes the next multiple of `interval` env steps; `keep` > 0 also keeps the newest
    `keep` checkpoints/step_<steps>.ckpt.

    The eval envs come from `make_envs`; the agent resets them with its evaluation seed (apart from the
    training envs') at each evaluation, so evaluations differ only by the weights.
    """

    def __init__(self, make_envs: Callable[[], Any], interval: int, episodes: int, run_dir: Path | None = None,
                 keep: int = 0, deterministic: bool = True) -> None:
        self.make_envs, self.interval, self.episodes, self.keep = make_envs, int(interval), int(episodes), int(keep)
        self.deterministic = bool(deterministic)
        self.run_dir = Path(run_dir) if run_dir else None
        self.envs = None
        self.rows: list[dict[str, float]] = []
        self.last_returns: list[float] | None = None  # the returns of this process's newest evaluation
        self.next_step = self.interval

    @property
    def path(self) -> Path | None:
        return self.run_dir / "evaluations.parquet" if self.run_dir else None

    @property
    def best(self) -> float:
        return max((row["mean_return"] for row in self.rows), default=-np.inf)

    def restore(self, steps: int) -> None:
        """On resume: the evaluations up to the checkpoint's step, and the next one after it."""
        if self.path is not None and self.path.exists():
            from rlexp.runs.history import read_frame

            frame = read_frame(self.path)
            self.rows = frame[frame["step"] <= steps].to_dict("records")
        self.next_step = (steps // self.interval + 1) * self.interval

    def due(self, steps: int) -> bool:
        return steps >= self.next_step

    def __call__(self, agent: Any, seconds: float) -> dict[str, float]:
        """Evaluate now; returns the row (with `improved`: a new best mean) and saves the checkpoints."""
        if self.envs is None:
            self.envs = self.make_envs()
        returns = np.array(agent.evaluate(self.envs, self.episodes, self.deterministic))
        row = dict(step=agent.steps, time=seconds, mean_return=float(returns.mean()), std_return=float(returns.std()),
                   min_return=float(returns.min()), max_return=float(returns.max()), episodes=len(returns))
        improved = row["mean_return"] > self.best
        self.rows.append(row)
        self.last_returns = returns.tolist()
        self.next_step = (agent.steps // self.interval + 1) * self.interval
        if self.run_dir is not None:
            write_parquet(self.path, {c: array(TYPECODES.get(c, "d"), [row[c] for row in self.rows]) for c in COLUMNS})
            checkpoints = self.run_dir / "checkpoints"
            if improved:
                agent.save(checkpoints / "best.ckpt", full=False)
            if self.keep > 0:
                agent.save(checkpoints / f"step_{agent.steps}.ckpt", full=False)
                series = sorted(checkpoints.glob("step_*.ckpt"), key=lambda p: int(SERIES.search(p.name).group(1)))
                for old in series[:-self.keep]:
                    old.unlink(missing_ok=True)
        return {**row, "improved": improved}

    def close(self) -> None:
        if self.envs is not None:
            self.envs.close()
            self.envs = None


def make_evaluator(cfg: DictConfig, run_dir: Path) -> Evaluator | None:
    """Evaluation during training (run.eval_interval > 0) on its own envs, seeded apart from training's."""
    interval = int(cfg.run.get("eval_interval") or 0)
    if interval <= 0:
        return None
    return Evaluator(lambda: eval_envs(cfg), interval, int(cfg.run.eval_episodes), run_dir,
                     keep=int(cfg.run.get("keep_checkpoints") or 0), deterministic=deterministic_eval(cfg))


# ----- evaluation episodes with the run's settings ----------------------------------------------------
def mean_std(returns: list[float]) -> tuple[float, float]:
    """The returns' mean and (population) standard deviation; NaN for none."""
    return (float(np.mean(returns)), float(np.std(returns))) if returns else (float("nan"), float("nan"))


def eval_envs(cfg: DictConfig):
    """Envs for evaluation episodes (the agent resets them with its own evaluation seed, apart from the
    training envs' seeds)."""
    from rlexp.envs.make import env_from_config

    return env_from_config(cfg.env, cfg.seed, n_envs=min(int(cfg.run.eval_episodes), 32), vectorization="sync")


def eval_kind(cfg: DictConfig, final: bool = False) -> str:
    return "" if (deterministic_final_eval(cfg) if final else deterministic_eval(cfg)) else "stochastic "


def deterministic_eval(cfg: DictConfig) -> bool:
    """run.eval_deterministic as `build_agent` resolved and recorded it."""
    return bool(cfg.run.eval_deterministic)


def deterministic_final_eval(cfg: DictConfig) -> bool:
    """The final evaluation's actions: run.final_eval_deterministic as `build_agent` resolved it (null, or a run
    config without the key: as run.eval_deterministic)."""
    final = cfg.run.get("final_eval_deterministic")
    return deterministic_eval(cfg) if final is None else bool(final)


def evaluate(agent, cfg: DictConfig, deterministic: bool | None = None) -> list[float]:
    """run.eval_episodes episodes on fresh eval envs, with run.eval_deterministic's actions unless
    `deterministic` says otherwise."""
    episodes = int(cfg.run.eval_episodes)
    if episodes <= 0:
        return []
    envs = eval_envs(cfg)
    try:
        return agent.evaluate(envs, episodes,
                              deterministic=deterministic_eval(cfg) if deterministic is None else deterministic)
    finally:
        envs.close()


SUMMARY = "summary.json"


def write_summary(run_dir: Path, summary: dict[str, Any], returns: list[float], cfg: DictConfig) -> None:
    """<run dir>/summary.json: the run's totals, this session's first training call (graph tracing and
    compilation included) and steady-state speed after it, and its final evaluation (null when there was none),
    which mode=plot scores the run by."""
    import json

    from rlexp.runs.files import write_atomic

    mean, std = mean_std(returns)
    final = dict(step=summary["steps"], mean_return=mean, std_return=std, episodes=len(returns),
                 deterministic=deterministic_final_eval(cfg)) if returns else None
    steady = summary.get("steady_steps_per_s")
    data = dict(reason=summary["reason"], steps=summary["steps"], episodes=summary["episodes"],
                train_seconds=round(summary["seconds"], 3),
                first_call_seconds=round(summary.get("first_call_seconds", 0.0), 3),  # this session's: tracing and
                steady_steps_per_s=None if steady is None else round(steady, 1),  # compilation; then the rest's
                final_eval=final)
    write_atomic(run_dir / SUMMARY, lambda f: f.write(json.dumps(data, indent=1).encode()))
