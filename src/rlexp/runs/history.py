"""Training history: one row per finished episode, in history.parquet, and its plot. The file is written with
pyarrow from the rows' buffers: building a table from NumPy arrays or lists (as pandas' `to_parquet` does) imports
pandas, ~0.3 s of a training process."""
from __future__ import annotations

from array import array
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from rlexp.errors import UserError
from rlexp.runs.files import write_atomic

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

COLUMNS = ("episode", "step", "time", "episode_reward", "mean_reward", "best_reward")
TYPECODES = {"episode": "q", "step": "q"}  # int64; the rest float64 ("d")


class History:
    """Episode rows kept in memory (typed arrays: 48 bytes a row) and flushed atomically to a parquet file."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path else None
        self.replace({})
        self._flushed = 0

    def replace(self, rows: Mapping[str, Sequence]) -> None:
        """Set all rows at once (from a file or a checkpoint); a missing column is empty."""
        self.rows: dict[str, array] = {c: array(TYPECODES.get(c, "d"), rows.get(c, [])) for c in COLUMNS}

    def __len__(self) -> int:
        return len(self.rows["step"])

    def append(self, episode: int, step: int, time: float, episode_reward: float, mean_reward: float,
               best_reward: float) -> None:
        for key, value in zip(COLUMNS, (episode, step, time, episode_reward, mean_reward, best_reward)):
            self.rows[key].append(value)

    def columns(self) -> dict[str, np.ndarray]:
        """The rows as one array per column."""
        return {c: np.array(v) for c, v in self.rows.items()}

    def frame(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame(self.columns())

    def flush(self, force: bool = False) -> None:
        """Rewrite the parquet file if rows were added since the last flush."""
        if self.path is None or (len(self) == self._flushed and not force):
            return
        write_parquet(self.path, self.rows)
        self._flushed = len(self)

    @classmethod
    def load(cls, path: str | Path, max_step: int | None = None) -> "History":
        """Read a history file, keeping only rows up to `max_step` (the resumed checkpoint's step)."""
        history = cls(path)
        if Path(path).exists():
            df = read_frame(path)
            if max_step is not None:
                df = df[df["step"] <= max_step]
            history.replace({c: df[c].tolist() for c in COLUMNS})
            history._flushed = -1  # rewrite on next flush: rows after the checkpoint are dropped
        return history


ARROW_TYPES = {"q": "int64", "d": "float64"}


def write_parquet(path: str | Path, columns: Mapping[str, array]) -> None:
    """Columns of int64 ("q") or float64 ("d") arrays to a parquet file, atomically: what pandas'
    `to_parquet(index=False)` writes for them, less its pandas metadata."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    arrays = [pa.Array.from_buffers(getattr(pa, ARROW_TYPES[values.typecode])(), len(values),
                                    [None, pa.py_buffer(values.tobytes())]) for values in columns.values()]
    table = pa.Table.from_arrays(arrays, names=list(columns))
    write_atomic(path, lambda f: pq.write_table(table, f))


def read_parquet(path: str | Path, columns: Sequence[str] | None = None) -> pa.Table:
    """A parquet file as an Arrow table, read on the calling thread: Arrow's thread pools, once started, can
    abort the process at its exit (apache/arrow#34314: "terminate called without an active exception")."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        with pq.ParquetFile(path, pre_buffer=False) as file:
            return file.read(columns=columns, use_threads=False)
    except pa.ArrowException as error:
        raise UserError(f"{path} is not a readable parquet file ({error}); move it away and run again") from None


def read_frame(path: str | Path) -> pd.DataFrame:
    """A parquet file as a DataFrame (`read_parquet`, converted on the calling thread)."""
    return read_parquet(path).to_pandas(use_threads=False)


def plot_history(histories: Mapping[str, Mapping[str, Any]], path: str | Path) -> None:
    """Mean and episode return vs step and vs time, one line per run (xagents' plot_history); each run's
    columns as a DataFrame or a mapping of arrays (`History.columns`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for label, df in histories.items():
        for ax, x in zip(axes, ("step", "time")):
            line, = ax.plot(df[x], df["mean_reward"], label=f"{label} mean")
            ax.plot(df[x], df["episode_reward"], color=line.get_color(), alpha=0.2, linewidth=0.8)
    for ax, x in zip(axes, ("environment steps", "seconds")):
        ax.set_xlabel(x)
        ax.set_ylabel("return")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize="small")
    fig.tight_layout()
    write_atomic(path, lambda f: fig.savefig(f, format="png", dpi=100))
    plt.close(fig)
