"""Progress display: a live rich bar on a terminal, plain log lines otherwise."""
from __future__ import annotations

import logging
import sys
import time
from typing import Any, Iterable, Sequence

from rich.console import Console
from rich.measure import Measurement
from rich.progress import BarColumn, MofNCompleteColumn, Progress as RichProgress, ProgressColumn, Task, \
    TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

log = logging.getLogger("rlexp")


class FittingProgress(RichProgress):
    """rich's Progress, one line that fits the console: first the bar shrinks (down to `min_bar` cells), then
    the columns in `drop_order` are left out, first to last, then the bar; the other columns are never cut."""

    def __init__(self, *columns: ProgressColumn, drop_order: Sequence[ProgressColumn] = (), min_bar: int = 10,
                 **kwargs: Any) -> None:
        self.drop_order, self.min_bar = list(drop_order), int(min_bar)
        super().__init__(*columns, **kwargs)

    def width_of(self, renderable: Any) -> int:
        return Measurement.get(self.console, self.console.options, renderable).maximum

    def layout(self, widths: dict[ProgressColumn, int]) -> tuple[list[ProgressColumn], int]:
        """The columns that fit the console's width, and the width left to the bar."""
        shown, droppable = list(self.columns), list(self.drop_order)
        while True:
            text = sum(width for column, width in widths.items() if column in shown)
            room = self.console.width - text - (len(shown) - 1)  # one space between columns
            if room >= self.min_bar or not droppable:
                break
            shown.remove(droppable.pop(0))
        bars = [column for column in shown if isinstance(column, BarColumn)]
        if room < self.min_bar:
            shown = [column for column in shown if column not in bars]
        return shown, min([room, *(bar.bar_width for bar in bars if bar.bar_width)])

    def make_tasks_table(self, tasks: Iterable[Task]) -> Table:
        tasks = [task for task in tasks if task.visible]
        if not tasks:
            return super().make_tasks_table(tasks)
        cells = {column: [column(task) for task in tasks] for column in self.columns}
        widths = {column: max((self.width_of(cell) for cell in cells[column]), default=0)
                  for column in self.columns if not isinstance(column, BarColumn)}
        shown, bar_width = self.layout(widths)
        table = Table.grid(*(column.get_table_column().copy() for column in shown), padding=(0, 1),
                           expand=self.expand)
        for row in range(len(tasks)):
            for column in shown:
                if isinstance(column, BarColumn):
                    cells[column][row].width = bar_width
            table.add_row(*(cells[column][row] for column in shown))
        return table


def rich_bar(console: Console | None = None) -> FittingProgress:
    """The training bar: train, bar, steps/total, steps/s, mean and best return, elapsed and remaining time.
    A narrow terminal loses, in turn: the label, the elapsed time, steps/s, the remaining time, the returns."""
    label, elapsed, remaining = TextColumn("[bold]{task.description}"), TimeElapsedColumn(), TimeRemainingColumn()
    speed = TextColumn("{task.fields[speed]} steps/s")
    returns = TextColumn("mean {task.fields[mean]} best {task.fields[best]}")
    return FittingProgress(label, BarColumn(), MofNCompleteColumn(), speed, returns, elapsed, remaining,
                           drop_order=[label, elapsed, speed, remaining, returns], refresh_per_second=4,
                           console=console)


class Shown(str):
    """A number format that shows a missing value (-inf: no episode yet, no full window for a best) as '-'."""

    def format(self, value: float) -> str:  # type: ignore[override]
        return super().format(value) if value > -float("inf") else "-"


class Progress:
    """Shows steps/total, steps/s, mean and best return.

    mode: 'auto' (bar on a terminal, log lines otherwise), 'bar', 'log' or 'none'.
    log_frequency: with log lines, one line every n episodes (of this session: a resumed run's first line comes
        after n new episodes, as a new run's).
    initial_steps, initial_episodes: where a resumed run starts; steps/s counts this process's steps only.
    """

    def __init__(self, total: int, mode: str = "auto", log_frequency: int = 10, precision: int = 2,
                 initial_steps: int = 0, initial_episodes: int = 0) -> None:
        if mode == "auto":
            mode = "bar" if sys.stdout.isatty() else "log"
        self.mode, self.total, self.precision = mode, int(total), precision
        self.log_frequency = max(int(log_frequency or 1), 1)
        self.start_time, self.start_steps = time.perf_counter(), initial_steps
        self._last_logged_episode = int(initial_episodes)
        self._bar = None
        if mode == "bar":
            self._bar = rich_bar()
            self._task = self._bar.add_task("train", total=self.total, completed=initial_steps, speed="-",
                                            mean="-", best="-")
            self._bar.start()

    def steps_per_second(self, steps: int) -> float:
        return (steps - self.start_steps) / max(time.perf_counter() - self.start_time, 1e-9)

    def update(self, steps: int, episodes: int, mean: float, best: float) -> None:
        fmt = Shown(f"{{:.{self.precision}f}}")
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
