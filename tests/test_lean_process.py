"""What a training process imports: Keras without the packages it would import for features rlexp doesn't use,
and history files written without pandas, in the same format pandas writes."""
import subprocess
import sys

import numpy as np
import pandas as pd

from rlexp.history import History

CHILD = """
import sys
from rlexp.quiet import KERAS_EXTRAS, import_tensorflow, skip_keras_extras

skip_keras_extras()
import_tensorflow()
from rlexp.history import History

history = History(sys.argv[1])
history.append(1, 10, 0.5, 20.0, 20.0, 20.0)
history.flush()
print([name for name in KERAS_EXTRAS if name in sys.modules])
import pandas  # refused only while Keras imports
print(pandas.read_parquet(sys.argv[1])["step"].tolist())
"""


def test_keras_imports_without_its_extras_and_the_history_without_pandas(tmp_path):
    out = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "history.parquet")], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines() == ["[]", "[10]"]


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
