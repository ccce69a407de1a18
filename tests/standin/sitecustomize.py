"""Put on PYTHONPATH by the sweeper's harness (tests/test_sweep_harness.py): registers the stand-in agent in every
process of the sweep (the sweep, its forkserver and the trials forked from it), so presets may name it."""
import os

if os.environ.get("RLEXP_STANDIN"):
    import standin

    standin.register()
