"""Reading: sources -> matched events and facts per process, in bounded memory.

The engine reports candidate lines; each is decoded, attributed (rank/host/pid/time), re-checked with
its signatures' Python regexes and recorded: error-like matches as events, facts and hints as
per-process facts. Only the last lines of each source are read in full (for each rank's last state
and for lines too frequent to handle everywhere, such as NCCL_DEBUG_SUBSYS=COLL calls).
"""

from __future__ import annotations

import io
import os
import re
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any

from ..redact import redact_text
from . import flight_recorder as fr
from .attribution import LineInfo, attribute, rank_from_path
from .engine import Engine, default_engine
from .signatures import Signature, signatures
from .sources import READ_ERRORS, Chunk, ReadStats, Source, iter_chunks, looks_binary, open_stream, sniff

MAX_TEXT = 2000  # characters of a line kept as evidence
EVENTS_PER_KEY = 6  # events kept per (signature, process)
MAX_EVENTS = 20000
TAIL_BYTES = 256 * 1024  # the end of each source read line by line
TAIL_LINES = 5000  # at most this many lines from the end of each source
TAIL_QUIET = 300  # ... stopping once this many lines brought no new process
COLL_TAIL = 64
HINTS_HEAD = 12  # context lines kept per hint: the first ones ...
HINTS_TAIL = 12  # ... and the last ones
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")

Key = tuple[Any, ...]


@dataclass
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


@dataclass
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
    init_phases: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    comm_sizes: dict[str, int] = field(default_factory=dict)
    last_line: tuple[str, int, str] | None = None
    last_line_order: tuple[int, int] = (-1, -1)
    colls: deque[tuple[int, str, int, str, Event]] = field(default_factory=lambda: deque(maxlen=COLL_TAIL))
    fr: fr.DumpSummary | None = None

    def fact(self, name: str) -> Event | None:
        events = self.facts.get(name)
        return events[0] if events else None

    def label(self) -> str:
        if self.ranks:
            return "rank " + _span(self.ranks)
        if self.hosts and self.pids:
            return f"{min(self.hosts)} pid {min(self.pids)}"
        return os.path.basename(min(self.sources)) if self.sources else "?"


def _span(values: set[int]) -> str:
    ordered = sorted(values)
    if len(ordered) > 2 and ordered[-1] - ordered[0] == len(ordered) - 1:
        return f"{ordered[0]}-{ordered[-1]}"
    return ",".join(map(str, ordered))


class _UnionFind:
    def __init__(self) -> None:
        self.parent: dict[Key, Key] = {}

    def find(self, k: Key) -> Key:
        parent = self.parent.setdefault(k, k)
        while parent != k:
            grand = self.parent[parent]
            self.parent[k] = grand
            k, parent = parent, grand
        return k

    def union(self, a: Key, b: Key) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[rb] = ra


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

    def proc_of(self, event: Event) -> Proc | None:
        return self._by_key.get(event.key) if hasattr(self, "_by_key") else None

    def ranks_seen(self) -> set[int]:
        return {r for p in self.procs for r in p.ranks}

    def hosts_seen(self) -> set[str]:
        return {h for p in self.procs for h in p.hosts}


class Collector:
    def __init__(self, engine: Engine | None = None) -> None:
        sigs = signatures()
        self.sigs = sigs
        self.main_sigs = [s for s in sigs if s.scope == "all"]
        self.tail_sigs = [s for s in sigs if s.scope == "tail"]
        self.engine = engine or default_engine()
        self.out = Collection(engine=self.engine.name)
        self.uf = _UnionFind()
        self.proc_data: dict[Key, Proc] = {}
        self.kept: dict[tuple[str, Key], int] = defaultdict(int)
        self.source_index = 0
        self.hint_tail: dict[str, deque[Event]] = defaultdict(lambda: deque(maxlen=HINTS_TAIL))
        self._elastic_current: dict[str, Any] | None = None

    # ------------------------------------------------------------------ reading

    def add_source(self, source: Source) -> None:
        self.source_index += 1
        try:
            stream, _compression = open_stream(source)
        except READ_ERRORS as exc:
            self.out.problems.append(f"{source.name}: cannot read ({getattr(exc, 'strerror', None) or exc})")
            return
        try:
            self._read_any(source, stream)
        except READ_ERRORS as exc:
            self.out.problems.append(f"{source.name}: cannot read ({getattr(exc, 'strerror', None) or exc})")
        finally:
            if source.stream is None:
                stream.close()

    def _read_any(self, source: Source, stream: Any) -> None:
        """A flight-recorder dump (pickle or JSON), or a log."""
        head, _ = sniff(stream)
        if fr.is_pickle(head):
            self._add_dump(source, stream, head)
            return
        if fr.is_json_dump(head):
            data = stream.read(fr.MAX_JSON_DUMP_BYTES + 1)
            summary = fr.parse_json_dump(data) if len(data) <= fr.MAX_JSON_DUMP_BYTES else None
            if summary is not None:
                self._record_dump(source, summary)
                return
            stream = _Prefixed(data, stream)  # not a dump (e.g. JSON-lines): read it as a log
        if looks_binary(head):
            self.out.problems.append(f"{source.name}: binary file, skipped")
            return
        self._read_log(source, stream)

    def _read_log(self, source: Source, stream: Any) -> None:
        stats = ReadStats()
        file_rank = rank_from_path(source.path) if source.path else None
        tail: deque[Chunk] = deque()
        tail_bytes = 0
        lines = 0
        for chunk in iter_chunks(stream, stats):
            self.out.bytes += len(chunk.data)
            pos, line_no = 0, chunk.first_line
            for start, end, ids in self.engine.scan(chunk.data):
                line_no += chunk.data.count(b"\n", pos, start)  # hits come in line order
                pos = start
                self._on_line(source, file_rank, line_no, chunk.data[start:end], ids)
            tail.append(chunk)
            tail_bytes += len(chunk.data)
            while len(tail) > 1 and tail_bytes - len(tail[0].data) >= TAIL_BYTES:
                tail_bytes -= len(tail.popleft().data)
            lines = chunk.first_line + chunk.data.count(b"\n") - 1
        self._read_tail(source, file_rank, tail)
        self.out.lines += lines
        self.out.source_lines[source.name] = lines
        if stats.problem:
            self.out.problems.append(f"{source.name}: {stats.problem}")
        if lines == 0 and not tail:
            if not stats.problem:
                self.out.problems.append(f"{source.name}: empty")
            return
        self.out.sources_read.append(source.name)
        if stats.truncated_lines:
            self.out.problems.append(f"{source.name}: {stats.truncated_lines} line(s) longer than 64 KiB were cut")

    def _add_dump(self, source: Source, stream: Any, head: bytes) -> None:
        try:
            summary = fr.read_dump(stream, head)
        except fr.UnsafeDump as exc:
            self.out.problems.append(f"{source.name}: rejected flight-recorder dump: {exc}")
            return
        self._record_dump(source, summary)

    def _record_dump(self, source: Source, summary: fr.DumpSummary) -> None:
        summary.source = source.name
        rank = rank_from_path(source.path or source.name)
        key: Key = ("rank", rank) if rank is not None else ("src", source.name)
        self.uf.find(key)
        proc = self._proc(key)
        proc.fr = summary
        proc.sources.add(source.name)
        if rank is not None:
            proc.ranks.add(rank)
        self.out.sources_read.append(source.name)

    # ------------------------------------------------------------------ one line

    def _identify(self, source: Source, file_rank: int | None, info: LineInfo) -> Key:
        keys: list[Key] = []
        if info.pid is not None:
            keys.append(("hp", info.host or "?", info.pid))
        rank = info.rank if info.rank is not None else file_rank
        if rank is not None:
            keys.append(("rank", rank))
        if file_rank is not None and rank == file_rank:
            keys.append(("src", source.name))
        if not keys:
            keys.append(("src", source.name) if info.host is None else ("host", info.host))
        first = keys[0]
        self.uf.find(first)
        for other in keys[1:]:
            self.uf.union(first, other)
        proc = self._proc(first)
        proc.sources.add(source.name)
        if rank is not None:
            proc.ranks.add(rank)
        if info.host:
            proc.hosts.add(info.host)
        if info.pid is not None:
            proc.pids.add(info.pid)
            if info.dev is not None and len(proc.devs) < 4:
                proc.devs.add(info.dev)
        return first

    def _proc(self, key: Key) -> Proc:
        proc = self.proc_data.get(key)
        if proc is None:
            proc = self.proc_data[key] = Proc(keys={key})
        return proc

    def _on_line(self, source: Source, file_rank: int | None, line_no: int, raw: bytes, ids: list[int]) -> None:
        text = _clean(raw)
        info = attribute(text)
        matched: list[tuple[Signature, dict[str, str]]] = []
        for index in ids:
            sig = self.sigs[index]
            caps = sig.match(info.message)
            if caps is None:
                caps = sig.match(text)
            if caps is not None:
                matched.append((sig, caps))
        if not matched:
            return
        # A written signature that knows the line (a fact, a specific error or an echo) overrides the generated
        # templates; a written catch-all (generic) does not hide a template's more precise reading.
        # the other readings are all kept for the weighing. Hints marked `unclaimed` only stand for lines nothing
        # else recognised.
        if any(not s.prefilter and not s.addon and s.role not in ("hint", "generic") for s, _ in matched):
            matched = [(s, c) for s, c in matched if not s.prefilter]
        if any(not s.unclaimed for s, _ in matched):  # recognised: not one of the lines nobody explains
            matched = [(s, c) for s, c in matched if not s.unclaimed]
        key = self._identify(source, file_rank, info)
        order = (self.source_index, line_no)
        for sig, caps in matched:
            event = Event(sig=sig, source=source.name, line=line_no, text=kept(text),
                          message=kept(info.message),
                          caps=caps, key=key, rank=info.rank if info.rank is not None else file_rank,
                          host=info.host, pid=info.pid, ts=info.ts, ts_kind=info.ts_kind, order=order)
            self._record(event)

    def _record(self, event: Event) -> None:
        sig = event.sig
        if sig.role == "fact":
            self._record_fact(event)
            return
        if sig.role == "hint":
            name = sig.hint or sig.id
            kept = self.out.hints[name]
            if len(kept) < HINTS_HEAD:
                kept.append(event)
            else:  # and the latest ones: what was going on when the job failed
                self.hint_tail[name].append(event)
            return
        slot = (sig.id, event.key)
        self.kept[slot] += 1
        if self.kept[slot] > EVENTS_PER_KEY or len(self.out.events) >= MAX_EVENTS:
            self.out.dropped_events += 1
            return
        self.out.events.append(event)

    def _record_fact(self, event: Event) -> None:
        name = event.sig.fact or event.sig.id
        caps = event.caps
        proc = self._proc(event.key)
        if name == "nccl_env":
            proc.env.setdefault(caps.get("var", ""), caps.get("value", ""))
        elif name == "transport":
            proc.transports.add(_transport_name(caps.get("transport", "")))
            return
        elif name == "comm_init":
            comm = caps.get("commid") or caps.get("comm", "?")
            proc.init_phases[comm].add(caps.get("phase", ""))
            proc.comm_sizes[comm] = int(caps.get("nranks", 0))
            self._link_comm_rank(event)
        elif name == "rank_host":
            self._link_rank_host(event)
        elif name == "elastic_root_cause":
            self._elastic_current = {"source": event.source, "line": event.line}
            self.out.elastic_root.append(self._elastic_current)
            return
        elif name == "elastic_field":
            current = self._elastic_current
            if current is not None and current["source"] == event.source and event.line - current["line"] < 12:
                current.setdefault(caps.get("field", ""), caps.get("value", "").strip())
            return
        elif name == "fingerprint":  # only each process's latest collective matters
            proc.facts[name] = [event]
            return
        elif name in ("world_size", "desync", "desync_at"):
            if len(self.out.global_facts[name]) < 64:
                self.out.global_facts[name].append(event)
            return
        events = proc.facts[name]
        if len(events) < EVENTS_PER_KEY:
            events.append(event)

    def _link_comm_rank(self, event: Event) -> None:
        if event.pid is not None:
            comm_ranks = self._proc(event.key).facts["comm_rank"]
            if len(comm_ranks) < 16:
                comm_ranks.append(event)

    def _link_rank_host(self, event: Event) -> None:
        caps = event.caps
        rank = int(caps["rank"])
        host = caps.get("host")
        hp: Key | None = ("hp", host or "?", int(caps["pid"])) if caps.get("pid") else None
        rank_key: Key = ("rank", rank)
        proc = self._proc(rank_key)
        proc.ranks.add(rank)
        if host:
            proc.hosts.add(host)
        self.uf.find(rank_key)
        if hp is not None:
            self.uf.union(hp, rank_key)
            self._proc(hp).hosts.add(host or "?")
        elif host:
            self.uf.union(("host-rank", host, rank), rank_key)

    # ------------------------------------------------------------------ tails

    def _read_tail(self, source: Source, file_rank: int | None, tail: deque[Chunk]) -> None:
        """Read the end of a source backwards until no new process has shown up for a while."""
        if not tail:
            return
        data = b"".join(c.data for c in tail)
        first_line = tail[0].first_line
        lines = data.split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        picked: list[tuple[int, str, LineInfo]] = []
        seen: set[Key] = set()
        quiet = 0
        for offset in range(len(lines) - 1, max(-1, len(lines) - 1 - TAIL_LINES), -1):
            raw = lines[offset]
            if not raw.strip():
                continue
            text = _clean(raw)
            info = attribute(text)
            message = info.message.strip()
            if not message or set(message) <= set("-=*#[]. "):
                continue
            picked.append((first_line + offset, text, info))
            who = (info.host, info.pid, info.rank)
            quiet = 0 if who not in seen else quiet + 1
            seen.add(who)  # type: ignore[arg-type]
            if quiet >= TAIL_QUIET:
                break
        for line_no, text, info in reversed(picked):
            self._tail_line(source, file_rank, line_no, text, info)

    def _tail_line(self, source: Source, file_rank: int | None, line_no: int, text: str, info: LineInfo) -> None:
        message = info.message.strip()
        key = self._identify(source, file_rank, info)
        proc = self._proc(key)
        order = (self.source_index, line_no)
        if order > proc.last_line_order:
            proc.last_line, proc.last_line_order = (source.name, line_no, kept(message)), order
        for sig in self.tail_sigs:
            if any(lit in text for lit in sig.literals):
                caps = sig.match(message)
                if caps is not None:
                    event = Event(sig=sig, source=source.name, line=line_no, text=kept(text),
                                  message=kept(message), caps=caps, key=key,
                                  rank=info.rank if info.rank is not None else file_rank,
                                  host=info.host, pid=info.pid, order=order)
                    proc.colls.append((int(caps["opcount"], 16), caps["op"], int(caps["count"]),
                                       caps.get("comm", ""), event))

    # ------------------------------------------------------------------ result

    def finish(self) -> Collection:
        """Merge the facts of keys that name the same process and resolve each event's rank."""
        for name, tail in self.hint_tail.items():
            self.out.hints[name].extend(tail)
        self.hint_tail.clear()
        for key, proc in list(self.proc_data.items()):
            rank = _rank_in_largest_comm(proc.facts.get("comm_rank", []))
            if rank is not None:
                self.uf.union(key, ("rank", rank))
                self._proc(("rank", rank)).ranks.add(rank)
        groups: dict[Key, Proc] = {}
        for key, proc in self.proc_data.items():
            root = self.uf.find(key)
            merged = groups.get(root)
            if merged is None:
                groups[root] = merged = Proc()
            _merge(merged, proc)
        by_key: dict[Key, Proc] = {}
        for root, proc in groups.items():
            for key in proc.keys:
                by_key[key] = proc
        _infer_ranks_from_devices(list(groups.values()))
        self.out.procs = sorted(groups.values(), key=_proc_order)
        self.out._by_key = by_key  # type: ignore[attr-defined]
        for event in self.out.events:
            proc = by_key.get(event.key)
            if proc is None:
                continue
            if event.rank is None and len(proc.ranks) == 1:
                event.rank = next(iter(proc.ranks))
            if event.host is None and len(proc.hosts) == 1:
                event.host = next(iter(proc.hosts))
        for events in self.out.hints.values():
            for event in events:
                proc = by_key.get(event.key)
                if proc is not None and event.rank is None and len(proc.ranks) == 1:
                    event.rank = next(iter(proc.ranks))
        return self.out


def _infer_ranks_from_devices(procs: list[Proc]) -> None:
    """One host, one GPU per process, no rank printed anywhere: torchrun's usual rank == local GPU index."""
    with_dev = [p for p in procs if p.pids]
    if len(with_dev) < 2 or any(p.ranks for p in procs) or len({h for p in procs for h in p.hosts}) > 1:
        return
    devs = [p.devs for p in with_dev]
    if all(len(d) == 1 for d in devs) and len({min(d) for d in devs}) == len(devs):
        for p in with_dev:
            p.ranks = set(p.devs)
            p.rank_inferred = True


def _rank_in_largest_comm(inits: list[Event]) -> int | None:
    """A process that is exactly one rank of its largest communicator is that (global) rank."""
    if not inits:
        return None
    largest = max(int(e.caps.get("nranks", 0)) for e in inits)
    ranks = {int(e.caps["rank"]) for e in inits if int(e.caps.get("nranks", 0)) == largest}
    return ranks.pop() if len(ranks) == 1 and largest > 1 else None


def _merge(into: Proc, other: Proc) -> None:
    into.keys |= other.keys
    into.ranks |= other.ranks
    into.hosts |= {h for h in other.hosts if h != "?"}
    into.pids |= other.pids
    into.devs |= other.devs
    into.sources |= other.sources
    for name, events in other.facts.items():
        if name == "comm_rank":
            continue
        room = EVENTS_PER_KEY - len(into.facts[name])
        into.facts[name].extend(events[:max(0, room)])
    for var, value in other.env.items():
        into.env.setdefault(var, value)
    into.transports |= other.transports
    for comm, phases in other.init_phases.items():
        into.init_phases[comm] |= phases
    into.comm_sizes.update(other.comm_sizes)
    if other.last_line_order > into.last_line_order:
        into.last_line, into.last_line_order = other.last_line, other.last_line_order
    for item in other.colls:
        into.colls.append(item)
    into.fr = into.fr or other.fr


def _proc_order(proc: Proc) -> tuple[int, int, str]:
    if proc.ranks:
        return (0, min(proc.ranks), "")
    return (1, 0, proc.label())


def _transport_name(raw: str) -> str:
    if raw.startswith("NET/"):
        return raw
    if raw.startswith("P2P"):
        return "P2P"
    if "shared memory" in raw or raw.startswith("SHM"):
        return "SHM"
    return raw


def kept(text: str) -> str:
    """A line as the report may keep it: secrets redacted first, then cut (a cut could hide a secret's shape)."""
    return redact_text(text.strip())[:MAX_TEXT]


def _clean(raw: bytes) -> str:
    text = raw.decode("utf-8", "replace").rstrip("\r\n")
    if "\r" in text:  # progress bars redraw with \r: the last state is what the user saw
        parts = [p for p in text.split("\r") if p.strip()]
        text = parts[-1] if parts else ""
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    return text


class _Prefixed(io.RawIOBase):
    """Bytes already read, then the rest of the stream: lets a sniffed JSON file be read as a log."""

    def __init__(self, prefix: bytes, rest: Any) -> None:
        self.prefix, self.rest = memoryview(prefix), rest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self.prefix:
            n = min(len(buffer), len(self.prefix))
            buffer[:n] = self.prefix[:n]
            self.prefix = self.prefix[n:]
            return n
        data = self.rest.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)
