"""The one vocabulary every command reports in: evidence, findings, reports.

Probes and log readers produce facts (plain JSON-able dicts); rules turn facts into
findings that name a cause of the catalog; a report orders findings so that the most
likely root cause comes first, and renderers print it.
"""

from __future__ import annotations

from dataclasses import InitVar, dataclass, field, replace
from enum import Enum
from typing import Any, Callable, Iterable

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

    def within(self, kept: Finding) -> bool:
        """The same cause, for ranks (or, naming no rank, hosts) that `kept` already names."""
        if self.cause != kept.cause:
            return False
        if self.ranks:
            return set(self.ranks) <= set(kept.ranks)
        return set(self.hosts) <= set(kept.hosts)

    def to_wire(self) -> dict[str, Any]:
        """Only what is specific to the case (the catalog fills in the rest): a finding's trip between processes."""
        return {"cause": self.cause, "severity": self.severity.value, "message": self.message,
                "confidence": self.confidence, "ranks": list(self.ranks), "hosts": list(self.hosts),
                "fix": list(self.fix), "evidence": [[e.source, e.text, e.line] for e in self.evidence],
                "secondary": [s.to_wire() for s in self.secondary]}

    @classmethod
    def from_wire(cls, d: dict[str, Any], rank: int | None = None, host: str | None = None) -> Finding:
        """The finding `to_wire` sent; `rank` and `host` name the sender when the finding names nobody. The
        sender's road vouched for its cause (roads.py), so none here checks it again."""
        finding = cls(d["cause"], d["severity"], d["message"], confidence=d.get("confidence", 0.9),
                      ranks=list(d.get("ranks") or ([] if rank is None else [rank])),
                      hosts=list(d.get("hosts") or ([] if host is None else [host])), fix=list(d.get("fix", [])),
                      evidence=[Evidence(src, text, line) for src, text, line in d.get("evidence", [])],
                      secondary=[cls.from_wire(s) for s in d.get("secondary", [])])
        finding._road = "wire"  # type: ignore[attr-defined]
        return finding

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


REPRESENTATIVES = 3  # a folded finding keeps the evidence of this many of the findings it folds; the rest are counted


def fold(findings: Iterable[Finding], order: Callable[[Finding], Any] | None = Finding.sort_key,
         same: Callable[[Finding, Finding], bool] | None = None) -> list[Finding]:
    """One finding per cause and case, in order: the primary diagnosis first.

    A finding with the cause and message of one kept earlier (or that `same(new, kept)` says repeats
    it) is folded into that one: ranks and hosts united, evidence kept from the first few findings with
    a count of the rest, fixes (of the same cause) and echoes kept once. The result is sorted by `order` (stable: the
    producer's order breaks ties; None keeps it). Inputs are not changed: a finding that absorbs others
    is a copy. Repeats are found by a dictionary, so one finding per rank of a large job folds in linear time.
    """
    kept: list[Finding] = []
    exact: dict[tuple[str, str], int] = {}
    absorbed: dict[int, list[Finding]] = {}
    for f in findings:
        index = exact.get((f.cause, f.message))
        if index is None and same is not None:
            index = next((i for i, k in enumerate(kept) if same(f, k)), None)
        if index is None:
            exact[(f.cause, f.message)] = len(kept)
            kept.append(f)
        else:
            absorbed.setdefault(index, []).append(f)
    folded = [_merged(f, absorbed[i]) if i in absorbed else f for i, f in enumerate(kept)]
    return folded if order is None else sorted(folded, key=order)


def _merged(first: Finding, rest: list[Finding]) -> Finding:
    ranks, hosts, fix = dict.fromkeys(first.ranks), dict.fromkeys(first.hosts), dict.fromkeys(first.fix)
    evidence, secondary, unshown = dict.fromkeys(first.evidence), list(first.secondary), []
    for shown, f in enumerate(rest, 2):
        ranks.update(dict.fromkeys(f.ranks))
        hosts.update(dict.fromkeys(f.hosts))
        if f.cause == first.cause:  # a finding of another cause that this one explains brings evidence, not fixes
            fix.update(dict.fromkeys(f.fix))
        secondary += [s for s in f.secondary if s not in secondary]
        if shown <= REPRESENTATIVES:
            evidence.update(dict.fromkeys(f.evidence))
        elif any(e not in evidence for e in f.evidence):
            unshown.append(f)
    if unshown:
        evidence[Evidence(f"{len(unshown)} more", f"alike on {_who(unshown)}")] = None
    return replace(first, ranks=list(ranks), hosts=list(hosts), evidence=list(evidence), fix=list(fix),
                   secondary=secondary, confidence=max(f.confidence for f in [first, *rest]))


def _who(findings: list[Finding]) -> str:
    ranks = {r for f in findings for r in f.ranks}
    if ranks:
        return f"rank{'s' if len(ranks) > 1 else ''} {ranges(ranks, most=8)}"
    return "hosts " + names({h for f in findings for h in f.hosts})


def names(items: Iterable[str], most: int = 4) -> str:
    """Host names (or any names), sorted, at most `most` of them then how many more: one screen at any scale."""
    listed = sorted(set(items))
    return ", ".join(listed[:most]) + (f" and {len(listed) - most} more" if len(listed) > most else "")


def ranges(values: Iterable[int], most: int | None = None) -> str:
    """[0, 1, 2, 5, 7, 8] -> '0-2,5,7-8'; with `most`, at most that many runs, then how many values in all."""
    runs: list[list[int]] = []
    for v in sorted(set(values)):
        if runs and v == runs[-1][1] + 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    text = [f"{a}-{b}" if b > a else str(a) for a, b in runs]
    if most is not None and len(text) > most:
        return ",".join(text[:most]) + f",... ({sum(b - a + 1 for a, b in runs)} in all)"
    return ",".join(text)


@dataclass
class Report:
    """What a command found: findings, primary diagnosis first, and the facts behind them.

    Findings are folded and ordered with `fold` by `order` (severity, then confidence); None keeps the
    producer's order, for producers that rank their own (`logs`).
    """

    command: str
    findings: list[Finding] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)
    order: Callable[[Finding], Any] | None = Finding.sort_key
    keep_order: InitVar[bool] = False  # the older spelling of order=None, still used by logs/

    def __post_init__(self, keep_order: bool) -> None:
        if keep_order:
            self.order = None

    def ordered(self) -> list[Finding]:
        return fold(self.findings, self.order) if self.order is not None else list(self.findings)

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
