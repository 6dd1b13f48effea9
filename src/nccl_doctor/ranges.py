"""Rank lists written one way everywhere: '0-63', '0,2,5', '0-3,8,10-11'."""

from __future__ import annotations

from collections.abc import Iterable


def compact(values: Iterable[int], limit: int = 8) -> str:
    """Sorted distinct integers as runs ('0-3,8,10-11'); more than `limit` runs end in ',...'."""
    ordered = sorted(set(values))
    runs: list[str] = []
    start = prev = None
    for v in ordered + [None]:  # type: ignore[list-item]
        if start is not None and (v is None or v != prev + 1):
            runs.append(str(start) if start == prev else f"{start}-{prev}" if prev > start + 1 else f"{start},{prev}")
            start = None
        if v is not None and start is None:
            start = v
        prev = v
    if len(runs) > limit:
        return ",".join(runs[:limit]) + ",..."
    return ",".join(runs)
