"""Reading: sources -> matched events and facts per process, streamed, in bounded memory, on every core.

Each source is read on its own into a Reading (its events, hints and facts per key); the Collector adds the
readings up in the order of the sources, so reading them in worker processes gives the report that reading
them one after the other gives. Within a source, the engine reports candidate lines; each is decoded,
attributed (rank/host/pid/time), re-checked with its signatures' Python regexes and recorded: error-like
matches as events, facts and hints as per-process facts. Only the last lines of each source are read in full
(for each rank's last state and for lines too frequent to handle everywhere, such as NCCL_DEBUG_SUBSYS=COLL
calls).

Facts that saturate (SATURATING: a process's transports, its communicators' init) are printed for every
channel of every communicator, often most of a log. Once a source's lines of them have told nothing new for a
while (and no communicator it started is still initialising), the engine reports only the first such line
per chunk; a line that tells something new (another process, another transport) brings full reading back.
The end of such a source is read again for comm init lines, so a communicator stuck there is still seen.
Until then, a transport line whose writer already printed one ending the same way only counts as quiet.
"""

from __future__ import annotations

import io
import multiprocessing
import os
import re
import sys
from collections import defaultdict, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache, partial
from typing import Any

from . import flight_recorder as fr
from .attribution import LineInfo, attribute, rank_from_path
from .engine import Engine, default_engine
from .identity import Identities
from .records import (COLL_TAIL, EVENTS_PER_KEY, MAX_EVENTS, WORDS_PER_SOURCE, Call, Collection, Event, Key,
                      coll_tail, kept, words_sample)
from .resemblance import words
from .fragments import index as fragment_index
from .signatures import Signature, captures, signatures, template_signature
from .sources import (READ_ERRORS, WIDE_COUNT, Chunk, ReadStats, Source, input_size, iter_chunks,
                      looks_binary, newlines, open_stream, sniff, warm_numpy)

TAIL_BYTES = 256 * 1024  # the end of each source read line by line
TAIL_LINES = 5000  # at most this many lines from the end of each source
TAIL_QUIET = 100  # ... stopping once this many lines brought no new process ...
TAIL_BUDGET = 16384  # ... fewer when thousands of sources share this many lines (at least TAIL_QUIET_MIN each)
TAIL_QUIET_MIN = 24
FRAGMENT_BYTES = 64 * 1024  # sources up to this size (pasted excerpts) have their unclaimed lines read again
FRAGMENT_MIN_LINE = 20  # ... those at least this long
HINTS_HEAD = 12  # context lines kept per hint: the first ones ...
HINTS_TAIL = 12  # ... and the last ones
GLOBAL_FACTS = 64
SATURATING = ("transport", "comm_init")
QUIET_SATURATED = 64  # saturating lines in a row that told nothing new before a source is sampled
FIRST_BLOCK = 16 * 1024  # read in full, a source is scanned in blocks that double from this up to a chunk
MAX_PENDING = 4096  # communicators still initialising that a source tracks (beyond: never sampled)
MAX_TRANSPORT_KEYS = 1024  # transport lines a source remembers having read (beyond: each is read)
PARALLEL_BYTES = 64 << 20  # below this much input, worker processes cost more than they save
BATCHES = 8  # batches of files per worker: few readings to send back, yet both cores busy to the end ...
BATCH_FILES = 64  # ... each of at most this many files (a worker's reading of them stays small)
NUMPY_SOURCES = 512  # numpy counts newlines when at most this many sources are read: importing it costs each worker
# 19 MiB and 50 ms, and with thousands of ranks the memory is better spent on what is kept per rank
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")

OnBytes = Callable[[int], None]  # told the input bytes read so far


@dataclass(frozen=True)
class Shares:
    """What reading one source may keep and spend, from how many sources are read: the cost and the memory of
    the whole stay bounded at any job size."""

    coll_tail: int = COLL_TAIL  # COLL calls kept per process
    words: int = WORDS_PER_SOURCE  # bytes of the beginning whose words are kept
    wide: int = WIDE_COUNT  # spans whose newlines numpy counts (from this length on)
    tail_quiet: int = TAIL_QUIET  # lines at the end without a new process before the tail stops

    @classmethod
    def of(cls, sources: int) -> Shares:
        # with thousands of sources each is one rank's file: its few writers show in its last lines
        tail_quiet = max(TAIL_QUIET_MIN, min(TAIL_QUIET, TAIL_BUDGET // max(sources, 1)))
        wide = WIDE_COUNT if sources <= NUMPY_SOURCES else sys.maxsize
        return cls(coll_tail(sources), words_sample(sources), wide, tail_quiet)


class Reading:
    """What one or more sources held: events, hints and facts per key, before processes are resolved."""

    def __init__(self) -> None:
        self.out = Collection()
        self.ids = Identities()
        self.kept: dict[tuple[str, Key], int] = defaultdict(int)
        self.hint_tail: dict[str, deque[Event]] = defaultdict(partial(deque, maxlen=HINTS_TAIL))

    def keep_event(self, event: Event) -> None:
        slot = (event.sig.id, event.key)
        self.kept[slot] += 1
        if self.kept[slot] > EVENTS_PER_KEY or len(self.out.events) >= MAX_EVENTS:
            self.out.dropped_events += 1
            return
        self.out.events.append(event)

    def keep_hint(self, name: str, event: Event) -> None:
        head = self.out.hints[name]
        if len(head) < HINTS_HEAD:
            head.append(event)
        else:  # and the latest ones: what was going on when the job failed
            self.hint_tail[name].append(event)

    def keep_global(self, name: str, event: Event) -> None:
        if len(self.out.global_facts[name]) < GLOBAL_FACTS:
            self.out.global_facts[name].append(event)

    def absorb(self, other: Reading) -> None:
        """Add a later source's reading: what reading it right after the sources already here would give."""
        out, more = self.out, other.out
        for event in more.events:
            self.keep_event(event)
        out.dropped_events += more.dropped_events
        for name, events in more.hints.items():
            for event in [*events, *other.hint_tail.get(name, ())]:
                self.keep_hint(name, event)
        for name, events in more.global_facts.items():
            for event in events:
                self.keep_global(name, event)
        out.elastic_root += more.elastic_root
        out.problems += more.problems
        out.sources_read += more.sources_read
        out.source_lines.update(more.source_lines)
        out.lines += more.lines
        out.bytes += more.bytes
        out.words |= more.words
        self.ids.absorb(other.ids)


class Collector:
    """Reads sources (in worker processes when there is enough to read) and adds up their readings in order."""

    def __init__(self, engine: Engine | None = None, on_bytes: OnBytes | None = None) -> None:
        self.engine = engine or default_engine()
        self.reading = Reading()
        self.reading.out.engine = self.engine.name
        self.on_bytes = on_bytes
        self.count = 0
        self.read = 0  # bytes read in this process
        self.read_elsewhere: Any = None  # bytes read by worker processes (a shared counter)
        self.shares = Shares()

    def add_source(self, source: Source) -> None:
        self.count += 1
        self._read_here(source, self.count)

    def _read_here(self, source: Source, index: int) -> None:
        self.reading.absorb(SourceReader(source, index, self.engine, self._tick, self.shares).read())

    def _tick(self, n: int = 0) -> None:
        self.read += n
        if self.on_bytes:
            self.on_bytes(self.read + (self.read_elsewhere.value if self.read_elsewhere is not None else 0))

    def add_sources(self, sources: list[Source], workers: int | None = None,
                    meanwhile: Callable[[], object] | None = None) -> None:
        """Read the sources; `meanwhile` runs once in this process while workers read (first, without them)."""
        workers = workers or _cpus()
        self.shares = Shares.of(len(sources))
        files = [s for s in sources if s.path is not None]
        if workers < 2 or len(files) < 2 or input_size(files) < PARALLEL_BYTES:
            if meanwhile is not None:
                meanwhile()
            for source in sources:
                self.add_source(source)
            return
        self._add_in_parallel(sources, min(workers, len(files)), meanwhile)

    def _add_in_parallel(self, sources: list[Source], workers: int, meanwhile: Callable[[], object] | None) -> None:
        fork = sys.platform == "linux"  # workers inherit the compiled engine; elsewhere they load it again
        if fork and self.shares.wide != sys.maxsize:
            warm_numpy()  # imported once here, not once in each worker (50 ms and more while the others start)
        context = multiprocessing.get_context("fork" if fork else "spawn")
        self.read_elsewhere = done = context.Value("q", 0, lock=False)
        batches = _batches(list(enumerate(sources, self.count + 1)), input_size(sources) // (workers * BATCHES))
        jobs = [(batch, self.shares) for batch in batches
                if batch[0][1].path is not None]
        pool = context.Pool(workers, _start_worker, (self.engine if fork else self.engine.name, done))
        try:
            readings = pool.imap(_read_in_worker, jobs)
            if meanwhile is not None:
                meanwhile()
            for batch in batches:
                index, source = batch[0]
                if source.path is None:  # stdin stays with this process
                    self._read_here(source, index)
                    continue
                while True:
                    try:
                        reading = readings.next(timeout=0.25)
                        break
                    except multiprocessing.TimeoutError:
                        self._tick()
                self.reading.absorb(reading)
                self._tick()
        except BaseException:
            pool.terminate()  # on any error, Ctrl-C or SIGTERM no worker outlives the command
            raise
        else:
            pool.close()
        finally:
            pool.join()
        self.count += len(sources)

    def finish(self) -> Collection:
        """Merge the facts of keys that name the same process and resolve each event's rank."""
        reading = self.reading
        out = reading.out
        for name, tail in reading.hint_tail.items():
            out.hints[name].extend(tail)
        reading.hint_tail.clear()
        out.procs, by_key = reading.ids.resolve()
        out._by_key = by_key  # type: ignore[attr-defined]
        for event in out.events:
            proc = by_key.get(event.key)
            if proc is None:
                continue
            if event.rank is None and len(proc.ranks) == 1:
                event.rank = next(iter(proc.ranks))
            if event.host is None and len(proc.hosts) == 1:
                event.host = next(iter(proc.hosts))
        for events in out.hints.values():
            for event in events:
                proc = by_key.get(event.key)
                if proc is not None and event.rank is None and len(proc.ranks) == 1:
                    event.rank = next(iter(proc.ranks))
        return out


_worker: dict[str, Any] = {}


def _start_worker(engine: Engine | str, done: Any) -> None:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle: it ends the pool
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # as the pool ends it (not the command's Terminated)
    _worker.update(engine=default_engine(engine) if isinstance(engine, str) else engine, done=done)


def _read_in_worker(job: tuple[list[tuple[int, Source]], Shares]) -> Reading:
    """One reading for a batch of sources: what reading them one by one and adding up their readings gives
    (test_readings_add_up_the_same_in_any_grouping), sent back to the collector at a tenth of the cost."""
    batch, shares = job
    done = _worker["done"]

    def on_bytes(n: int) -> None:
        done.value += n

    reading = Reading()
    for index, source in batch:
        reading.absorb(SourceReader(source, index, _worker["engine"], on_bytes, shares).read())
    return reading


def _batches(sources: list[tuple[int, Source]], size: int) -> list[list[tuple[int, Source]]]:
    """Consecutive files in batches of about `size` bytes (BATCH_FILES at most); stdin alone in its own."""
    batches: list[list[tuple[int, Source]]] = []
    filled = size  # bytes in the last batch: a new one starts at once
    for index, source in sources:
        if (source.path is None or filled >= size or batches[-1][0][1].path is None
                or len(batches[-1]) == BATCH_FILES):
            batches.append([])
            filled = 0
        batches[-1].append((index, source))
        filled += input_size([source])
    return batches


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


class SourceReader:
    """Reads one source into a Reading."""

    def __init__(self, source: Source, index: int, engine: Engine, on_bytes: OnBytes | None = None,
                 shares: Shares = Shares()) -> None:
        self.source = source
        self.shares = shares
        self.words_left = shares.words  # bytes of the beginning whose words are still to be kept
        self.index = index
        self.engine = engine
        self.on_bytes = on_bytes  # told each chunk's size
        self.reading = Reading()
        self.out = self.reading.out
        self.ids = self.reading.ids
        self.sigs = signatures()
        self.tail_sigs, self.comm_sigs, self.saturating = _signature_groups()
        self.file_rank = rank_from_path(source.path) if source.path else None
        self.elastic_current: dict[str, Any] | None = None
        self.quiet = 0  # saturating lines in a row that told nothing new
        self.pending: set[tuple[Key, str]] | None = set()  # communicators started here, not complete
        self.sampled = False  # whether saturating lines were ever sampled
        self.block = FIRST_BLOCK
        self.claimed: set[int] | None = set()  # lines a signature recognised, while the source is small
        self.transport_ids = _transport_signatures()
        self.transports_read: set[bytes] = set()  # writer prefix + line end of transport lines read

    def read(self) -> Reading:
        source = self.source
        try:
            stream, _compression = open_stream(source)
        except READ_ERRORS as exc:
            self.out.problems.append(f"{source.name}: cannot read ({getattr(exc, 'strerror', None) or exc})")
            return self.reading
        try:
            self._read_any(stream)
        except READ_ERRORS as exc:
            self.out.problems.append(f"{source.name}: cannot read ({getattr(exc, 'strerror', None) or exc})")
        finally:
            if source.stream is None:
                stream.close()
        return self.reading

    def _read_any(self, stream: Any) -> None:
        """A flight-recorder dump (pickle or JSON), or a log."""
        head, _ = sniff(stream)
        if fr.is_pickle(head):
            self._add_dump(stream, head)
            return
        if fr.is_json_dump(head):
            data = stream.read(fr.MAX_JSON_DUMP_BYTES + 1)
            summary = fr.parse_json_dump(data) if len(data) <= fr.MAX_JSON_DUMP_BYTES else None
            if summary is not None:
                self._record_dump(summary)
                return
            stream = _Prefixed(data, stream)  # not a dump (e.g. JSON-lines): read it as a log
        if looks_binary(head):
            self.out.problems.append(f"{self.source.name}: binary file, skipped")
            return
        self._read_log(stream)

    def _read_log(self, stream: Any) -> None:
        source, out = self.source, self.out
        stats = ReadStats()
        tail: deque[Chunk] = deque()
        tail_bytes = 0
        lines = 0
        for chunk in iter_chunks(stream, stats, numbered=False):  # numbered here, by the scan's own count
            out.bytes += len(chunk.data)
            if out.bytes > FRAGMENT_BYTES:
                self.claimed = None
            if self.words_left > 0:
                sample = chunk.data[:self.words_left]
                out.words |= words(sample)
                self.words_left -= len(sample)
            chunk.first_line = lines + 1
            chunk.lines = self._scan(chunk)
            tail.append(chunk)
            tail_bytes += len(chunk.data)
            while len(tail) > 1 and tail_bytes - len(tail[0].data) >= TAIL_BYTES:
                tail_bytes -= len(tail.popleft().data)
            lines += chunk.lines
            if self.on_bytes:
                self.on_bytes(len(chunk.data))
        self._read_tail(tail)
        if self.claimed is not None and tail:
            self._read_unclaimed(tail, self.claimed)
        out.lines += lines
        out.source_lines[source.name] = lines
        if stats.problem:
            out.problems.append(f"{source.name}: {stats.problem}")
        if lines == 0 and not tail:
            if not stats.problem:
                out.problems.append(f"{source.name}: empty")
            return
        out.sources_read.append(source.name)
        if stats.truncated_lines:
            out.problems.append(f"{source.name}: {stats.truncated_lines} line(s) longer than 64 KiB were cut")

    def _scan(self, chunk: Chunk) -> int:
        """Scan a chunk, in blocks while it is read in full, so that sampling can start soon after saturation.
        Returns the chunk's newlines, counted once on the way to its matches."""
        data, at, first_line, wide = chunk.data, 0, chunk.first_line, self.shares.wide
        while at < len(data):
            sampled = self._saturated()
            self.sampled |= sampled
            if sampled:
                end = len(data)
                self.block = FIRST_BLOCK  # should something new come, saturation is sought again from small blocks
            else:
                end = data.find(b"\n", at + self.block) + 1 or len(data)
                self.block = min(2 * self.block, len(data))
            block = data[at:end] if at or end < len(data) else data
            pos, line_no = 0, first_line
            taken: set[int] = set()  # saturating signatures whose line of this block was read once saturated
            for start, stop, ids in self.engine.scan(block, sampled):
                now = sampled or (self._saturated() and self.saturating.issuperset(ids))
                if now and not sampled:  # saturated within the block: as if sampled from here on
                    if taken.issuperset(ids):
                        continue  # its newlines are counted with the next line read
                    taken.update(ids)
                    self.sampled = True
                key = self._transport_key(block, start, stop, ids)
                if key is not None and key in self.transports_read:
                    self.quiet += 1  # what reading it would do: a known writer, a known transport
                    continue
                line_no += newlines(block, pos, start, wide)  # hits come in line order
                pos = start
                if self._on_line(line_no, block[start:stop], ids, now) and key is not None:
                    self.transports_read.add(key)
            first_line = line_no + newlines(block, pos, None, wide)
            at = end
        return first_line - chunk.first_line

    def _saturated(self) -> bool:
        return self.quiet >= QUIET_SATURATED and not self.pending

    def _transport_key(self, block: bytes, start: int, stop: int, ids: list[int]) -> bytes | None:
        """For a line only transport signatures reported, in NCCL's own prefix: its writer (host:pid:tid [dev]) and
        how it ends (` via P2P/CUMEM/read`), all such a line can tell. A line whose key was read before only counts
        as quiet: a communicator's channel lines, read in full until it completes, are most lines of a rank that
        makes communicators as it goes, and each would be decoded, attributed and matched to tell nothing new.
        None where there is no key, or where every line recognised is kept (a small source, whose unclaimed lines
        are read again)."""
        if self.claimed is not None or not self.transport_ids.issuperset(ids):
            return None
        prefix_end = block.find(b" NCCL INFO ", start, stop)
        via = block.rfind(b" via ", start, stop)
        if prefix_end <= start or via < 0 or len(self.transports_read) >= MAX_TRANSPORT_KEYS:
            return None
        return bytes(block[start:prefix_end]) + bytes(block[via:stop])

    def _add_dump(self, stream: Any, head: bytes) -> None:
        try:
            summary = fr.read_dump(stream, head)
        except fr.UnsafeDump as exc:
            self.out.problems.append(f"{self.source.name}: rejected flight-recorder dump: {exc}")
            return
        self._record_dump(summary)

    def _record_dump(self, summary: fr.DumpSummary) -> None:
        source = self.source
        summary.source = source.name
        rank = rank_from_path(source.path or source.name)
        key: Key = ("rank", rank) if rank is not None else ("src", source.name)
        self.ids.find(key)
        proc = self.ids.proc(key)
        proc.fr = summary
        proc.sources.add(source.name)
        if rank is not None:
            proc.ranks.add(rank)
        self.out.sources_read.append(source.name)

    # ------------------------------------------------------------------ one line

    def _on_line(self, line_no: int, raw: bytes, ids: list[int], sampled: bool = False) -> bool:
        """Read one reported line; whether a signature recognised it."""
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
            return False
        # A written signature that knows the line (a fact, a specific error or an echo) overrides the generated
        # templates; a written catch-all (generic) does not hide a template's more precise reading.
        # the other readings are all kept for the weighing. Hints marked `unclaimed` only stand for lines nothing
        # else recognised.
        if len(matched) > 1:  # a single reading passes both filters
            if any(not s.prefilter and not s.addon and s.role not in ("hint", "generic") for s, _ in matched):
                matched = [(s, c) for s, c in matched if not s.prefilter]
            if any(not s.unclaimed for s, _ in matched):  # recognised: not one of the lines nobody explains
                matched = [(s, c) for s, c in matched if not s.unclaimed]
        if self.claimed is not None and any(s.role != "hint" or s.hint == "benign_warn" for s, _ in matched):
            self.claimed.add(line_no)  # recognised as a message (a context hint only tells what the job did)
        if sampled:  # a sampled START may have its COMPLETE among the lines not reported: only the tail tells
            matched = [(s, c) for s, c in matched if not (s.fact == "comm_init" and c.get("phase") == "START")]
        new_writer = not self._known(info)
        key = self.ids.identify(self.source.name, self.file_rank, info)
        order = (self.index, line_no)
        for sig, caps in matched:
            def event(sig: Signature = sig, caps: dict[str, str] = caps) -> Event:
                return Event(sig=sig, source=self.source.name, line=line_no, text=kept(text),
                             message=kept(info.message),
                             caps=caps, key=key, rank=info.rank if info.rank is not None else self.file_rank,
                             host=info.host, pid=info.pid, ts=info.ts, ts_kind=info.ts_kind, order=order)
            if sig.fact in SATURATING:  # most lines of a log: the event is made (and redacted) only if kept
                news = self._saturating(sig.fact, caps, key, info.pid, event, line_no)
                self.quiet = 0 if news or new_writer else self.quiet + 1
            else:
                self._record(event())
        return True

    def _known(self, info: LineInfo) -> bool:
        """Whether the line's writer has been seen in this source (before identify() records it)."""
        if info.pid is not None:
            return ("hp", info.host or "?", info.pid) in self.ids.procs
        rank = info.rank if info.rank is not None else self.file_rank
        return rank is not None and ("rank", rank) in self.ids.procs

    def _record(self, event: Event) -> None:
        sig = event.sig
        if sig.role == "fact":
            self._record_fact(event)
            return
        if sig.role == "hint":
            self.reading.keep_hint(sig.hint or sig.id, event)
            return
        self.reading.keep_event(event)

    def _saturating(self, name: str, caps: dict[str, str], key: Key, pid: int | None,
                    event: Callable[[], Event], line_no: int) -> bool:
        """Record a process's transport or comm init; True when it told something new about the process."""
        proc = self.ids.proc(key)
        if name == "transport":
            transport = _transport_name(caps.get("transport", ""))
            news = transport not in proc.transports
            proc.transports.add(transport)
            return news
        comm = caps.get("commid") or caps.get("comm", "?")
        phase = caps.get("phase", "")
        news = proc.add_comm_phase(comm, phase, int(caps.get("nranks", 0)))
        self._track_pending(key, comm, phase)
        if pid is not None:
            proc.add_comm_rank((self.source.name, line_no, int(caps.get("nranks", 0)), int(caps["rank"])))
        if len(proc.facts.get(name, ())) < EVENTS_PER_KEY:
            proc.add_fact(name, event())
        return news

    def _record_fact(self, event: Event) -> None:
        name = event.sig.fact or event.sig.id
        caps = event.caps
        proc = self.ids.proc(event.key)
        if name in SATURATING:
            self._saturating(name, caps, event.key, event.pid, lambda: event, event.line)
            return
        if name == "nccl_env":
            proc.env.setdefault(caps.get("var", ""), caps.get("value", ""))
        elif name == "rank_host":
            self.ids.link_rank_host(caps)
        elif name == "elastic_root_cause":
            self.elastic_current = {"source": event.source, "line": event.line}
            self.out.elastic_root.append(self.elastic_current)
            return
        elif name == "elastic_field":
            current = self.elastic_current
            if current is not None and current["source"] == event.source and event.line - current["line"] < 12:
                current.setdefault(caps.get("field", ""), caps.get("value", "").strip())
            return
        elif name == "fingerprint":  # only each process's latest collective matters
            proc.facts[name] = [event]
            return
        elif name in ("world_size", "desync", "desync_at"):
            self.reading.keep_global(name, event)
            return
        proc.add_fact(name, event)

    def _track_pending(self, key: Key, comm: str, phase: str) -> None:
        if self.pending is None:
            return
        if phase == "START":
            self.pending.add((key, comm))
            if len(self.pending) > MAX_PENDING:
                self.pending = None  # too many to tell: this source is read in full
        else:
            self.pending.discard((key, comm))

    # ------------------------------------------------------------------ tails

    def _read_tail(self, tail: deque[Chunk]) -> None:
        """Read the end of a source backwards until no new process has shown up for a while."""
        if not tail:
            return
        data = tail[0].data if len(tail) == 1 else b"".join(c.data for c in tail)
        last_line = tail[0].first_line + sum(c.lines for c in tail)  # the number of the line after the last newline
        picked: list[tuple[int, str, LineInfo, str]] = []
        seen: set[tuple[str | None, int | None, int | None]] = set()
        quiet = 0
        for line_no, raw in _lines_backwards(data, last_line, TAIL_LINES):
            if not raw.strip():
                continue
            text = _clean(raw)
            info = attribute(text)
            message = info.message.strip()
            if not message.strip("-=*#[]. "):  # empty, or a rule of dashes and brackets
                continue
            picked.append((line_no, text, info, message))
            who = (info.host, info.pid, info.rank)
            quiet = 0 if who not in seen else quiet + 1
            seen.add(who)
            if quiet >= self.shares.tail_quiet:
                break
        calls: dict[Key, deque[Callable[[], Call]]] = {}
        last: dict[Key, tuple[int, str]] = {}
        sigs = self.tail_sigs + self.comm_sigs if self.sampled else self.tail_sigs
        for line_no, text, info, message in reversed(picked):
            last[self._tail_line(line_no, text, info, message, sigs, calls)] = (line_no, message)
        for key, made in calls.items():  # only the calls each process keeps become events (redacted)
            self.ids.proc(key).add_colls(call() for call in made)
        for key, (line_no, message) in last.items():  # redacted once per process, not once per line
            proc = self.ids.proc(key)
            if (self.index, line_no) > proc.last_line_order:
                proc.last_line, proc.last_line_order = (self.source.name, line_no, kept(message)), (self.index, line_no)

    def _read_unclaimed(self, tail: deque[Chunk], claimed: set[int]) -> None:
        """Lines of a small source (a pasted excerpt) that no signature recognised: one wrapped at a terminal's or
        an issue's width is read again joined with the next; one that holds most of a source template's words is
        read as that template (logs/fragments.py): a message cut at the edge or reworded by a wrapper."""
        lines = b"".join(c.data for c in tail).split(b"\n")  # the whole source: it is smaller than the tail
        first = tail[0].first_line
        for i, raw in enumerate(lines):
            line_no = first + i
            if line_no in claimed or len(raw) < FRAGMENT_MIN_LINE:
                continue
            if i + 1 < len(lines) and line_no + 1 not in claimed and \
                    self._read_wrapped(line_no, raw, lines[i + 1], claimed):
                claimed.add(line_no + 1)
                continue
            self._read_fragment(line_no, raw)

    def _read_wrapped(self, line_no: int, raw: bytes, following: bytes, claimed: set[int]) -> bool:
        """Whether the line joined with the following one (as cut mid-word, else at a space) is recognised."""
        for glue in (b"", b" "):
            joined = raw.rstrip(b"\r") + glue + following.rstrip(b"\r")
            ids = [i for _, _, found in self.engine.scan(joined) for i in found if not self.sigs[i].unclaimed]
            if ids:
                self._on_line(line_no, joined, ids)  # adds the line to `claimed` when it recognises it
                if line_no in claimed:
                    return True
        return False

    def _read_fragment(self, line_no: int, raw: bytes) -> None:
        text = _clean(raw)
        info = attribute(text)
        found = fragment_index().read(info.message)
        sig = template_signature(found.template) if found else None
        if found is None or sig is None:
            return
        key = self.ids.identify(self.source.name, self.file_rank, info)
        self.reading.keep_hint("template_fragment", self._tail_event(
            sig, {"coverage": str(found.coverage), "template": found.template.text}, line_no, text, info, key,
            info.message))

    def _tail_line(self, line_no: int, text: str, info: LineInfo, message: str, sigs: list[Signature],
                   calls: dict[Key, deque[Callable[[], Call]]]) -> Key:
        """Match one tail line against the tail signatures; the process it belongs to."""
        source = self.source.name
        key = self.ids.identify(source, self.file_rank, info)
        for sig in sigs:
            if not any(lit in text for lit in sig.literals):
                continue
            found = sig.regex.search(message)
            if found is None:
                continue
            if sig.fact == "comm_init":
                proc = self.ids.proc(key)
                if not (any(e.line == line_no and e.source == source for e in proc.facts.get("comm_init", []))
                        or any(r[:2] == (source, line_no) for r in proc.comm_ranks)):
                    # not read in full before: the sample skipped it
                    self._record_fact(self._tail_event(sig, captures(found), line_no, text, info, key, message))
                continue
            # COLL calls, thousands per job: made into calls only if kept (most are pushed out by later ones)
            calls.setdefault(key, deque(maxlen=self.shares.coll_tail)).append(
                partial(self._call, sig, found, line_no, text, info, key))
        return key

    def _call(self, sig: Signature, found: re.Match[str], line_no: int, text: str, info: LineInfo, key: Key) -> Call:
        """A kept COLL call, its line an event with only the captures rules/collectives.py reads and no message (the
        text again)."""
        caps = captures(found)
        kept_caps = {k: caps[k] for k in ("dtype", "nranks") if k in caps}
        return (int(caps["opcount"], 16), caps["op"], int(caps["count"]), caps.get("comm", ""),
                self._tail_event(sig, kept_caps, line_no, text, info, key))

    def _tail_event(self, sig: Signature, caps: dict[str, str], line_no: int, text: str, info: LineInfo, key: Key,
                    message: str = "") -> Event:
        return Event(sig=sig, source=self.source.name, line=line_no, key=key, host=info.host, pid=info.pid,
                     rank=info.rank if info.rank is not None else self.file_rank, order=(self.index, line_no),
                     caps=caps, text=kept(text), message=kept(message))


@cache
def saturating_signatures() -> frozenset[int]:
    """The signatures of facts that saturate (by index): the engine samples them once they are known."""
    return frozenset(s.index for s in signatures() if s.fact in SATURATING)


@cache
def _transport_signatures() -> frozenset[int]:
    return frozenset(s.index for s in signatures() if s.fact == "transport")


@cache
def _signature_groups() -> tuple[list[Signature], list[Signature], frozenset[int]]:
    """The signatures only the tail looks for, those of communicator init, and the saturating ones (by index)."""
    sigs = signatures()
    return [s for s in sigs if s.scope == "tail"], [s for s in sigs if s.fact == "comm_init"], saturating_signatures()


def _transport_name(raw: str) -> str:
    if raw.startswith("NET/"):
        return raw
    if raw.startswith("P2P"):
        return "P2P"
    if "shared memory" in raw or raw.startswith("SHM"):
        return "SHM"
    return raw


def _lines_backwards(data: bytes, last_line: int, most: int) -> Iterator[tuple[int, bytes]]:
    """The last `most` lines of data, last first, with their numbers (`last_line` is that of the line after the
    last newline, empty when data ends with one). Only the lines read are cut out: the tail is left after a
    hundred lines or so."""
    end = len(data)
    line_no = last_line
    if data.endswith(b"\n"):
        end -= 1
        line_no -= 1
    for _ in range(most):
        if end < 0:
            return
        start = data.rfind(b"\n", 0, end) + 1
        yield line_no, data[start:end]
        end, line_no = start - 1, line_no - 1


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
