"""Imported once by the sweep launcher's forkserver (rlexp.launch): what every trial needs, so that forked
trials start with it loaded. TensorFlow is imported but not started (no devices, no threads pools), so that
each forked trial configures its own."""
from rlexp.quiet import import_tensorflow

import_tensorflow(start=False)

import hydra  # noqa: E402,F401
import rlexp.agents  # noqa: E402,F401
import rlexp.main  # noqa: E402,F401
import rlexp.sweep  # noqa: E402,F401
