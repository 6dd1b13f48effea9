"""Per-rank table: a report whose facts carry a "ranks" list (one dict per rank) gets a table of last states.

Rows are dicts with any of: rank / label, host, state, last_collective, seq, first_error {source, line, text}.
Used by the text and Markdown renderers; commands that have no per-rank facts print nothing.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from . import literal

HEADERS = ("rank", "host", "last state", "last collective / SeqNum", "first error")
MAX_ROWS = 64
MAX_CELL = 90


def rank_rows(facts: dict[str, Any], limit: int = MAX_ROWS) -> list[tuple[str, ...]]:
    rows = facts.get("ranks") or []
    return [_cells(r) for r in rows[:limit]]


def _cells(row: dict[str, Any]) -> tuple[str, ...]:
    rank = str(row["rank"]) if row.get("rank") is not None else (row.get("label") or "?")
    if row.get("rank") is None and row.get("ranks"):
        rank = row.get("label") or ",".join(map(str, row["ranks"]))
    collective = row.get("last_collective") or ""
    if row.get("seq") is not None and "#" not in collective:
        collective = f"{collective} SeqNum {row['seq']}".strip()
    error = row.get("first_error")
    error_text = ""
    if error:
        error_text = f"{literal.cut(error.get('message') or error['text'], MAX_CELL)} ({_where(error)})"
    return (rank, row.get("host") or "", row.get("state") or "", collective, error_text)


def _where(ev: dict[str, Any]) -> str:
    source = ev.get("source", "")
    source = source.rsplit("/", 1)[-1]
    return f"{source}:{ev['line']}" if ev.get("line") else source


def print_rank_table(console: Console, facts: dict[str, Any]) -> None:
    rows = rank_rows(facts)
    if not rows:
        return
    table = Table(title="per-rank last state", title_justify="left", show_lines=False, pad_edge=False)
    for header in HEADERS:
        table.add_column(header, overflow="fold")
    for row in rows:
        table.add_row(*map(literal.text, row))
    console.print()
    console.print(table)
    total = len(facts.get("ranks") or [])
    if total > len(rows):
        console.print(f"[dim]... {total - len(rows)} more rows in --json[/dim]")
