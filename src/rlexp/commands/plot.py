"""mode=plot: runs compared, seeds of a configuration grouped (rlexp.analysis.plots does the work)."""
from __future__ import annotations

import logging
from pathlib import Path

from omegaconf import DictConfig

from rlexp.errors import UserError
from rlexp.runs.dirs import original_cwd

log = logging.getLogger("rlexp")


def plot_runs(cfg: DictConfig) -> float:
    """mode=plot: +runs=[dirA,dirB] or a glob; seeds of one configuration are grouped (see rlexp.analysis.plots)."""
    from rlexp.analysis.plots import plot_runs as plot

    patterns = cfg.get("runs")
    if not patterns:
        raise UserError("mode=plot needs runs: +runs=[outputs/<date>/<run>,...] or +runs='outputs/*/*_ppo_cartpole'")
    patterns = [patterns] if isinstance(patterns, str) else [str(p) for p in patterns]
    base = original_cwd()
    output = Path(cfg.get("output") or "runs.png")
    output = output if output.is_absolute() else base / output
    gamma = cfg.get("gamma")
    table = plot(patterns, base, output, None if gamma is None else float(gamma))
    for _, row in table.iterrows():
        log.info(f"{row['group']}: IQM {row['iqm']:.4g} [{row['iqm_low']:.4g}, {row['iqm_high']:.4g}] over "
                 f"{row['runs']} run(s) ({row['score']})")
    runs = int(table["runs"].sum())
    log.info(f"plot: {output} ({runs} runs in {len(table)} group(s)); statistics: {output.with_suffix('.md')}")
    return float(runs)
