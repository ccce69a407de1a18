import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
os.environ.setdefault("WANDB_MODE", "offline")

import tensorflow as tf  # noqa: E402

tf.config.threading.set_inter_op_parallelism_threads(1)  # as the CLI sets it (rlexp.main._setup_tensorflow)
