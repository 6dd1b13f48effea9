"""The one vocabulary every command reports in: evidence, findings, reports.

Probes and log readers produce facts (plain JSON-able dicts); rules turn facts into
findings that name a cause of the catalog; a report orders findings so that the most
likely root cause comes first, and renderers print it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from . import __version__
from .catalog import cause as lookup_cause


class Severity(str, Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    @property
    def rank(self) -> int:
        """Lower is worse, for sorting."""
        return {"error": 0, "warning": 1, "info": 2}[self.value]


class InputError(Exception):
    """Unusable input or arguments: printed as one line, exit code 2."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where SIGINT raises KeyboardInterrupt, so every clean-up path runs; exit code 143."""


@dataclass(frozen=True)
class Evidence:
    """Where a finding was seen: a log file and line, a probe, an env variable."""

    source: str
    text: str
    line: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "line": self.line, "text": self.text}


@dataclass
class Finding:
    """A cause observed, with how sure we are and what shows it.

    `message` says what was seen in this case ("NCCL_SOCKET_IFNAME=eth2 matches no
    interface on node-3"); the cause's title, explanation and generic fix come from
    the catalog. `fix` holds steps specific to this case, shown before the generic ones.
    `secondary` holds symptoms that follow from this finding (echoes on other ranks). `reasons` are further
    observations that support it; `alternative_to` names the primary cause when this finding is another
    reading of the same evidence rather than a separate problem.
    """

    cause: str
    severity: Severity
    message: str
    confidence: float = 0.9
    ranks: list[int] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    evidence: list[Evidence] = field(default_factory=list)
    fix: list[str] = field(default_factory=list)
    secondary: list[Finding] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    alternative_to: str | None = None

    def __post_init__(self) -> None:
        lookup_cause(self.cause)  # an unknown cause id is a programming error: fail loudly
        self.severity = Severity(self.severity)
        self.confidence = max(0.0, min(1.0, float(self.confidence)))

    @property
    def category(self) -> str:
        return lookup_cause(self.cause).category

    def fix_steps(self) -> list[str]:
        generic = [step for step in lookup_cause(self.cause).fix if step not in self.fix]
        return [*self.fix, *generic]

    def sort_key(self) -> tuple[int, float]:
        return (self.severity.rank, -self.confidence)

    def to_json(self) -> dict[str, Any]:
        c = lookup_cause(self.cause)
        return {
            "cause": c.id,
            "category": c.category,
            "severity": self.severity.value,
            "confidence": round(self.confidence, 2),
            "title": c.title,
            "message": self.message,
            "explanation": c.explanation,
            "fix": self.fix_steps(),
            "references": list(c.references),
            "ranks": sorted(set(self.ranks)),
            "hosts": sorted(set(self.hosts)),
            "evidence": [e.to_json() for e in self.evidence],
            "secondary": [s.to_json() for s in self.secondary],
            **({"reasons": list(self.reasons)} if self.reasons else {}),
            **({"alternative_to": self.alternative_to} if self.alternative_to else {}),
        }


@dataclass
class Report:
    """What a command found: findings (primary diagnosis first) and the facts behind them."""

    command: str
    findings: list[Finding] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)
    keep_order: bool = False  # True when the producer already ranked findings (e.g. `logs`)

    def ordered(self) -> list[Finding]:
        if self.keep_order:
            return list(self.findings)
        return sorted(self.findings, key=Finding.sort_key)  # stable: producer order breaks ties

    @property
    def verdict(self) -> str:
        severities = {f.severity for f in self.findings}
        if Severity.ERROR in severities:
            return "error"
        return "warning" if Severity.WARNING in severities else "ok"

    @property
    def exit_code(self) -> int:
        return 1 if self.verdict == "error" else 0

    def to_json(self) -> dict[str, Any]:
        return {
            "tool": "nccl-doctor",
            "version": __version__,
            "command": self.command,
            "verdict": self.verdict,
            "findings": [f.to_json() for f in self.ordered()],
            "facts": self.facts,
        }
