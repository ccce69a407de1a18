"""Progress display: a live rich bar on a terminal, plain log lines otherwise."""
from __future__ import annotations

import logging
import sys
import time

log = logging.getLogger("rlexp")


class Progress:
    """Shows steps/total, steps/s, mean and best return.

    mode: 'auto' (bar on a terminal, log lines otherwise), 'bar', 'log' or 'none'.
    log_frequency: with log lines, one line every n episodes.
    """

    def __init__(self, total: int, mode: str = "auto", log_frequency: int = 10, precision: int = 2,
                 initial_steps: int = 0) -> None:
        if mode == "auto":
            mode = "bar" if sys.stdout.isatty() else "log"
        self.mode, self.total, self.precision = mode, int(total), precision
        self.log_frequency = max(int(log_frequency or 1), 1)
        self.start_time, self.start_steps = time.perf_counter(), initial_steps
        self._last_logged_episode = 0
        self._bar = None
        if mode == "bar":
            from rich.progress import BarColumn, MofNCompleteColumn, Progress as RichProgress, TextColumn, \
                TimeElapsedColumn, TimeRemainingColumn

            self._bar = RichProgress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                     TextColumn("{task.fields[speed]} steps/s"),
                                     TextColumn("mean {task.fields[mean]} best {task.fields[best]}"),
                                     TimeElapsedColumn(), TimeRemainingColumn(), refresh_per_second=4)
            self._task = self._bar.add_task("train", total=self.total, completed=initial_steps, speed="-",
                                            mean="-", best="-")
            self._bar.start()

    def steps_per_second(self, steps: int) -> float:
        return (steps - self.start_steps) / max(time.perf_counter() - self.start_time, 1e-9)

    def update(self, steps: int, episodes: int, mean: float, best: float) -> None:
        fmt = f"{{:.{self.precision}f}}"
        if self._bar is not None:
            self._bar.update(self._task, completed=min(steps, self.total), speed=f"{self.steps_per_second(steps):,.0f}",
                             mean=fmt.format(mean), best=fmt.format(best))
        elif self.mode == "log" and episodes >= self._last_logged_episode + self.log_frequency:
            self._last_logged_episode = episodes
            log.info(f"step {steps:,}/{self.total:,} | {self.steps_per_second(steps):,.0f} steps/s | "
                     f"episodes {episodes:,} | mean {fmt.format(mean)} | best {fmt.format(best)}")

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
