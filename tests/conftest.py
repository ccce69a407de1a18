import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
os.environ.setdefault("WANDB_MODE", "offline")
