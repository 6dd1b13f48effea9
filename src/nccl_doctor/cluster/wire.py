"""Findings as plain JSON, for the trip from a rank to the judge over the store."""

from __future__ import annotations

from typing import Any

from ..model import Evidence, Finding


def finding_to_wire(f: Finding) -> dict[str, Any]:
    """Only what is specific to the case; the catalog fills in title, explanation and generic fix."""
    return {"cause": f.cause, "severity": f.severity.value, "message": f.message, "confidence": f.confidence,
            "ranks": list(f.ranks), "hosts": list(f.hosts), "fix": list(f.fix),
            "evidence": [[e.source, e.text, e.line] for e in f.evidence]}


def finding_from_wire(d: dict[str, Any], rank: int | None = None, host: str | None = None) -> Finding:
    ranks = list(d.get("ranks") or ([] if rank is None else [rank]))
    hosts = list(d.get("hosts") or ([] if host is None else [host]))
    return Finding(d["cause"], d["severity"], d["message"], confidence=d.get("confidence", 0.9), ranks=ranks,
                   hosts=hosts, fix=list(d.get("fix", [])),
                   evidence=[Evidence(src, text, line) for src, text, line in d.get("evidence", [])])
