"""mode=plot: runs grouped by their saved config minus the seed; each run's curve to its own last step (its
evaluations during training where it has them, else its training mean return), each group's mean with a
bootstrap band where its seeds overlap, and a table of rliable's statistics of the final scores."""
from __future__ import annotations

import collections
import glob
import itertools
import json
import logging
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np
import pandas as pd
from omegaconf import OmegaConf

from rlexp.errors import UserError
from rlexp.runs.dirs import with_legacy_defaults
from rlexp.runs.dirs import flat
from rlexp.runs.files import write_atomic
from rlexp.runs.history import read_frame

if TYPE_CHECKING:
    from matplotlib.figure import Figure

log = logging.getLogger("rlexp")

GRID_POINTS = 200
PROGRESS_SECONDS = 5.0  # at most one progress line this often
EVALUATION, TRAINING = "evaluations", "training mean"  # what a curve plots
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

    @property
    def has_evaluations(self) -> bool:
        return self.evaluations is not None and len(self.evaluations) > 0

    def curve(self, kind: str) -> tuple[np.ndarray, np.ndarray]:
        """(steps, mean returns): the evaluations during training (kind EVALUATION) or the training mean."""
        if kind == EVALUATION:
            return self.evaluations["step"].to_numpy(float), self.evaluations["mean_return"].to_numpy(float)
        return self.history["step"].to_numpy(float), self.history["mean_reward"].to_numpy(float)


@dataclass
class Group:
    label: str
    runs: list[Run] = field(default_factory=list)

    @property
    def env_id(self) -> str:
        return str(flat(self.runs[0].config).get("env.id", "?"))

    @property
    def curve_kind(self) -> str:
        """EVALUATION when every run of the group has evaluations during training, else TRAINING: a group's
        mean compares like with like."""
        return EVALUATION if all(run.has_evaluations for run in self.runs) else TRAINING

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


class _Unset:
    """The value of a key one configuration lacks."""

    def __repr__(self) -> str:
        return "<unset>"


UNSET = _Unset()


def short_names(keys: list[str]) -> dict[str, str]:
    """Each dotted key by its shortest ending that no other of `keys` shares (agent.lr -> lr, but agent.gamma
    and buffer.gamma stay whole)."""
    names = {}
    for key in keys:
        parts = key.split(".")
        for n in range(1, len(parts) + 1):
            name = ".".join(parts[-n:])
            if not any(other != key and (other == name or other.endswith("." + name)) for other in keys):
                break
        names[key] = name
    return names


def group_runs(runs: list[Run]) -> list[Group]:
    """Runs with the same configuration (all but the seed) form a group. A group's label names its value of
    every key whose value differs between the groups (or the run's name when there is one group), so no two
    groups share a label."""
    keys: dict[str, list[Run]] = {}
    configs = {id(r): configuration(r.config) for r in runs}
    for run in runs:
        keys.setdefault(repr(sorted(configs[id(run)].items(), key=lambda kv: kv[0])), []).append(run)
    members = list(keys.values())
    if len(members) == 1:
        return [Group(str(flat(members[0][0].config).get("run_name") or members[0][0].path.name), members[0])]
    first = [configs[id(m[0])] for m in members]
    differing = sorted(k for k in set().union(*first) if len({repr(c.get(k, UNSET)) for c in first}) > 1)
    names = short_names(differing)
    labels = [" ".join(f"{names[k]}={c.get(k, UNSET)}" for k in differing) for c in first]
    if len(set(labels)) < len(labels):  # values alike as text (1 and "1"): their Python form tells them apart
        labels = [" ".join(f"{names[k]}={c.get(k, UNSET)!r}" for k in differing) for c in first]
    return [Group(label, group) for label, group in zip(labels, members)]


def step_grid(group: Group, points: int = GRID_POINTS) -> np.ndarray:
    """The group's grid for its mean: from 0 to the last step all its runs reached (each run's own curve
    goes on to its own last step)."""
    end = min(run.curve(group.curve_kind)[0][-1] for run in group.runs)
    return np.linspace(0.0, end, points)


def curves(group: Group, grid: np.ndarray) -> np.ndarray:
    """(runs, grid points): each run's curve of the group's kind interpolated onto the grid (NaN before its
    first point and after its last)."""
    rows = []
    for run in group.runs:
        steps, values = run.curve(group.curve_kind)
        row = np.interp(grid, steps, values) if len(steps) else np.full(len(grid), np.nan)
        if len(steps):
            row[(grid < steps[0]) | (grid > steps[-1])] = np.nan
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

    scores = [np.array([r.final_score for r in g.runs]) for g in groups]  # by position: never by label
    stats = group_statistics({str(i): s for i, s in enumerate(scores)}, gamma if gamma is not None else 0.0)
    rows = []
    for i, g in enumerate(groups):
        row: dict[str, Any] = {"group": g.label, "env": g.env_id, "runs": len(g.runs)}
        names = ("iqm", "mean") + (("optimality_gap",) if gamma is not None else ())
        for name in names:
            point, low, high = stats[str(i)][name]
            row.update({name: point, f"{name}_low": low, f"{name}_high": high})
        row["score"] = g.score_kind
        rows.append(row)
    todo = [(i, j) for i, j in itertools.combinations(range(len(groups)), 2) if groups[i].env_id == groups[j].env_id]
    estimates, shown = {}, time.monotonic()
    for done, (i, j) in enumerate(todo, 1):
        point, low, high = estimates[i, j] = probability_of_improvement(scores[i], scores[j])
        estimates[j, i] = (1.0 - point, 1.0 - high, 1.0 - low)  # P(Y > X) = 1 - P(X > Y) on the same resamples
        if time.monotonic() - shown > PROGRESS_SECONDS and done < len(todo):
            log.info(f"plot: probability of improvement, {done}/{len(todo)} pairs of groups bootstrapped")
            shown = time.monotonic()
    pairs = []
    for i, j in itertools.permutations(range(len(groups)), 2):
        if (i, j) in estimates:
            point, low, high = estimates[i, j]
            pairs.append({"x": groups[i].label, "y": groups[j].label, "p_x_beats_y": point, "low": low, "high": high})
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


def y_label(groups: list[Group]) -> str:
    kinds = {g.curve_kind for g in groups}
    if kinds == {EVALUATION}:
        return "mean return (evaluations during training)"
    if kinds == {TRAINING}:
        return "mean return (training, moving window)"
    return "mean return (evaluations or training mean: see legend)"


def figure(groups: list[Group]) -> Figure:
    """The figure: per group, its mean with the band where its runs overlap and each run whole (each line's
    gid is its run dir, or "mean <group index>")."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 5.5), layout="constrained")
    mixed = len({g.curve_kind for g in groups}) > 1
    for index, group in enumerate(groups):
        n, kind = len(group.runs), group.curve_kind
        style = "--" if mixed and kind == TRAINING else "-"
        label = textwrap.fill(f"{group.label} ({n} run{'s' * (n > 1)}, {kind})", 90, subsequent_indent="  ")
        if n == 1:  # the run itself
            ax.plot(*group.runs[0].curve(kind), style, label=label, linewidth=1.6, gid=str(group.runs[0].path))
            continue
        grid = step_grid(group)
        mean, low, high = band(curves(group, grid))
        line, = ax.plot(grid, mean, style, label=label, linewidth=1.8, gid=f"mean {index}")
        ax.fill_between(grid, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
        for run in group.runs:
            ax.plot(*run.curve(kind), style, color=line.get_color(), alpha=0.35, linewidth=0.7, gid=str(run.path))
    envs = ", ".join(dict.fromkeys(g.env_id for g in groups))
    runs = sum(len(g.runs) for g in groups)
    fig.suptitle(f"{envs}: mean return of {runs} run{'s' * (runs > 1)} in {len(groups)} "
                 f"configuration{'s' * (len(groups) > 1)}")
    what = ("Thin lines: each run, to its last step. Thick line: a configuration's mean over its runs, and band: "
            "the 95% stratified-bootstrap interval of that mean (rliable), up to the last step all its runs reached."
            if any(len(g.runs) > 1 for g in groups) else "Each line: one run, to its last step.")
    if mixed:
        what += (" Solid: evaluations during training; dashed: training mean return (a moving window), for "
                 "configurations whose runs did not all evaluate during training.")
    ax.set_title(textwrap.fill(what, 120, break_on_hyphens=False), fontsize="small")
    ax.set_xlabel("environment steps")
    ax.set_ylabel(y_label(groups))
    ax.grid(alpha=0.3)
    fig.legend(fontsize="small", loc="outside lower left")
    return fig


def draw(groups: list[Group], path: Path) -> None:
    import matplotlib.pyplot as plt

    fig = figure(groups)
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
    log.info(f"plot: reading {len(dirs)} run dir{'s' * (len(dirs) > 1)}")
    runs, shown = [], time.monotonic()
    for done, path in enumerate(dirs, 1):
        run = load_run(path)
        runs += [run] if len(run.history) else []
        if time.monotonic() - shown > PROGRESS_SECONDS and done < len(dirs):
            log.info(f"plot: read {done}/{len(dirs)} run dirs")
            shown = time.monotonic()
    if not runs:
        raise UserError(f"+runs={patterns}: the matching runs have no finished episode yet")
    groups = group_runs(runs)
    if gamma is None:  # the runs' common target reward, if they share one
        targets = {flat(run.config).get("run.target_reward") for run in runs}
        gamma = float(targets.pop()) if len(targets) == 1 and None not in targets else None
    log.info(f"plot: {len(runs)} run{'s' * (len(runs) > 1)} with episodes in {len(groups)} group(s); drawing "
             f"and bootstrapping (rliable)")
    draw(groups, output)
    table, pairs = statistics(groups, gamma)
    write_atomic(output.with_suffix(".md"), lambda f: f.write(markdown(table, pairs, gamma).encode()))
    write_atomic(output.with_suffix(".csv"), lambda f: f.write(table.to_csv(index=False).encode()))
    if len(pairs):
        pairs_path = output.with_name(output.stem + "_pairs.csv")
        write_atomic(pairs_path, lambda f: f.write(pairs.to_csv(index=False).encode()))
    return table
