"""Experiment tracking: TensorBoard scalars under the run dir (always) and Weights & Biases (logger=wandb)."""
from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any, Mapping

log = logging.getLogger("rlexp")


class Tracker:
    """Receives scalars during training; the base does nothing."""

    def scalars(self, step: int, values: Mapping[str, float]) -> None:
        pass

    def video(self, path: str | Path) -> None:
        pass

    def close(self, failed: bool = False) -> None:
        pass


class Trackers(Tracker):
    """Fans out to several trackers; closing closes all of them, even if one fails."""

    def __init__(self, trackers: list[Tracker]) -> None:
        self.trackers = trackers

    def scalars(self, step, values):
        for t in self.trackers:
            t.scalars(step, values)

    def video(self, path):
        for t in self.trackers:
            t.video(path)

    def close(self, failed=False):
        for t in self.trackers:
            try:
                t.close(failed)
            except Exception as e:  # noqa: BLE001 - closing must reach every tracker
                log.warning(f"closing {type(t).__name__} failed: {e}")


class TensorBoard(Tracker):
    """Scalars in `<run dir>/tb` (view with `tensorboard --logdir outputs`), written as event protos by
    TensorBoard's own writer: no TF ops per scalar (tf.summary in eager mode kept ~2 kB per call)."""

    def __init__(self, log_dir: str | Path) -> None:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self.Event, self.Summary = Event, Summary
        self.writer = EventFileWriter(str(log_dir))

    def scalars(self, step, values):
        summary = self.Summary(value=[self.Summary.Value(tag=k, simple_value=float(v)) for k, v in values.items()])
        self.writer.add_event(self.Event(wall_time=time.time(), step=int(step), summary=summary))

    def close(self, failed=False):
        self.writer.close()


def wandb_mode(mode: str | None) -> str:
    """'online' when an API key is configured (env or netrc), else 'offline'; an explicit mode wins."""
    if mode:
        return mode
    if os.environ.get("WANDB_MODE"):
        return os.environ["WANDB_MODE"]
    netrc = Path.home() / ".netrc"
    has_key = bool(os.environ.get("WANDB_API_KEY")) or (netrc.exists() and "api.wandb.ai" in netrc.read_text())
    return "online" if has_key else "offline"


class Wandb(Tracker):
    """A Weights & Biases run with the resolved config; always finished (also on errors)."""

    def __init__(self, settings: Mapping[str, Any], config: Mapping[str, Any], run_dir: str | Path,
                 default_group: str | None = None) -> None:
        import wandb

        self.wandb = wandb
        mode = wandb_mode(settings.get("mode"))
        try:
            self.run = wandb.init(project=settings.get("project") or "rlexp", entity=settings.get("entity"),
                                  name=settings.get("name") or Path(run_dir).name,
                                  group=settings.get("group") or default_group, tags=list(settings.get("tags") or []),
                                  config=dict(config), dir=str(run_dir), mode=mode, reinit="finish_previous")
        except Exception as e:  # noqa: BLE001 - wandb raises many kinds; the user needs one line
            from rlexp.errors import UserError

            raise UserError(f"wandb could not start a {mode} run ({type(e).__name__}: {str(e)[:200]}); "
                            "use logger.mode=offline or logger=none") from None
        log.info(f"wandb: {mode} run {self.run.name} in {self.run.dir}")

    def scalars(self, step, values):
        self.run.log(dict(values), step=step)

    def video(self, path):
        self.run.log({"video": self.wandb.Video(str(path), format="mp4")})

    def close(self, failed=False):
        self.run.finish(exit_code=1 if failed else 0)
