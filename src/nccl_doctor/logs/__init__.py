"""Post-mortem diagnosis from logs and flight-recorder dumps (`nccl-doctor logs`).

Public API:
    diagnose_paths(paths) -> Report      files, directories, globs, "-" for stdin, .gz/.bz2/.xz, FR dumps
    diagnose_text(text, source) -> list[Finding]   classify an error text (exception string, stderr)

Road: sources -> reading (engine matches, identity, records: events and per-process facts) -> diagnose
(rules, weighing) -> Report with facts. Works without torch and without a GPU.
"""

from __future__ import annotations

import io
from collections.abc import Callable

from ..model import Finding, InputError, Report
from .engine import default_engine
from .facts import build_facts
from .reading import Collector, OnBytes
from .records import Collection
from .sources import Source, expand, input_size

__all__ = ["diagnose_paths", "diagnose_text", "collect_paths", "Collection"]


def collect_paths(paths: list[str], engine: str | None = None, on_bytes: OnBytes | None = None,
                  on_start: Callable[[int], OnBytes | None] | None = None,
                  meanwhile: Callable[[], object] | None = None) -> Collection:
    """Read every input (problems are recorded, never raised) and return what was seen.

    on_start, if given, is told the size of the input files before reading and may return an on_bytes;
    meanwhile, if given, runs once here while worker processes read (or before reading, without them)."""
    sources, problems = expand(paths)
    try:
        collector = Collector(default_engine(engine))
    except ImportError:
        raise InputError(f"the {engine} engine is not installed here; use --engine auto") from None
    if on_start is not None:
        on_bytes = on_start(input_size(sources)) or on_bytes
    collector.on_bytes = on_bytes
    collector.add_sources(sources, meanwhile=meanwhile)
    col = collector.finish()
    col.problems[:0] = problems
    return col


def diagnose_paths(paths: list[str], engine: str | None = None,
                   on_start: Callable[[int], OnBytes | None] | None = None) -> Report:
    """Diagnose logs and dumps; raises InputError only when nothing at all could be read."""
    # the rules and the catalog they weigh with load while the workers read: a tenth of a second off each run
    col = collect_paths(paths, engine, on_start=on_start, meanwhile=_diagnosis)
    if not col.sources_read:
        detail = "; ".join(col.problems[:3]) or "no input given"
        raise InputError(f"nothing could be read ({detail}); pass log files, directories, globs or - for stdin")
    findings = _diagnosis()(col)
    return Report(command="logs", findings=findings, facts=build_facts(col, findings), keep_order=True)


def diagnose_text(text: str, source: str = "<text>") -> list[Finding]:
    """Classify an error text with the signature catalog, primary cause first ([] if nothing is recognised)."""
    collector = Collector(default_engine())
    collector.add_source(Source(name=source, stream=io.BytesIO(text.encode("utf-8", "replace"))))
    return _diagnosis()(collector.finish())


def _diagnosis() -> Callable[[Collection], list[Finding]]:
    """diagnose(), imported when first needed: its rules and their catalog are most of this package's import."""
    from .diagnose import diagnose

    return diagnose
