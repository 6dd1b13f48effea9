"""`nccl-doctor explain CAUSE`: what a cause means and how to fix it."""

from __future__ import annotations

import difflib
import json

import click

from ..catalog import categories, causes
from ..model import InputError
from ..render import literal
from ..render.text import console_for


@click.command()
@click.argument("cause_id", required=False)
@click.option("--list", "list_all", is_flag=True, help="List every cause, grouped by category.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def explain(cause_id: str | None, list_all: bool, as_json: bool) -> int:
    """Explain a cause of the catalog (or list them all with --list)."""
    table = causes()
    if list_all or not cause_id:
        if as_json:
            click.echo(json.dumps([c.to_json() for c in table.values()], indent=2))
            return 0
        console = console_for(click.get_text_stream("stdout"))
        for category in categories():
            console.print(f"[bold]{category}[/bold]")
            for c in table.values():
                if c.category == category:
                    console.print(f"  {c.id:34} {literal.markup(c.title)}")
        return 0
    if cause_id not in table:
        close = difflib.get_close_matches(cause_id, table, n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else "; see `nccl-doctor explain --list`"
        raise InputError(f"unknown cause '{cause_id}'{hint}")
    c = table[cause_id]
    if as_json:
        click.echo(json.dumps(c.to_json(), indent=2))
        return 0
    console = console_for(click.get_text_stream("stdout"))
    console.print(f"[bold]{c.id}[/bold] ({c.category}): {literal.markup(c.title)}\n")
    console.print(literal.markup(c.explanation) + "\n")
    for step in c.fix:
        console.print(f"[green]fix:[/green] {literal.markup(step)}")
    console.print(f"[cyan]to confirm:[/cyan] look at {literal.markup(c.confirmation)}")
    for ref in c.references:
        console.print(f"[dim]see: {literal.markup(ref)}[/dim]")
    return 0
