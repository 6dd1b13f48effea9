"""Multi-pattern matching over chunks of lines: which lines may match which signatures.

Two engines with one interface, both looking for every signature at once and reporting only the lines
that may match; the caller re-checks each reported line with the signature's Python regex, which also
extracts the captures.

- hyperscan (a dependency wherever it has wheels) runs in C. A signature whose literals are rare in healthy
  logs (`Signature.by_literal`, nearly all of them) is looked for by its literals, the others by their whole
  pattern. Compiling ~4,400 patterns takes a second, so the database is cached on disk, keyed by what it holds.
- portable (Aho-Corasick, `pyahocorasick`, where hyperscan cannot be installed) looks for every signature's
  literals in the lower-cased chunk.

`scan(data, sampled=True)` reports only the first line per chunk of the signatures named `sample` at
construction: facts that saturate (logs/reading.py), which would otherwise cost a Python call per line.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Collection, Sequence
from functools import cache
from typing import Protocol

from . import disk_cache
from .signatures import Signature, common_text, scan_expression

LineHits = list[tuple[int, int, list[int]]]  # (line start, line end, signature indexes), in line order
Expressions = tuple[list[bytes], list[int], list[int]]  # hyperscan's expressions, their signatures, their flags
CACHE_FORMAT = 2  # bump when what a cached database means changes


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
        made_from = disk_cache.key(CACHE_FORMAT, _hs_version(hyperscan), common_text().text,
                                   [(s.index, s.pattern, s.by_literal, s.literals, caseless(s)) for s in sigs])
        self.full = _database(hyperscan, made_from, lambda: _expressions(hyperscan, sigs, ()))
        self.sampled = (_database(hyperscan, disk_cache.key(made_from, sorted(sample)),
                                  lambda: _expressions(hyperscan, sigs, sample)) if sample else self.full)
        self.scratch = {id(db): hyperscan.Scratch(db) for db in (self.full, self.sampled)}

    def scan(self, data: bytes, sampled: bool = False) -> LineHits:
        hits: list[tuple[int, int]] = []
        append = hits.append

        def on_match(sig: int, start: int, end: int, flags: int, context: object) -> None:
            append((end - 1 if end else 0, sig))

        db = self.sampled if sampled else self.full
        db.scan(data, match_event_handler=on_match, scratch=self.scratch[id(db)])
        return _group_by_line(data, hits)


def _expressions(hyperscan, sigs: Sequence[Signature], sample: Collection[int]) -> Expressions:
    """What hyperscan looks for: a signature's rare literals, else its pattern from where it becomes rare."""
    common = common_text()
    expressions, ids, flags = [], [], []
    for s in sigs:
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
    try:
        from importlib.metadata import version

        return version("hyperscan")
    except Exception:  # noqa: BLE001 - not installed as a distribution: the module's own word
        return str(getattr(hyperscan, "__version__", "?"))


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
