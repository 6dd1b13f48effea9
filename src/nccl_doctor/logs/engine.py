"""Multi-pattern matching over chunks of lines: which lines may match which signatures.

Two engines with one interface, both looking for every signature at once and reporting only the lines
that may match; the caller re-checks each reported line with the signature's Python regex, which also
extracts the captures.

- hyperscan (a dependency wherever it has wheels) runs in C. A signature whose literals are rare in healthy
  logs (`Signature.by_literal`, nearly all of them) is looked for by its literals, the others by their whole
  pattern. Its speed falls with the number of literals (4,600 scan at 1.7 GB/s, 1,300 at 2.6 here), so literals
  that contain a shorter one are looked for by it (`literal_groups`), and a line it finds is checked for its
  members' own literals: the same lines and signatures as looking for each. Compiling takes a second, so the
  database is cached on disk, keyed by what it holds.
- portable (Aho-Corasick, `pyahocorasick`, where hyperscan cannot be installed) looks for every signature's
  literals in the lower-cased chunk.

`scan(data, sampled=True)` reports only the first line per chunk of the signatures named `sample` at
construction: facts that saturate (logs/reading.py), which would otherwise cost a Python call per line.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Collection, Sequence
from functools import cache
from typing import Protocol

from . import disk_cache
from .signatures import Signature, catalog_stamps, common_text, scan_expression

LineHits = list[tuple[int, int, list[int]]]  # (line start, line end, signature indexes), in line order
Expressions = tuple[list[bytes], list[int], list[int]]  # hyperscan's expressions, their signatures, their flags
CACHE_FORMAT = 3  # bump when what a cached database means changes
GROUP_IDS = 1 << 24  # hyperscan ids from here on are literal groups, below are signature indexes
Literals = tuple[tuple[bytes, bool], ...]  # a signature's literals as found in a line: (bytes, caseless)


class Engine(Protocol):
    name: str

    def scan(self, data: bytes, sampled: bool = False) -> LineHits: ...


def make_engine(sigs: Sequence[Signature], prefer: str | None = None, sample: Collection[int] = ()) -> Engine:
    """hyperscan when available (unless NCCL_DOCTOR_ENGINE=portable), else the portable engine."""
    choice = prefer or os.environ.get("NCCL_DOCTOR_ENGINE", "auto")
    if choice in ("auto", "hyperscan"):
        try:
            return HyperscanEngine(sigs, sample)
        except ImportError:
            if choice == "hyperscan":
                raise
    return PortableEngine(sigs, sample)


@cache
def default_engine(prefer: str | None = None) -> Engine:
    """The engine for the catalog's main signatures, built once per process."""
    from .reading import saturating_signatures
    from .signatures import signatures

    return make_engine([s for s in signatures() if s.scope == "all"], prefer, sample=saturating_signatures())


def _group_by_line(data: bytes, hits: list[tuple[int, int]]) -> LineHits:
    """Turn (offset, signature) hits into one entry per line."""
    hits.sort()
    out: LineHits = []
    line_end = -1
    for offset, sig in hits:
        if offset > line_end:
            start = data.rfind(b"\n", 0, offset) + 1
            if start > offset:  # a match that ended right at a newline
                start = data.rfind(b"\n", 0, offset - 1) + 1
            line_end = data.find(b"\n", offset)
            if line_end < 0:
                line_end = len(data)
            out.append((start, line_end, [sig]))
        elif sig not in out[-1][2]:
            out[-1][2].append(sig)
    return out


def caseless(sig: Signature) -> bool:
    """Whether its literals may occur in any case (a pattern with (?i) anywhere)."""
    return sig.caseless or "(?i" in sig.pattern


class HyperscanEngine:
    name = "hyperscan"

    def __init__(self, sigs: Sequence[Signature], sample: Collection[int] = ()) -> None:
        import hyperscan

        self._hs = hyperscan
        # what the databases hold follows from these; their expressions are worked out only to compile one
        made_from = disk_cache.key(CACHE_FORMAT, _hs_version(hyperscan), _common_text_stamp(), sorted(sample),
                                   [(s.index, s.pattern, s.by_literal, s.literals, caseless(s)) for s in sigs])
        groups = _cached_groups(made_from, sigs, sample)
        self.by_index = {s.index: s for s in sigs}
        self.groups = {GROUP_IDS + g: members for g, (_, members) in enumerate(groups)}
        self.members: dict[int, tuple[tuple[int, Literals], ...]] = {}  # of the groups found so far, with literals
        self.full = _database(hyperscan, made_from, lambda: _expressions(hyperscan, sigs, (), groups))
        self.sampled = (_database(hyperscan, disk_cache.key(made_from, "sampled"),
                                  lambda: _expressions(hyperscan, sigs, sample, groups)) if sample else self.full)
        self.scratch = {id(db): hyperscan.Scratch(db) for db in (self.full, self.sampled)}

    def scan(self, data: bytes, sampled: bool = False) -> LineHits:
        hits: list[tuple[int, int]] = []
        append = hits.append

        def on_match(sig: int, start: int, end: int, flags: int, context: object) -> None:
            append((end - 1 if end else 0, sig))

        db = self.sampled if sampled else self.full
        db.scan(data, match_event_handler=on_match, scratch=self.scratch[id(db)])
        return _group_by_line(data, _members_found(data, hits, self._members))

    def _members(self, ident: int) -> tuple[tuple[int, Literals], ...] | None:
        """A literal group's members with their literals (worked out when the group is first found: a log meets
        few of the 1,400), or None for a signature's own id."""
        found = self.members.get(ident)
        if found is None and ident in self.groups:
            found = self.members[ident] = tuple((i, own_literals(self.by_index[i])) for i in self.groups[ident])
        return found


def _common_text_stamp() -> object:
    """What the common text (which expressions depend on) is made from: the catalog files' stamps, not the text,
    which takes 10 ms and 1.6 MiB to make (the text itself where the package is not plain files)."""
    try:
        return catalog_stamps()
    except (OSError, TypeError):
        return common_text().text


def own_literals(sig: Signature) -> Literals:
    """A signature's literals as they are looked for in a line's bytes (caseless ones in lower case)."""
    folded = caseless(sig)
    return tuple((lit.encode().lower() if folded else lit.encode(), folded) for lit in sig.literals)


def _members_found(data: bytes, hits: list[tuple[int, int]],
                   members_of: Callable[[int], tuple[tuple[int, Literals], ...] | None]) -> list[tuple[int, int]]:
    """Hits of literal groups replaced by a hit of each member found in the line, where its first literal ends:
    what looking for each member's own literals reports."""
    found: list[tuple[int, int]] = []
    done: set[tuple[int, int]] = set()
    for offset, ident in hits:
        members = members_of(ident) if ident >= GROUP_IDS else None
        if members is None:
            found.append((offset, ident))
            continue
        start = data.rfind(b"\n", 0, offset) + 1
        if (start, ident) in done:  # another occurrence in the same line
            continue
        done.add((start, ident))
        end = data.find(b"\n", offset)
        line = bytes(data[start:end if end >= 0 else len(data)])
        lower = line.lower()
        for sig, literals in members:
            ends = [at + len(lit) for lit, folded in literals if (at := (lower if folded else line).find(lit)) >= 0]
            if ends:
                found.append((start + min(ends) - 1, sig))
    return found


def literal_groups(sigs: Sequence[Signature], sample: Collection[int] = ()) -> list[tuple[bytes, list[int]]]:
    """The signatures looked for by literal (those of `sample` and literals spanning lines aside), grouped under
    literals (lower case) each of which one literal of every member contains: the shortest, those holding no other."""
    having: dict[bytes, list[int]] = {}  # lower-case literal -> the signatures that have it
    for s in sigs:
        literals = own_literals(s)
        if s.by_literal and s.index not in sample and not any(b"\n" in lit for lit, _ in literals):
            for lit, _ in literals:
                having.setdefault(lit.lower(), []).append(s.index)
    shortest: list[bytes] = []
    groups: dict[bytes, set[int]] = {}
    for lit in sorted(having, key=lambda b: (len(b), b)):
        inner = [m for m in shortest if m in lit]
        if not inner:
            shortest.append(lit)
        group = max(inner, key=len) if inner else lit  # the longest inside it: it finds the fewest lines
        groups.setdefault(group, set()).update(having[lit])
    return [(lit, sorted(members)) for lit, members in groups.items()]


def _cached_groups(made_from: str, sigs: Sequence[Signature], sample: Collection[int]
                   ) -> list[tuple[bytes, list[int]]]:
    """literal_groups, kept on disk beside the databases compiled with them (a fifth of a second to work out)."""
    name = f"literal-groups-{made_from}.json"
    blob = disk_cache.read(name)
    if blob is not None:
        try:
            return [(lit.encode("latin-1"), members) for lit, members in json.loads(blob)]
        except (ValueError, TypeError):  # damaged: made again below
            pass
    groups = literal_groups(sigs, sample)
    disk_cache.write(name, json.dumps([(lit.decode("latin-1"), members) for lit, members in groups]).encode())
    return groups


def _expressions(hyperscan, sigs: Sequence[Signature], sample: Collection[int],
                 groups: list[tuple[bytes, list[int]]]) -> Expressions:
    """What hyperscan looks for: each literal group's literal, the other signatures' rare literals, else their
    pattern from where it becomes rare."""
    common = common_text()
    grouped = {i for _, members in groups for i in members}
    expressions = [re.escape(lit) for lit, _ in groups]
    ids = [GROUP_IDS + g for g in range(len(groups))]
    flags = [hyperscan.HS_FLAG_CASELESS] * len(groups)
    for s in sigs:
        if s.index in grouped:
            continue
        if s.by_literal:
            found = [re.escape(lit).encode() for lit in s.literals]
            flag = hyperscan.HS_FLAG_CASELESS if caseless(s) else 0
        else:  # its literals are common in healthy logs: the pattern reports far fewer lines
            found = [scan_expression(s.pattern, common).encode()]
            flag = hyperscan.HS_FLAG_MULTILINE
        if s.index in sample:
            flag |= hyperscan.HS_FLAG_SINGLEMATCH
        expressions += found
        ids += [s.index] * len(found)
        flags += [flag] * len(found)
    return expressions, ids, flags


def _database(hyperscan, made_from: str, expressions: Callable[[], Expressions]):
    """A compiled block-mode database, from the cache when one was compiled from the same signatures."""
    name = f"signatures-{made_from}.hsdb"
    blob = disk_cache.read(name)
    if blob is not None:
        try:
            db = hyperscan.loadb(blob, hyperscan.HS_MODE_BLOCK)
            hyperscan.Scratch(db)  # a database built for another CPU fails here
            return db
        except Exception:  # noqa: BLE001 - corrupt, or of another platform: compile it again
            pass
    found, ids, flags = expressions()
    db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
    db.compile(expressions=found, ids=ids, elements=len(found), flags=flags)
    disk_cache.write(name, hyperscan.dumpb(db))
    return db


def _hs_version(hyperscan) -> str:
    """The module's own word (importlib.metadata costs each start 9 ms), else its distribution's."""
    if getattr(hyperscan, "__version__", None):
        return str(hyperscan.__version__)
    try:
        from importlib.metadata import version

        return version("hyperscan")
    except Exception:  # noqa: BLE001 - not installed as a distribution
        return "?"


class PortableEngine:
    """Aho-Corasick over every signature's literals, in the lower-cased chunk (read as latin-1: offsets stay)."""

    name = "portable"

    def __init__(self, sigs: Sequence[Signature], sample: Collection[int] = ()) -> None:
        import ahocorasick

        by_literal: dict[str, list[int]] = {}
        for s in sigs:
            for lit in s.literals:
                by_literal.setdefault(lit.lower(), []).append(s.index)
        self.automaton = ahocorasick.Automaton()
        for lit, ids in by_literal.items():
            self.automaton.add_word(lit, tuple(ids))
        self.automaton.make_automaton()
        self.sample = frozenset(sample)

    def scan(self, data: bytes, sampled: bool = False) -> LineHits:
        hits: list[tuple[int, int]] = []
        seen: set[int] = set()
        for end, ids in self.automaton.iter(data.lower().decode("latin-1")):
            for sig in ids:
                if sampled and sig in self.sample:
                    if sig in seen:
                        continue
                    seen.add(sig)
                hits.append((end, sig))
        return _group_by_line(data, hits)
