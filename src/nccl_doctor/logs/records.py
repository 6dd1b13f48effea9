"""What reading keeps: matched lines (Event), facts per process (Proc) and everything read (Collection).

Everything here is bounded whatever the input size: events per signature and process, facts per process,
communicators per process, the last collectives per process.
"""

from __future__ import annotations

import os
from collections import defaultdict, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..redact import redact_text
from .flight_recorder import DumpSummary
from .signatures import Signature

MAX_TEXT = 2000  # characters of a line kept as evidence
EVENTS_PER_KEY = 6  # events kept per (signature, process), and events per fact and process
MAX_EVENTS = 20000
COLL_TAIL = 64  # NCCL_DEBUG_SUBSYS=COLL calls kept per process (its last ones) ...
COLL_BUDGET = 16384  # ... fewer when thousands of sources share this many in all (at least COLL_TAIL_MIN each)
COLL_TAIL_MIN = 8


def coll_tail(sources: int) -> int:
    """COLL calls kept per source's process when `sources` are read: memory stays bounded at any job size."""
    return max(COLL_TAIL_MIN, min(COLL_TAIL, COLL_BUDGET // max(sources, 1)))


WORDS_BUDGET = 1 << 20  # bytes of the inputs' beginnings whose words are kept (logs/resemblance.py) ...
WORDS_PER_SOURCE = 64 << 10  # ... at most this much of each source


def words_sample(sources: int) -> int:
    """Bytes at the beginning of each source whose words are kept: the cost stays bounded at any job size."""
    return min(WORDS_PER_SOURCE, WORDS_BUDGET // max(sources, 1))


COMM_RANKS = 16  # comm init lines kept per process to tell its global rank
CommRank = tuple[str, int, int, int]  # a comm init line as kept to tell the rank: source, line, nranks, rank
MAX_COMMS = 64  # communicators whose init phases are kept per process
MAX_DEVS = 4  # GPU indexes kept per process

Key = tuple[Any, ...]
Call = tuple[int, str, int, str, "Event"]  # a COLL call: opCount, op, count, comm, the line


@dataclass(slots=True)
class Event:
    """One matched line."""

    sig: Signature
    source: str
    line: int
    text: str
    caps: dict[str, str]
    key: Key
    message: str = ""  # the text without launcher/NCCL/PyTorch prefixes
    rank: int | None = None
    host: str | None = None
    pid: int | None = None
    ts: float | None = None
    ts_kind: str | None = None
    order: tuple[int, int] = (0, 0)

    @property
    def cause(self) -> str | None:
        return self.sig.cause


@dataclass(slots=True)  # thousands of them: no dict of attributes each
class Proc:
    """Facts about one process (one rank, or the ranks one process drives), merged over its keys."""

    keys: set[Key] = field(default_factory=set)
    ranks: set[int] = field(default_factory=set)
    hosts: set[str] = field(default_factory=set)
    pids: set[int] = field(default_factory=set)
    devs: set[int] = field(default_factory=set)
    rank_inferred: bool = False  # rank guessed from the GPU index (single host, nothing better)
    sources: set[str] = field(default_factory=set)
    facts: dict[str, list[Event]] = field(default_factory=lambda: defaultdict(list))
    env: dict[str, str] = field(default_factory=dict)
    transports: set[str] = field(default_factory=set)
    init_phases: dict[str, frozenset[str]] = field(default_factory=dict)  # per communicator, shared (_phases)
    comm_sizes: dict[str, int] = field(default_factory=dict)
    last_line: tuple[str, int, str] | None = None
    last_line_order: tuple[int, int] = (-1, -1)
    colls: deque[Call] | tuple[()] = ()  # the last COLL_TAIL, in a deque made with the first (add_colls)
    fr: DumpSummary | None = None
    # the first comm init lines of a process that printed its pid; only identity resolution reads them (then they
    # go), so they are kept as four values, not as events (a tenth of the memory, which thousands of ranks need)
    comm_ranks: list[CommRank] = field(default_factory=list)

    def fact(self, name: str) -> Event | None:
        events = self.facts.get(name)
        return events[0] if events else None

    def label(self) -> str:
        if self.ranks:
            return "rank " + _span(self.ranks)
        if self.hosts and self.pids:
            return f"{min(self.hosts)} pid {min(self.pids)}"
        return os.path.basename(min(self.sources)) if self.sources else "?"

    def add_fact(self, name: str, event: Event, room: int = EVENTS_PER_KEY) -> None:
        """The first `room` events of a fact."""
        events = self.facts[name]
        if len(events) < room:
            events.append(event)

    def add_comm_rank(self, comm_rank: CommRank) -> None:
        if len(self.comm_ranks) < COMM_RANKS:
            self.comm_ranks.append(comm_rank)

    def add_colls(self, calls: Iterable[Call]) -> None:
        """Keep the last COLL_TAIL calls. Most processes of a large job show none: no deque (750 bytes) for them."""
        for call in calls:
            if not isinstance(self.colls, deque):
                self.colls = deque(maxlen=COLL_TAIL)
            self.colls.append(call)

    def add_dev(self, dev: int) -> None:
        """The GPU indexes a process printed, its MAX_DEVS lowest: the same whichever readings brought them."""
        self.devs.add(dev)
        if len(self.devs) > MAX_DEVS:
            self.devs.remove(max(self.devs))

    def add_comm_phase(self, comm: str, phase: str, nranks: int) -> bool:
        """Record a communicator's init phase; True when the process had not shown this phase before."""
        news = not any(phase in phases for phases in self.init_phases.values())
        self.init_phases[comm] = _phases(self.init_phases.get(comm, frozenset()) | {phase})
        self.comm_sizes[comm] = nranks
        if len(self.init_phases) > MAX_COMMS:
            self._forget_a_comm()
        return news

    def _forget_a_comm(self) -> None:
        """Drop the oldest communicator of a kind (completed, else pending) that has another of its kind, never the
        largest: what the rules read stays the same (one pending or not, one completed or not, the largest size)."""
        largest = max(self.comm_sizes, key=lambda c: self.comm_sizes[c])
        for done in (True, False):
            kind = [c for c, phases in self.init_phases.items() if ("COMPLETE" in phases) == done]
            spare = [c for c in kind if c != largest]
            if len(kind) >= 2 and spare:
                del self.init_phases[spare[0]]
                self.comm_sizes.pop(spare[0], None)
                return

    def absorb(self, other: Proc) -> None:
        """Add what a later reading of the same key saw, as if it had been read right after this one."""
        self.keys |= other.keys
        self.ranks |= other.ranks
        self.hosts |= other.hosts
        self.pids |= other.pids
        for dev in other.devs:
            self.add_dev(dev)
        self.sources |= other.sources
        for name, events in other.facts.items():
            if name == "fingerprint":  # only the latest collective matters
                self.facts[name] = list(events)
                continue
            for event in events:
                self.add_fact(name, event)
        for comm_rank in other.comm_ranks:
            self.add_comm_rank(comm_rank)
        for var, value in other.env.items():
            self.env.setdefault(var, value)
        self.transports |= other.transports
        for comm, phases in other.init_phases.items():
            for phase in sorted(phases, reverse=True):  # START before COMPLETE
                self.add_comm_phase(comm, phase, other.comm_sizes.get(comm, 0))
        self.take_last_line(other)
        self.add_colls(other.colls)
        self.fr = other.fr or self.fr

    def merge(self, other: Proc) -> None:
        """Add the facts of another key of the same process (identity resolution)."""
        self.keys |= other.keys
        self.ranks |= other.ranks
        self.hosts |= {h for h in other.hosts if h != "?"}
        self.pids |= other.pids
        self.devs |= other.devs
        self.sources |= other.sources
        for name, events in other.facts.items():
            room = EVENTS_PER_KEY - len(self.facts[name])
            self.facts[name].extend(events[:max(0, room)])
        for var, value in other.env.items():
            self.env.setdefault(var, value)
        self.transports |= other.transports
        for comm, phases in other.init_phases.items():
            self.init_phases[comm] = _phases(self.init_phases.get(comm, frozenset()) | phases)
        self.comm_sizes.update(other.comm_sizes)
        self.take_last_line(other)
        self.add_colls(other.colls)
        self.fr = self.fr or other.fr

    def take_last_line(self, other: Proc) -> None:
        if other.last_line_order > self.last_line_order:
            self.last_line, self.last_line_order = other.last_line, other.last_line_order


_PHASE_SETS: dict[frozenset[str], frozenset[str]] = {}


def _phases(phases: frozenset[str]) -> frozenset[str]:
    """One object per set of init phases (there are three): not a set per communicator of thousands of processes."""
    return _PHASE_SETS.setdefault(phases, phases)


def _span(values: set[int]) -> str:
    ordered = sorted(values)
    if len(ordered) > 2 and ordered[-1] - ordered[0] == len(ordered) - 1:
        return f"{ordered[0]}-{ordered[-1]}"
    return ",".join(map(str, ordered))


@dataclass
class Collection:
    """Everything read: events, per-process facts, flight-recorder dumps, problems."""

    events: list[Event] = field(default_factory=list)
    procs: list[Proc] = field(default_factory=list)
    hints: dict[str, list[Event]] = field(default_factory=lambda: defaultdict(list))
    global_facts: dict[str, list[Event]] = field(default_factory=lambda: defaultdict(list))
    elastic_root: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    sources_read: list[str] = field(default_factory=list)
    source_lines: dict[str, int] = field(default_factory=dict)  # lines per source read
    lines: int = 0
    bytes: int = 0
    dropped_events: int = 0
    engine: str = ""
    words: set[str] = field(default_factory=set)  # words of the sources' beginnings (logs/resemblance.py)

    def proc_of(self, event: Event) -> Proc | None:
        return self._by_key.get(event.key) if hasattr(self, "_by_key") else None

    def ranks_seen(self) -> set[int]:
        return {r for p in self.procs for r in p.ranks}

    def hosts_seen(self) -> set[str]:
        return {h for p in self.procs for h in p.hosts}


def kept(text: str) -> str:
    """A line as the report may keep it: secrets redacted first, then cut (a cut could hide a secret's shape)."""
    return redact_text(text.strip())[:MAX_TEXT]
