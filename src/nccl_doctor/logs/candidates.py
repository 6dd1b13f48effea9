"""What the rules work on: candidates (causes before ranking) and the collection seen through handy views."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..model import Evidence, Severity
from .collect import Collection, Event, Proc

MAX_EVIDENCE = 8


@dataclass
class Candidate:
    """A cause the evidence points at, before ranking."""

    cause: str
    weight: float
    confidence: float
    role: str  # root, generic, echo, timeout, rule
    message: str = ""
    events: list[Event] = field(default_factory=list)
    extra_evidence: list[Evidence] = field(default_factory=list)
    ranks: set[int] = field(default_factory=set)
    hosts: set[str] = field(default_factory=set)
    fix: list[str] = field(default_factory=list)
    severity: Severity = Severity.ERROR
    explains: set[str] = field(default_factory=set)  # causes it accounts for (folded under it)
    evidence_limit: int = MAX_EVIDENCE

    def first(self) -> Event | None:
        return min(self.events, key=lambda e: e.order) if self.events else None

    def evidence(self) -> list[Evidence]:
        extra = list({(e.source, e.line, e.text): e for e in self.extra_evidence}.values())
        taken = {(e.source, e.line) for e in extra}
        chosen = spread([e for e in self.events if (e.source, e.line) not in taken], self.evidence_limit - len(extra))
        return extra + [Evidence(e.source, e.text, e.line) for e in chosen]


def spread(events: list[Event], limit: int) -> list[Event]:
    """Evidence lines in order, one per rank/host first so that several ranks show."""
    unique = {(e.source, e.line): e for e in sorted(events, key=lambda e: e.order, reverse=True)}
    ordered = sorted(unique.values(), key=lambda e: e.order)
    picked: list[Event] = []
    seen: set[object] = set()
    for e in ordered:
        who = (e.rank, e.host, e.source)
        if who not in seen:
            seen.add(who)
            picked.append(e)
    for e in ordered:
        if len(picked) >= limit:
            break
        if e not in picked:
            picked.append(e)
    return sorted(picked[:max(0, limit)], key=lambda e: e.order)


class Context:
    """The collection plus handy views of it for the rules."""

    def __init__(self, col: Collection) -> None:
        self.col = col
        self.events = col.events
        self.by_cause: dict[str, list[Event]] = defaultdict(list)
        for e in col.events:
            if e.cause:
                self.by_cause[e.cause].append(e)
        self.has_error = any(e.sig.role in ("root", "generic", "timeout") for e in col.events)

    def proc(self, event: Event) -> Proc | None:
        return self.col.proc_of(event)

    def events_of(self, *sig_ids: str) -> list[Event]:
        return [e for e in self.events if e.sig.id in sig_ids]

    def hint(self, name: str) -> list[Event]:
        return self.col.hints.get(name, [])

    def facts(self, name: str) -> list[tuple[Proc, Event]]:
        return [(p, e) for p in self.col.procs for e in p.facts.get(name, [])]

    def host_of(self, proc: Proc, event: Event | None = None) -> str:
        if event is not None and event.host:
            return event.host
        if proc.hosts:
            return ",".join(sorted(proc.hosts))
        return proc.label()

    def multi_host(self) -> bool:
        return len(self.col.hosts_seen()) > 1

    def world_size(self) -> int | None:
        sizes = [int(e.caps.get("n") or e.caps.get("ws") or 0) for e in self.col.global_facts.get("world_size", [])]
        sizes += [n for p in self.col.procs for n in p.comm_sizes.values()]
        sizes = [s for s in sizes if s > 0]
        return max(sizes) if sizes else None


def who(events: Iterable[Event]) -> str:
    events = list(events)
    ranks = sorted({e.rank for e in events if e.rank is not None})
    hosts = sorted({e.host for e in events if e.host})
    parts = []
    if ranks:
        parts.append(("rank " if len(ranks) == 1 else "ranks ") + compact(ranks))
    if hosts:
        parts.append(("on " if parts else "host ") + ",".join(hosts[:4]) + (" ..." if len(hosts) > 4 else ""))
    return (" ".join(parts) + ": ") if parts else ""


def compact(values: list[int]) -> str:
    if len(values) > 2 and values[-1] - values[0] == len(values) - 1:
        return f"{values[0]}-{values[-1]}"
    if len(values) > 8:
        return ",".join(map(str, values[:8])) + ",..."
    return ",".join(map(str, values))


def culprits(ctx: Context, ranks: set[int]) -> str:
    hosts = sorted(hosts_of(ctx, ranks))
    return f"rank {compact(sorted(ranks))}" + (f" on {', '.join(hosts[:4])}" if hosts else "")


def last_lines(ctx: Context, ranks: set[int]) -> list[Evidence]:
    """What the culprit ranks printed last: usually where they were stuck."""
    out = []
    for proc in ctx.col.procs:
        if proc.ranks & ranks and proc.last_line:
            source, line, text = proc.last_line
            out.append(Evidence(source, f"(last line) {text}", line))
        if proc.ranks & ranks and proc.fr is not None:
            last = "; ".join(c.describe() for c in proc.fr.last.values())
            out.append(Evidence(proc.fr.source, f"(flight recorder) last collective: {last}"))
    return out[:3]


def hosts_of(ctx: Context, ranks: set[int]) -> set[str]:
    return {h for p in ctx.col.procs if p.ranks & ranks for h in p.hosts}
