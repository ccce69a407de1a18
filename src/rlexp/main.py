"""The rlexp command: `python -m rlexp [group=option ...] [key=value ...]` (train, play, eval, plot, init;
--multirun tunes). Hydra composes the config; `mode` picks the command (rlexp.commands)."""
from __future__ import annotations

import gc
import logging
import os
import sys

import hydra
from omegaconf import DictConfig

from rlexp.commands.init import init_presets
from rlexp.commands.play import play_or_eval
from rlexp.commands.plot import plot_runs
from rlexp.commands.train import train
from rlexp.errors import Started, TrialFailed, UserError
from rlexp.rundirs import in_sweep

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # before TensorFlow is imported (lazily, in the task)

log = logging.getLogger("rlexp")


MODES = {"train": train, "play": play_or_eval, "eval": play_or_eval, "plot": plot_runs, "init": init_presets}


@hydra.main(version_base="1.3", config_path="pkg://rlexp.conf", config_name="config")
def main(cfg: DictConfig) -> float:
    """Compose the config, dispatch `mode`, return the objective (mean evaluation return)."""
    gc.disable()  # until `startup_done`: importing TensorFlow and building the agent only allocate
    from rlexp.agents.base import TrainingDiverged

    Started.value = True
    try:
        if cfg.mode not in MODES:
            raise UserError(f"mode={cfg.mode} is unknown; use one of {', '.join(MODES)}")
        from rlexp.checks import check_settings

        check_settings(cfg)
        return MODES[cfg.mode](cfg)
    except UserError as e:
        _fail(str(e), 2)
    except TrainingDiverged as e:
        _fail(f"training diverged: {e}; the last good checkpoint is in checkpoints/last.ckpt", 1)
    except OSError as e:  # disk full, permissions, ...: the previous checkpoint stays complete
        _fail(f"could not write {e.filename or 'a file'}: {e.strerror or e}; the previous checkpoint is intact "
              "(free space or fix permissions, then +resume)", 1)
    finally:  # a sweep's next trial in this process: this trial's objects can be collected again
        gc.unfreeze()
        gc.enable()


def _fail(message: str, code: int) -> None:
    """One line and an exit code; in a sweep the trial is recorded as failed with that line instead."""
    log.error(f"error: {message}")
    if in_sweep():
        raise TrialFailed(message) from None
    sys.exit(code)


def cli() -> None:
    """The `rlexp` command: Hydra's own errors before the task starts (unknown group option, bad override
    syntax, missing config) are user input errors too, so they exit with 2 like ours."""
    # the agent and env presets pick the default network; an explicit model=auto means the same default
    sys.argv = [arg for arg in sys.argv if arg != "model=auto"]
    try:
        main()
    except SystemExit as e:
        if e.code == 1 and not Started.value:
            sys.exit(2)
        raise
