"""The stages of `check` and `bench` as they run, and as a table in the report.

`StageEvents` draws what the judge reports while it runs (cluster/judge.py `Events`): on a terminal a
live line for the stage under way, which becomes the stage's result line when it ends; elsewhere the
result lines alone. Results a command wants at once (bench's rows) go to `results`, drawn by it. The
stage table is for output that is not a terminal (a file, a pipe), where no live line was seen.
"""

from __future__ import annotations

from typing import Callable, TextIO

from . import literal
from rich.table import Table

from ..model import Report
from .text import console_for

STATUS_STYLE = {"passed": "green", "failed": "bold red", "skipped": "yellow"}


def stage_line(index: int, total: int, record: dict) -> str:
    style = STATUS_STYLE[record["status"]]
    timing = f" {record['seconds']:.1f} s" if record["status"] != "skipped" else ""
    return (f"[{index}/{total}] {literal.markup(record['title']):<34} [{style}]{record['status']}[/{style}]{timing}"
            f"  [dim]{literal.markup(record['detail'])}[/dim]")


class StageEvents:
    """The judge's events on `err` (stage lines) and, through `results`, wherever a command draws its rows."""

    def __init__(self, err: TextIO, results: Callable[[str, dict], None] = lambda kind, item: None) -> None:
        self.console = console_for(err)
        self.live = err.isatty()
        self.results = results
        self._stage = ""  # "[3/7] Title" of the stage under way
        self._line = ""  # the live line now shown, to redraw after other output

    def stage_started(self, index: int, total: int, title: str) -> None:
        self._stage = f"[{index}/{total}] {literal.markup(title)}"
        self._show(f"[dim]{self._stage} ...[/dim]")

    def progress(self, what: str, done: int, total: int) -> None:
        if self._stage:
            self._show(f"[dim]{self._stage} ... {done}/{total}[/dim]")

    def stage_ended(self, index: int, total: int, record: dict) -> None:
        self._clear()
        self._stage = self._line = ""
        self.console.print(stage_line(index, total, record))

    def measured(self, kind: str, item: dict) -> None:
        self._clear()
        self.results(kind, item)
        if self._line:
            self._show(self._line)

    def _show(self, markup: str) -> None:
        if self.live:
            self._clear()
            self.console.print(markup, end="")
            self.console.file.flush()
        self._line = markup

    def _clear(self) -> None:
        if self.live and self._line:
            self.console.file.write("\r\x1b[2K")
            self.console.file.flush()


def render_stages(report: Report, out: TextIO, title: str) -> None:
    """The stage table: passed / failed / skipped, with timing and what each stage saw."""
    console = console_for(out)
    console.print(f"[bold]{literal.markup(title)}[/bold]")
    table = Table(show_edge=False, pad_edge=False)
    for column in ("stage", "status", "time", "detail"):
        table.add_column(column, overflow="fold")
    for stage in report.facts.get("stages", []):
        style = STATUS_STYLE.get(stage["status"], "")
        seconds = f"{stage['seconds']:.1f} s" if stage["status"] != "skipped" else ""
        table.add_row(literal.markup(stage["title"]), f"[{style}]{stage['status']}[/{style}]", seconds,
                      literal.markup(stage["detail"]))
    console.print(table)
    console.print()
