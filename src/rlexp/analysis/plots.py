"""mode=plot: runs grouped by their saved config minus the seed, each group's mean curve with a bootstrap
confidence band on a common step grid, and a table of rliable's statistics of the final scores."""
from __future__ import annotations

import collections
import glob
import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pandas as pd
from omegaconf import OmegaConf

from rlexp.errors import UserError
from rlexp.runs.dirs import with_legacy_defaults
from rlexp.runs.dirs import flat
from rlexp.runs.files import write_atomic
from rlexp.runs.history import read_frame

GRID_POINTS = 200
# keys that don't change what is learned: runs differing only in these are seeds of one configuration
IGNORED = ("seed", "run_dir", "run_name", "mode", "logger", "resume", "init_from", "run.progress",
           "run.checkpoint_interval", "run.history_interval", "run.tf_threads", "run.tf_inter_threads",
           "run.keep_checkpoints", "run.eval_episodes", "play")


@dataclass
class Run:
    path: Path
    config: dict[str, Any]
    history: pd.DataFrame
    evaluations: pd.DataFrame | None = None
    final_eval: dict[str, Any] | None = None  # summary.json's final evaluation

    @property
    def final_score(self) -> float:
        """The score the statistics aggregate (see `score`)."""
        return self.score[0]

    @property
    def score(self) -> tuple[float, str]:
        """(score, what it is): the final evaluation of the run's weights (when it evaluated its last
        weights), else the last evaluation during training, else the last training mean return."""
        last_step = int(self.history["step"].iloc[-1]) if len(self.history) else 0
        final = self.final_eval
        if final is not None and int(final["step"]) >= last_step:
            kind = "" if final.get("deterministic", True) else "stochastic "
            return float(final["mean_return"]), f"final evaluation, {int(final['episodes'])} {kind}episodes"
        if self.evaluations is not None and len(self.evaluations):
            row = self.evaluations.iloc[-1]
            episodes = f", {int(row['episodes'])} episodes" if "episodes" in row else ""
            return float(row["mean_return"]), f"last evaluation during training{episodes}"
        if not len(self.history):
            return float("nan"), "no episode"
        window = min(len(self.history), int(flat(self.config).get("agent.reward_buffer_size") or 100))
        return float(self.history["mean_reward"].iloc[-1]), f"last training mean, {window} episodes"


@dataclass
class Group:
    label: str
    runs: list[Run] = field(default_factory=list)

    @property
    def env_id(self) -> str:
        return str(flat(self.runs[0].config).get("env.id", "?"))

    @property
    def score_kind(self) -> str:
        """What the runs' scores are: one kind, or each kind with its number of runs."""
        kinds = collections.Counter(run.score[1] for run in self.runs)
        if len(kinds) == 1:
            return next(iter(kinds))
        return "; ".join(f"{kind} ({n} run{'s' * (n > 1)})" for kind, n in kinds.items())


def configuration(config: Mapping[str, Any]) -> dict[str, Any]:
    """What identifies a configuration: the flattened config without the seed and run bookkeeping."""
    return {k: v for k, v in flat(config).items()
            if not any(k == i or k.startswith(i + ".") for i in IGNORED)}


def load_run(path: Path) -> Run:
    config_file = path / ".hydra" / "config.yaml"
    config = OmegaConf.to_container(with_legacy_defaults(OmegaConf.load(config_file))) if config_file.exists() else {}
    evaluations = path / "evaluations.parquet"
    summary = path / "summary.json"
    final = json.loads(summary.read_text()).get("final_eval") if summary.exists() else None
    return Run(path, config, read_frame(path / "history.parquet"),
               read_frame(evaluations) if evaluations.exists() else None, final)


def group_runs(runs: list[Run]) -> list[Group]:
    """Runs with the same configuration (all but the seed) form a group; a group's label names the values
    that tell it from the others (or the run's name when there is one group)."""
    keys: dict[str, list[Run]] = {}
    configs = {id(r): configuration(r.config) for r in runs}
    for run in runs:
        keys.setdefault(repr(sorted(configs[id(run)].items(), key=lambda kv: kv[0])), []).append(run)
    members = list(keys.values())
    if len(members) == 1:
        return [Group(str(flat(members[0][0].config).get("run_name") or members[0][0].path.name), members[0])]
    first = [configs[id(m[0])] for m in members]
    differing = sorted(k for k in set().union(*first) if len({repr(c.get(k)) for c in first}) > 1)
    groups = []
    for index, (config, group) in enumerate(zip(first, members)):
        label = " ".join(f"{k.split('.')[-1] if k.count('.') else k}={config.get(k)}" for k in differing[:3])
        groups.append(Group(label or f"group {index}", group))
    return groups


def step_grid(groups: list[Group], points: int = GRID_POINTS) -> np.ndarray:
    """A common grid from 0 to the last step every run of every group reached."""
    end = min(float(run.history["step"].max()) for g in groups for run in g.runs if len(run.history))
    return np.linspace(0.0, end, points)


def curves(group: Group, grid: np.ndarray) -> np.ndarray:
    """(runs, grid points): each run's training mean return interpolated onto the grid (NaN before its first
    episode)."""
    rows = []
    for run in group.runs:
        steps, values = run.history["step"].to_numpy(float), run.history["mean_reward"].to_numpy(float)
        row = np.interp(grid, steps, values) if len(steps) else np.full(len(grid), np.nan)
        row[grid < (steps[0] if len(steps) else np.inf)] = np.nan
        rows.append(row)
    return np.array(rows)


def band(matrix: np.ndarray, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean over runs at each grid point and its 95% bootstrap interval (rliable's stratified bootstrap,
    each point a task); points with a run still missing are NaN."""
    from rlexp.analysis.stats import pointwise_interval

    complete = ~np.isnan(matrix).any(axis=0)
    mean, low, high = (np.full(matrix.shape[1], np.nan) for _ in range(3))
    if complete.any():
        if len(matrix) > 1:
            mean[complete], low[complete], high[complete] = pointwise_interval(matrix[:, complete], seed)
        else:
            mean[complete] = low[complete] = high[complete] = matrix[0, complete]
    return mean, low, high


def statistics(groups: list[Group], gamma: float | None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per group: runs, final scores' IQM and mean (and optimality gap below `gamma` when given) with 95%
    intervals; per pair of groups on the same env: the probability of improvement."""
    from rlexp.analysis.stats import group_statistics, probability_of_improvement

    scores = {g.label: np.array([r.final_score for r in g.runs]) for g in groups}
    stats = group_statistics(scores, gamma if gamma is not None else 0.0)
    rows = []
    for g in groups:
        row: dict[str, Any] = {"group": g.label, "env": g.env_id, "runs": len(g.runs)}
        names = ("iqm", "mean") + (("optimality_gap",) if gamma is not None else ())
        for name in names:
            point, low, high = stats[g.label][name]
            row.update({name: point, f"{name}_low": low, f"{name}_high": high})
        row["score"] = g.score_kind
        rows.append(row)
    pairs = []
    for x, y in itertools.permutations(groups, 2):
        if x.env_id == y.env_id and len(groups) > 1:
            point, low, high = probability_of_improvement(scores[x.label], scores[y.label])
            pairs.append({"x": x.label, "y": y.label, "p_x_beats_y": point, "low": low, "high": high})
    return pd.DataFrame(rows), pd.DataFrame(pairs)


def markdown(table: pd.DataFrame, pairs: pd.DataFrame, gamma: float | None) -> str:
    def cell(row, name):
        return f"{row[name]:.4g} [{row[name + '_low']:.4g}, {row[name + '_high']:.4g}]"

    has_gap = gamma is not None
    lines = ["Final scores, each run's final evaluation where it has one (else its last evaluation during "
             "training, else its last training mean return; the score column says which): 95% stratified "
             "bootstrap intervals (rliable).", "",
             "| group | env | runs | IQM | mean |" + (f" optimality gap (γ={gamma:g}) |" if has_gap else "")
             + " score |",
             "|---|---|---:|---|---|" + ("---|" if has_gap else "") + "---|"]
    for _, row in table.iterrows():
        lines.append(f"| {row['group']} | {row['env']} | {row['runs']} | {cell(row, 'iqm')} | {cell(row, 'mean')} |"
                     + (f" {cell(row, 'optimality_gap')} |" if has_gap else "") + f" {row['score']} |")
    if len(pairs):
        lines += ["", "Probability of improvement P(X > Y):", "", "| X | Y | P(X > Y) |", "|---|---|---|"]
        lines += [f"| {r['x']} | {r['y']} | {r['p_x_beats_y']:.3f} [{r['low']:.3f}, {r['high']:.3f}] |"
                  for _, r in pairs.iterrows()]
    return "\n".join(lines) + "\n"


def draw(groups: list[Group], grid: np.ndarray, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for group in groups:
        matrix = curves(group, grid)
        mean, low, high = band(matrix)
        line, = ax.plot(grid, mean, label=f"{group.label} ({len(group.runs)} run{'s' * (len(group.runs) > 1)})")
        if len(group.runs) > 1:
            ax.fill_between(grid, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
        for row in matrix:
            ax.plot(grid, row, color=line.get_color(), alpha=0.25, linewidth=0.6)
    ax.set_xlabel("environment steps")
    ax.set_ylabel("mean return (training)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    write_atomic(path, lambda f: fig.savefig(f, format="png", dpi=100))
    plt.close(fig)


def find_runs(patterns: list[str], base: Path) -> list[Path]:
    dirs: list[Path] = []
    for pattern in patterns:
        pattern = str(Path(pattern).expanduser() if Path(pattern).is_absolute() else base / pattern)
        dirs += sorted(Path(p) for p in glob.glob(pattern) if (Path(p) / "history.parquet").exists())
    return list(dict.fromkeys(dirs))


def plot_runs(patterns: list[str], base: Path, output: Path, gamma: float | None) -> pd.DataFrame:
    """The PNG at `output` and its tables beside it (<output>.md, <output>.csv, <output>_pairs.csv); returns
    the groups' table. `gamma`: the score the optimality gap is measured below (default: the runs' common
    run.target_reward)."""
    dirs = find_runs(patterns, base)
    if not dirs:
        raise UserError(f"+runs={patterns}: no run dir with a history.parquet matches")
    runs = [run for run in map(load_run, dirs) if len(run.history)]
    if not runs:
        raise UserError(f"+runs={patterns}: the matching runs have no finished episode yet")
    groups = group_runs(runs)
    if gamma is None:  # the runs' common target reward, if they share one
        targets = {flat(run.config).get("run.target_reward") for run in runs}
        gamma = float(targets.pop()) if len(targets) == 1 and None not in targets else None
    draw(groups, step_grid(groups), output)
    table, pairs = statistics(groups, gamma)
    write_atomic(output.with_suffix(".md"), lambda f: f.write(markdown(table, pairs, gamma).encode()))
    write_atomic(output.with_suffix(".csv"), lambda f: f.write(table.to_csv(index=False).encode()))
    if len(pairs):
        pairs_path = output.with_name(output.stem + "_pairs.csv")
        write_atomic(pairs_path, lambda f: f.write(pairs.to_csv(index=False).encode()))
    return table
