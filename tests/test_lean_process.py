"""What a training process imports: Keras without the packages it would import for features rlexp doesn't use,
and history files written without pandas, in the same format pandas writes."""
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from rlexp.errors import UserError
from rlexp.runs.history import History

CHILD = """
import sys
from rlexp.runtime.quiet import KERAS_EXTRAS, import_tensorflow, skip_keras_extras

skip_keras_extras()
import_tensorflow()
from rlexp.runs.history import History

history = History(sys.argv[1])
history.append(1, 10, 0.5, 20.0, 20.0, 20.0)
history.flush()
print([name for name in KERAS_EXTRAS if name in sys.modules])
import pandas  # refused only while Keras imports
from rlexp.runs.history import read_frame
print(read_frame(sys.argv[1])["step"].tolist())
"""

THREADS = """
import os, sys
from pathlib import Path
from rlexp.analysis.plots import load_run
from rlexp.runs.evaluation import Evaluator
from rlexp.runs.history import History
from rlexp.sweep.scheduler import steps_on_disk

run = Path(sys.argv[1])
history = History(run / "history.parquet")
history.append(1, 10, 0.5, 20.0, 20.0, 20.0)
history.flush()
History(run / "evaluations.parquet").flush(force=True)  # an evaluations file of the same layout: rows enough
before = len(os.listdir("/proc/self/task"))
evaluator = Evaluator(lambda: None, interval=5, episodes=1, run_dir=run)
evaluator.restore(10)
print(len(History.load(run / "history.parquet")), load_run(run).history["step"].tolist(), steps_on_disk(run),
      evaluator.next_step, len(os.listdir("/proc/self/task")) - before)
"""


def test_keras_imports_without_its_extras_and_the_history_without_pandas(tmp_path):
    out = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "history.parquet")], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines() == ["[]", "[10]"]


def test_reading_a_history_starts_no_thread_that_could_abort_the_exit(tmp_path):
    """Arrow's thread pools, once started, can end a process that did all its work with SIGABRT at its exit
    (apache/arrow#34314): a resumed run, the sweeper counting a trial's steps and the results commands read
    parquet files on their own thread."""
    out = subprocess.run([sys.executable, "-c", THREADS, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["1", "[10]", "10", "15", "0"]


def test_a_damaged_history_file_is_one_clear_error(tmp_path):
    path = tmp_path / "history.parquet"
    path.write_bytes(b"PAR1 not a parquet file")
    with pytest.raises(UserError, match=r"history.parquet is not a readable parquet file"):
        History.load(path)


def test_history_file_reads_back_as_pandas_wrote_it(tmp_path):
    history = History(tmp_path / "history.parquet")
    rows = [(1, 10, 0.25, -3.0, -np.inf, -np.inf), (2, 25, 1.0 / 3, 7.5, 2.25, np.nan), (3, 40, 2.0, 1e300, 2.0, 2.25)]
    for row in rows:
        history.append(*row)
    history.flush()
    history.frame().to_parquet(tmp_path / "by_pandas.parquet", index=False)
    ours, theirs = pd.read_parquet(tmp_path / "history.parquet"), pd.read_parquet(tmp_path / "by_pandas.parquet")
    pd.testing.assert_frame_equal(ours, theirs, check_exact=True)
    assert ours["step"].tolist() == [10, 25, 40] and str(ours["step"].dtype) == "int64"
