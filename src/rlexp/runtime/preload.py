"""Imported once by the sweep launcher's forkserver (rlexp.runtime.launch): what every trial needs, so that forked
trials start with it loaded. TensorFlow is imported but not started (no devices listed, no thread pools),
so that each forked trial starts and configures its own."""
from rlexp.runtime.quiet import import_tensorflow, quiet_libraries, skip_keras_extras, start_deferred

skip_keras_extras()
quiet_libraries()
with start_deferred():  # rlexp.agents starts TensorFlow on import elsewhere
    import_tensorflow(start=False)
    import hydra  # noqa: F401
    import rlexp.agents  # noqa: F401
    import rlexp.main  # noqa: F401
    import rlexp.sweep  # noqa: F401
