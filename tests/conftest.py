import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
os.environ.setdefault("WANDB_MODE", "offline")

from rlexp.build import configure_threads  # noqa: E402

configure_threads({}, image_obs=False)  # the CLI's thread pools for vector observations


def study_folder(cwd, prefix: str = "ppo_cartpole"):
    """The one study folder multirun/<prefix>_<6 hex digits of the sweep's hash> under `cwd`."""
    import re
    from pathlib import Path

    found = [p for p in (Path(cwd) / "multirun").glob(f"{prefix}_*") if re.fullmatch(rf"{re.escape(prefix)}_[0-9a-f]{{6}}", p.name)]
    assert len(found) == 1, f"expected one study folder {prefix}_<hash>, found {[p.name for p in found]}"
    return found[0]
