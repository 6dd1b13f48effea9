"""What the log rules see (LogView) and what they return (Clue).

A clue is one observation with the lines and facts it rests on. What an observation means - the causes it
argues for and how strongly - is catalog data: a signature's `strength`/`also` (catalog/signatures.toml) or
an observation's `causes` (catalog/observations.toml). Rules only observe and describe; logs/weigh.py
combines the clues.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache

from ..catalog import load_toml
from ..catalog import cause as lookup_cause
from ..catalog import causes as causes_catalog
from ..model import Evidence, Severity
from ..model import ranges
from .records import Collection, Event, Proc
from .resemblance import words
from .signatures import by_id, signatures

MAX_EVIDENCE = 8
# A log with no recognised error line still tells of a failure (LogView.failure_lines) when the reader kept a
# reported hang, a peer-to-peer test or an NCCL stack, or an error-looking line that no signature claims (a benign
# NCCL notice is claimed) holding one of these words. Not "error", "exception" or "traceback" alone: an
# application's own exception is no NCCL failure.
FAILURE_HINTS = ("hang_reported", "p2p_test", "nccl_stack")
FAILURE_WORDS = frozenset("""fail failed failure failures fault timed hang hangs hanging hung stuck stall stalls
stalled freeze freezes frozen abort aborted aborting killed refused invalid unable segmentation segfault deadlock
crash crashed crashes mismatch died terminate terminated unhandled panic bus nccl""".split())


@dataclass(frozen=True, eq=False)
class Clue:
    """One observation, the lines and facts it rests on, and what the rule says about this case."""

    observation: str  # a signature id, or an observation id of catalog/observations.toml
    message: str
    events: tuple[Event, ...] = ()  # matched lines it rests on
    evidence: tuple[Evidence, ...] = ()  # facts that are not matched lines (fingerprints, last lines)
    ranks: frozenset[int] = frozenset()
    hosts: frozenset[str] = frozenset()
    fix: tuple[str, ...] = ()
    cause: str | None = None  # for observations that let the rule pick among their causes
    strength: float | None = None  # with `cause`: a strength the rule read from a catalog table
    explains: frozenset[str] = frozenset()  # causes this clue accounts for, beyond the catalog's relations
    severity: Severity | None = None  # None: the observation's

    def meaning(self) -> dict[str, float]:
        """The causes this clue argues for, with their strengths."""
        return observation(self.observation).meaning(self.cause, self.strength)

    def first(self) -> Event | None:
        return min(self.events, key=lambda e: e.order) if self.events else None

    def all_evidence(self, limit: int = MAX_EVIDENCE) -> list[Evidence]:
        extra = list(dict.fromkeys(self.evidence))
        taken = {(e.source, e.line) for e in extra}
        chosen = spread([e for e in self.events if (e.source, e.line) not in taken], limit - len(extra))
        return (extra + [Evidence(e.source, e.text, e.line) for e in chosen])[:limit]


@dataclass(frozen=True)
class Observation:
    """What one kind of clue means: fixed causes, or a strength for the cause the rule picks among `causes`."""

    id: str
    doc: str
    causes: dict[str, float]
    pick: bool = False  # the rule names the cause (one of `causes`) on each clue
    severity: Severity = Severity.ERROR
    line: bool = False  # a signature: one kind of line, rather than a rule's reading of several facts
    family: str = ""  # observations of one family are one witness (generic codes, echoes); default: the id
    wildcard: bool = False  # the rule may name any cause (it adds weight to what other evidence names)
    differential: bool = False  # only an alternative for an unsure primary

    @property
    def witness(self) -> str:
        return self.family or self.id

    def meaning(self, picked: str | None, strength: float | None = None) -> dict[str, float]:
        if not self.pick:
            return dict(self.causes)
        if picked not in self.causes:
            raise ValueError(f"observation {self.id}: cause {picked!r} is not one of {sorted(self.causes)}")
        return {picked: self.causes[picked] if strength is None else strength}


@cache
def rule_observations() -> dict[str, Observation]:
    """The catalog's rule observations (catalog/observations.toml)."""
    table: dict[str, Observation] = {}
    error_signatures = {sig.id for sig in signatures() if sig.is_error}
    for row in load_toml("observations.toml")["observation"]:
        if row["id"] in table or row["id"] in error_signatures:
            raise ValueError(f"observation {row['id']} defined twice")
        if "strength" in row:  # the rule picks the cause: one of a list, or any ("*")
            named = causes_catalog() if row["causes"] == "*" else row["causes"]
            causes, pick = {c: float(row["strength"]) for c in named}, True
        else:
            causes, pick = {c: float(s) for c, s in row["causes"].items()}, False
        for cid in causes:
            lookup_cause(cid)
        table[row["id"]] = Observation(row["id"], " ".join(row["doc"].split()), causes, pick,
                                       Severity(row.get("severity", "error")), wildcard=row["causes"] == "*",
                                       differential=bool(row.get("differential", False)))
    return table


@cache
def signature_observation(signature_id: str) -> Observation | None:
    """What an error signature's line means (made when a log first meets it: of thousands, a log meets a few)."""
    try:
        sig = by_id(signature_id)
    except KeyError:
        return None
    if not sig.is_error:
        return None
    family = f"{sig.role} lines" if sig.role in ("generic", "echo") else ""
    return Observation(sig.id, sig.note or sig.example, sig.causes, line=True, family=family)


def observation(observation_id: str) -> Observation:
    found = rule_observations().get(observation_id) or signature_observation(observation_id)
    if found is None:
        raise KeyError(f"unknown observation {observation_id!r}")
    return found


def spread(events: list[Event], limit: int) -> list[Event]:
    """Evidence lines in order, one per rank/host first so that several ranks show."""
    unique = {(e.source, e.line): e for e in sorted(events, key=lambda e: e.order, reverse=True)}
    ordered = sorted(unique.values(), key=lambda e: e.order)
    picked: list[Event] = []
    seen: set[object] = set()
    for e in ordered:
        speaker = (e.rank, e.host, e.source)
        if speaker not in seen:
            seen.add(speaker)
            picked.append(e)
    for e in ordered:
        if len(picked) >= limit:
            break
        if e not in picked:
            picked.append(e)
    return sorted(picked[:max(0, limit)], key=lambda e: e.order)


class LogView:
    """The collection, read-only, with the views the rules need."""

    def __init__(self, col: Collection) -> None:
        self.col = col
        self.events = col.events
        self.by_signature: dict[str, list[Event]] = defaultdict(list)
        for e in col.events:
            self.by_signature[e.sig.id].append(e)
        self.failed = any(e.sig.role in ("root", "generic", "timeout") for e in col.events)

    def proc(self, event: Event) -> Proc | None:
        return self.col.proc_of(event)

    def events_of(self, *sig_ids: str) -> list[Event]:
        return [e for sid in sig_ids for e in self.by_signature.get(sid, [])]

    def events_for(self, cause: str) -> list[Event]:
        """Error lines whose main reading is `cause`."""
        return [e for e in self.events if e.sig.cause == cause]

    def words(self) -> set[str]:
        """The words of the inputs' beginnings and of every context line kept (logs/resemblance.py)."""
        return self.col.words.union(*(words(e.text.encode("utf-8", "replace"))
                                      for events in self.col.hints.values() for e in events))

    def failure_lines(self) -> list[Event]:
        """The lines by which a log with no recognised error line still tells of a failure: a reported hang, a
        peer-to-peer test, an NCCL stack, or an error-looking line no signature claims that holds a word of
        failure (FAILURE_HINTS and FAILURE_WORDS; a benign NCCL notice is claimed)."""
        told = [e for h in FAILURE_HINTS for e in self.hint(h)]
        return told + [e for e in self.hint("error_line")
                       if words(e.text.encode("utf-8", "replace")) & FAILURE_WORDS]

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

    def by_host(self, name: str, value: Callable[[Event], str]) -> tuple[dict[str, set[str]], dict[str, Event]]:
        """A fact's values per host, and the first line that shows each host's."""
        values: dict[str, set[str]] = defaultdict(set)
        first: dict[str, Event] = {}
        for proc, e in self.facts(name):
            host = self.host_of(proc, e)
            values[host].add(value(e))
            first.setdefault(host, e)
        return values, first

    def multi_host(self) -> bool:
        return len(self.col.hosts_seen()) > 1

    def world_size(self) -> int | None:
        sizes = [int(e.caps.get("n") or e.caps.get("ws") or 0) for e in self.col.global_facts.get("world_size", [])]
        sizes += [n for p in self.col.procs for n in p.comm_sizes.values()]
        sizes += [int(e.caps.get("n") or 0) for p in self.col.procs for e in p.facts.get("framework_collective", [])]
        sizes = [s for s in sizes if s > 0]
        return max(sizes) if sizes else None

    def versions(self) -> list[str]:
        return sorted({e.caps["version"] for _, e in self.facts("nccl_version")})

    def hosts_of(self, ranks: Iterable[int]) -> frozenset[str]:
        ranks = set(ranks)
        return frozenset(h for p in self.col.procs if p.ranks & ranks for h in p.hosts)

    def culprits(self, ranks: set[int]) -> str:
        hosts = sorted(self.hosts_of(ranks))
        return f"rank {ranges(sorted(ranks), most=8)}" + (f" on {', '.join(hosts[:4])}" if hosts else "")

    def last_lines(self, ranks: set[int]) -> tuple[Evidence, ...]:
        """What the given ranks printed last: usually where they were stuck."""
        out = []
        for proc in self.col.procs:
            if proc.ranks & ranks and proc.last_line:
                source, line, text = proc.last_line
                out.append(Evidence(source, f"(last line) {text}", line))
            if proc.ranks & ranks and proc.fr is not None:
                last = "; ".join(c.describe() for c in proc.fr.last.values())
                out.append(Evidence(proc.fr.source, f"(flight recorder) last collective: {last}"))
        return tuple(out[:3])


def ranks_of(events: Iterable[Event]) -> frozenset[int]:
    return frozenset(e.rank for e in events if e.rank is not None)


def hosts_in(events: Iterable[Event]) -> frozenset[str]:
    return frozenset(e.host for e in events if e.host)


def who(events: Iterable[Event]) -> str:
    """'rank 3 on node-1: ' for a message prefix ('' when the lines do not say)."""
    events = list(events)
    ranks = sorted(ranks_of(events))
    hosts = sorted(hosts_in(events))
    parts = []
    if ranks:
        parts.append(("rank " if len(ranks) == 1 else "ranks ") + ranges(ranks, most=8))
    if hosts:
        parts.append(("on " if parts else "host ") + ",".join(hosts[:4]) + (" ..." if len(hosts) > 4 else ""))
    return (" ".join(parts) + ": ") if parts else ""


def unique(events: Iterable[Event]) -> list[Event]:
    """Events in order of first appearance, each line once."""
    seen: set[tuple[str, int]] = set()
    out = []
    for e in events:
        if (e.source, e.line) not in seen:
            seen.add((e.source, e.line))
            out.append(e)
    return out


def as_evidence(events: Iterable[Event]) -> tuple[Evidence, ...]:
    return tuple(Evidence(e.source, e.text, e.line) for e in events)


def clip(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


__all__ = ["Clue", "LogView", "Observation", "observation", "spread", "who", "ranks_of",
           "hosts_in", "as_evidence", "clip", "unique", "MAX_EVIDENCE"]
