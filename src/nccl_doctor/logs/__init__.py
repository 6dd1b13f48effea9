"""Post-mortem diagnosis from logs and flight-recorder dumps (`nccl-doctor logs`).

Public API:
    diagnose_paths(paths) -> Report      files, directories, globs, "-" for stdin, .gz/.bz2/.xz, FR dumps
    diagnose_text(text, source) -> list[Finding]   classify an error text (exception string, stderr)

Road: sources (reading) -> collect (matched events, per-process facts) -> diagnose (correlation,
ranking) -> Report. Works without torch and without a GPU.
"""

from __future__ import annotations

import io

from ..model import Finding, InputError, Report
from .collect import Collection, Collector
from .diagnose import diagnose
from .engine import default_engine
from .sources import Source, expand
from .summary import build_facts

__all__ = ["diagnose_paths", "diagnose_text", "collect_paths", "Collection"]


def collect_paths(paths: list[str], engine: str | None = None) -> Collection:
    """Read every input (problems are recorded, never raised) and return what was seen."""
    sources, problems = expand(paths)
    try:
        collector = Collector(default_engine(engine))
    except ImportError:
        raise InputError("the hyperscan engine is not installed: `pip install 'nccl-doctor[fast]'` "
                         "or use --engine portable") from None
    for source in sources:
        collector.add_source(source)
    col = collector.finish()
    col.problems[:0] = problems
    return col


def diagnose_paths(paths: list[str], engine: str | None = None) -> Report:
    """Diagnose logs and dumps; raises InputError only when nothing at all could be read."""
    col = collect_paths(paths, engine)
    if not col.sources_read:
        detail = "; ".join(col.problems[:3]) or "no input given"
        raise InputError(f"nothing could be read ({detail}); pass log files, directories, globs or - for stdin")
    findings = diagnose(col)
    return Report(command="logs", findings=findings, facts=build_facts(col, findings), keep_order=True)


def diagnose_text(text: str, source: str = "<text>") -> list[Finding]:
    """Classify an error text with the signature catalog, primary cause first ([] if nothing is recognised)."""
    collector = Collector(default_engine())
    collector.add_source(Source(name=source, stream=io.BytesIO(text.encode("utf-8", "replace"))))
    return diagnose(collector.finish())
