"""`explain`'s output: one cause in full, or the catalog listed by category."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TextIO

from ..catalog import Cause
from . import literal
from .text import console_for


def draw_catalog(stream: TextIO, causes: Iterable[Cause], categories: Iterable[str], as_json: bool) -> None:
    causes = list(causes)
    if as_json:
        stream.write(json.dumps([c.to_json() for c in causes], indent=2) + "\n")
        return
    console = console_for(stream)
    for category in categories:
        console.print(f"[bold]{category}[/bold]")
        for c in causes:
            if c.category == category:
                console.print(f"  {c.id:34} {literal.markup(c.title)}")


def draw_cause(stream: TextIO, c: Cause, as_json: bool) -> None:
    if as_json:
        stream.write(json.dumps(c.to_json(), indent=2) + "\n")
        return
    console = console_for(stream)
    console.print(f"[bold]{c.id}[/bold] ({c.category}): {literal.markup(c.title)}\n")
    console.print(literal.markup(c.explanation) + "\n")
    for step in c.fix:
        console.print(f"[green]fix:[/green] {literal.markup(step)}")
    console.print(f"[cyan]to confirm:[/cyan] look at {literal.markup(c.confirmation)}")
    for ref in c.references:
        console.print(f"[dim]see: {literal.markup(ref)}[/dim]")
