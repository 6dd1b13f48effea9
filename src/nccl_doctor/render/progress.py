"""Progress of a long read on stderr: only for big inputs, only when stderr is a terminal, gone when done."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from rich.progress import Progress

SHOWN_FROM = 100 * 1000 * 1000  # bytes: smaller inputs are read before a bar would be worth drawing


@contextmanager
def reading(what: str, err: TextIO | None = None) -> Iterator[Callable[[int], Callable[[int], None] | None]]:
    """Yields `start(total_bytes)`, which returns `advance(bytes_read_so_far)` when a bar is drawn, else None."""
    err = err or sys.stderr
    bar: list[Progress] = []

    def start(total: int) -> Callable[[int], None] | None:
        if total < SHOWN_FROM or not err.isatty():
            return None
        from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn,
                                   TransferSpeedColumn)  # only when a bar is drawn: a start without rich is faster

        from .text import console_for

        progress = Progress(TextColumn(what), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                            TimeRemainingColumn(), console=console_for(err), transient=True)
        task = progress.add_task(what, total=total)
        progress.start()
        bar.append(progress)
        return lambda done: progress.update(task, completed=min(done, total))

    try:
        yield start
    finally:
        for progress in bar:
            progress.stop()
