"""`nccl-doctor explain CAUSE`: what a cause means and how to fix it."""

from __future__ import annotations

import difflib
import sys

import click

from ..catalog import categories, causes
from ..model import InputError
from ..render.explain import draw_catalog, draw_cause


@click.command()
@click.argument("cause_id", required=False)
@click.option("--list", "list_all", is_flag=True, help="List every cause, grouped by category.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def explain(cause_id: str | None, list_all: bool, as_json: bool) -> int:
    """Explain a cause of the catalog (or list them all with --list)."""
    table = causes()
    stdout = sys.stdout
    if list_all or not cause_id:
        draw_catalog(stdout, table.values(), categories(), as_json)
        return 0
    if cause_id not in table:
        close = difflib.get_close_matches(cause_id, table, n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else "; see `nccl-doctor explain --list`"
        raise InputError(f"unknown cause '{cause_id}'{hint}")
    draw_cause(stdout, table[cause_id], as_json)
    return 0
