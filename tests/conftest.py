import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
os.environ.setdefault("WANDB_MODE", "offline")

from rlexp.build import configure_threads  # noqa: E402

configure_threads({}, image_obs=False)  # the CLI's thread pools for vector observations
