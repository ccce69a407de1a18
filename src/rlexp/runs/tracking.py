"""Experiment tracking: TensorBoard scalars under the run dir (always) and Weights & Biases (logger=wandb)."""
from __future__ import annotations

import logging
import os
import struct
import time
from pathlib import Path
from typing import Any, Iterator, Mapping

log = logging.getLogger("rlexp")


class Tracker:
    """Receives scalars during training; the base does nothing."""

    def scalars(self, step: int, values: Mapping[str, float]) -> None:
        pass

    def trained(self, steps: int) -> None:
        """The agent has trained `steps` env steps: the scalars that follow (the episodes that ended in the
        iteration just run) are stamped with their episode's end step, which can lie before it."""

    def video(self, path: str | Path) -> None:
        pass

    def flush(self) -> None:
        """Write what is buffered (with each history flush and checkpoint)."""

    def end_of_training(self) -> None:
        """Training is over; scalars from now on (the final evaluation) close the run."""

    def close(self, failed: bool = False) -> None:
        pass


class Trackers(Tracker):
    """Fans out to several trackers; closing closes all of them, even if one fails."""

    def __init__(self, trackers: list[Tracker]) -> None:
        self.trackers = trackers

    def scalars(self, step, values):
        for t in self.trackers:
            t.scalars(step, values)

    def trained(self, steps):
        for t in self.trackers:
            t.trained(steps)

    def video(self, path):
        for t in self.trackers:
            t.video(path)

    def flush(self):
        for t in self.trackers:
            t.flush()

    def end_of_training(self):
        for t in self.trackers:
            t.end_of_training()

    def close(self, failed=False):
        for t in self.trackers:
            try:
                t.close(failed)
            except Exception as e:  # noqa: BLE001 - closing must reach every tracker
                log.warning(f"closing {type(t).__name__} failed: {e}")


EPISODE_TAGS = {"episode/return": "episode_reward", "episode/mean_return": "mean_reward"}  # history columns


class TensorBoard(Tracker):
    """Scalars in `<run dir>/tb` (view with `tensorboard --logdir outputs`), written as event protos by
    TensorBoard's own writer: no TF ops per scalar (tf.summary in eager mode kept ~2 kB per call).

    `resume=(history rows, step)` first makes the event files agree with a resumed checkpoint: the scalars
    after its step (written by the stopped process after its last checkpoint) go, and each history episode's
    scalars are written exactly once (also those a killed process had not flushed)."""

    def __init__(self, log_dir: str | Path, resume: tuple[Mapping[str, Any], int] | None = None) -> None:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self.Event, self.Summary = Event, Summary
        if resume is not None:
            self.rewrite(Path(log_dir), *resume)
        self.writer = EventFileWriter(str(log_dir))

    def event(self, step: int, values: Mapping[str, float], wall_time: float | None = None):
        summary = self.Summary(value=[self.Summary.Value(tag=k, simple_value=float(v)) for k, v in values.items()])
        return self.Event(wall_time=time.time() if wall_time is None else wall_time, step=int(step), summary=summary)

    def scalars(self, step, values):
        self.writer.add_event(self.event(step, values))

    def flush(self):
        self.writer.flush()

    def close(self, failed=False):
        self.writer.close()

    def rewrite(self, log_dir: Path, rows: Mapping[str, Any], step: int) -> None:
        """One event file in place of the old ones: their scalars up to `step` (one per tag and step) and the
        episode scalars of the history `rows`. It is written atomically, then the old ones are removed (a crash
        in between leaves duplicates that the next rewrite drops). TensorBoard reads a folder's files in name
        order: the name's timestamp, a second before its earliest event and before now, sorts it ahead of the
        file the new writer opens next (named by the time it opens)."""
        from rlexp.runs.files import write_atomic

        files = sorted(p for p in log_dir.glob("events.out.tfevents.*") if p.is_file())
        if not files and not len(rows["step"]):
            return
        kept: dict[tuple[str, int], Any] = {}
        episodes: dict[int, float] = {}  # step -> wall time of the episode's scalars
        for path in files:
            for event in map(self.Event.FromString, read_records(path)):
                for value in event.summary.value:
                    if value.tag in EPISODE_TAGS:
                        episodes[event.step] = event.wall_time
                    elif event.step <= step and value.HasField("simple_value"):
                        kept[value.tag, event.step] = (event.wall_time, value.simple_value)
        events = [self.event(s, {tag: v}, wall) for (tag, s), (wall, v) in kept.items()]
        now = time.time()
        events += [self.event(s, {tag: rows[column][i] for tag, column in EPISODE_TAGS.items()}, episodes.get(s, now))
                   for i, s in enumerate(rows["step"])]
        events.sort(key=lambda e: e.step)
        header = self.Event(wall_time=min([e.wall_time for e in events], default=now), file_version="brain.Event:2")
        target = log_dir / f"events.out.tfevents.{int(min(header.wall_time, now)) - 1:010d}.rlexp.0"
        write_atomic(target, lambda f: f.write(b"".join(record(e.SerializeToString()) for e in [header, *events])))
        for path in files:
            if path != target:
                path.unlink(missing_ok=True)


def record(data: bytes) -> bytes:
    """One TFRecord: length, its masked CRC, the data, its masked CRC."""
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    header = struct.pack("<Q", len(data))
    return header + struct.pack("<I", masked_crc32c(header)) + data + struct.pack("<I", masked_crc32c(data))


def read_records(path: Path) -> Iterator[bytes]:
    """The complete records of a TFRecord file, up to the first truncated or corrupt one (a killed write)."""
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    data, offset = path.read_bytes(), 0
    while offset + 12 <= len(data):
        header = data[offset:offset + 8]
        (length,) = struct.unpack("<Q", header)
        end = offset + 12 + length + 4
        if end > len(data) or struct.unpack("<I", data[offset + 8:offset + 12])[0] != masked_crc32c(header):
            return
        payload = data[offset + 12:end - 4]
        if struct.unpack("<I", data[end - 4:end])[0] != masked_crc32c(payload):
            return
        yield payload
        offset = end


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
    """A Weights & Biases run with the resolved config; always finished (also on errors). wandb itself prints
    nothing (its banner, run summary and sync hints): one line says where the run is and how to sync it."""

    def __init__(self, settings: Mapping[str, Any], config: Mapping[str, Any], run_dir: str | Path,
                 default_group: str | None = None) -> None:
        import wandb

        self.wandb = wandb
        mode = wandb_mode(settings.get("mode"))
        quiet = wandb.Settings(silent=True, quiet=True, show_info=False, show_warnings=False, console="off")
        try:
            self.run = wandb.init(project=settings.get("project") or "rlexp", entity=settings.get("entity"),
                                  name=settings.get("name") or Path(run_dir).name,
                                  group=settings.get("group") or default_group, tags=list(settings.get("tags") or []),
                                  config=dict(config), dir=str(run_dir), mode=mode, reinit="finish_previous",
                                  settings=quiet)
        except Exception as e:  # noqa: BLE001 - wandb raises many kinds; the user needs one line
            from rlexp.errors import UserError

            raise UserError(f"wandb could not start a {mode} run ({type(e).__name__}: {str(e)[:200]}); "
                            "use logger.mode=offline or logger=none") from None
        log.info(self.where(mode))

    def where(self, mode: str) -> str:
        """The one line about the run: its page online, or its folder and the command that uploads it."""
        if mode == "disabled":
            return "wandb: disabled (logger.mode=disabled)"
        if mode == "online" and self.run.url:
            return f"wandb: online run {self.run.name}: {self.run.url}"
        return f"wandb: {mode} run {self.run.name}; upload it later with: wandb sync {self.run.settings.sync_dir}"

    def scalars(self, step, values):
        self.run.log(dict(values), step=step)

    def video(self, path):
        self.run.log({"video": self.wandb.Video(str(path), format="mp4")})

    def close(self, failed=False):
        self.run.finish(exit_code=1 if failed else 0)
