"""History writer: parquet columns, atomic flush, truncation on resume."""
import pandas as pd

from rlexp.runs.history import COLUMNS, History, plot_history


def test_flush_and_load_truncates_after_checkpoint(tmp_path):
    path = tmp_path / "history.parquet"
    history = History(path)
    for i in range(5):
        history.append(i + 1, (i + 1) * 10, float(i), float(i), float(i), float(i))
    history.flush()
    df = pd.read_parquet(path)
    assert list(df.columns) == list(COLUMNS) and len(df) == 5
    assert not list(tmp_path.glob(".*tmp"))  # no temporary file left behind
    resumed = History.load(path, max_step=30)
    assert list(resumed.rows["step"]) == [10, 20, 30]
    resumed.append(4, 35, 9.0, 1.0, 1.0, 1.0)
    resumed.flush()
    assert pd.read_parquet(path)["step"].tolist() == [10, 20, 30, 35]
    plot_history({"run": resumed.frame()}, tmp_path / "history.png")
    assert (tmp_path / "history.png").stat().st_size > 1000
