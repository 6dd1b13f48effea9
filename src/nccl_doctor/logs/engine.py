"""Multi-pattern matching over chunks of lines: which lines may match which signatures.

Two engines with one interface. hyperscan (optional extra `fast`) runs every pattern at once in C
and reports only the lines that match; the portable engine finds lines holding one of the
signatures' required literals with one combined regex. Either way the caller re-checks each reported
line with the signature's Python regex, which also extracts the captures.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from functools import cache
from typing import Protocol

from .signatures import Signature, hyperscan_expression

LineHits = list[tuple[int, int, list[int]]]  # (line start, line end, signature indexes), in line order


class Engine(Protocol):
    name: str

    def scan(self, data: bytes) -> LineHits: ...


def make_engine(sigs: Sequence[Signature], prefer: str | None = None) -> Engine:
    """hyperscan when available (unless NCCL_DOCTOR_ENGINE=portable), else the portable engine."""
    choice = prefer or os.environ.get("NCCL_DOCTOR_ENGINE", "auto")
    if choice in ("auto", "hyperscan"):
        try:
            return HyperscanEngine(sigs)
        except ImportError:
            if choice == "hyperscan":
                raise
    return PortableEngine(sigs)


@cache
def default_engine(prefer: str | None = None) -> Engine:
    """The engine for the catalog's main signatures, compiled once per process."""
    from .signatures import signatures

    return make_engine([s for s in signatures() if s.scope == "all"], prefer)


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


class HyperscanEngine:
    name = "hyperscan"

    def __init__(self, sigs: Sequence[Signature]) -> None:
        import hyperscan

        self._hs = hyperscan
        self.db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
        # Source templates are looked for by their literal (hyperscan compiles thousands of `.*` patterns slowly
        # and the Python regex re-checks every hit anyway); written signatures keep their full pattern.
        expressions = [re.escape(s.literals[0]).encode() if s.prefilter else hyperscan_expression(s.pattern).encode()
                       for s in sigs]
        flags = [hyperscan.HS_FLAG_CASELESS if s.prefilter else hyperscan.HS_FLAG_MULTILINE for s in sigs]
        self.db.compile(expressions=expressions, ids=[s.index for s in sigs], elements=len(sigs), flags=flags)
        self.scratch = hyperscan.Scratch(self.db)

    def scan(self, data: bytes) -> LineHits:
        hits: list[tuple[int, int]] = []
        append = hits.append

        def on_match(sig: int, start: int, end: int, flags: int, context: object) -> None:
            append((end - 1 if end else 0, sig))

        self.db.scan(data, match_event_handler=on_match, scratch=self.scratch)
        return _group_by_line(data, hits)


class PortableEngine:
    """Pure Python: a few rare 'gate' substrings found with bytes.find, then literal tests per candidate line.

    Every signature has required literals (at least one occurs in any matching line). Searching each of
    the ~200 literals separately would cost ~200 passes over the data, and one big alternation regex is
    slower still in Python's re. Instead a small set of gates (substrings of the literals, chosen to be rare
    in a sample of the input and to cover every literal) is searched; each hit's line is then tested.
    """

    name = "portable"
    GRAM = 3
    SLICE = 16 * 1024
    MAX_RESAMPLES = 6

    def __init__(self, sigs: Sequence[Signature]) -> None:
        self.checks = [(s.index, tuple(lit.encode() for lit in s.literals), s.caseless) for s in sigs if s.literals]
        self.unfiltered = [(s.index, re.compile(s.pattern.encode(), re.MULTILINE)) for s in sigs if not s.literals]
        exact = {lit for _, lits, caseless in self.checks if not caseless for lit in lits}
        caseless = {lit for _, lits, caseless in self.checks if caseless for lit in lits}
        self.exact = _minimal(exact)
        self.caseless = _minimal(caseless)
        self.gates: tuple[list[bytes], list[bytes]] = (choose_gates(self.exact, b"", self.GRAM),
                                                       choose_gates(self.caseless, b"", self.GRAM))
        self.resamples = 0

    def _resample(self, data: bytes) -> None:
        """Pick gates that are rare in this input: a few slices spread over the chunk."""
        step = max(len(data) // 4, 1)
        sample = b"".join(data[i:i + self.SLICE] for i in range(0, len(data), step))
        self.gates = choose_gates(self.exact, sample, self.GRAM), choose_gates(self.caseless, sample.lower(), self.GRAM)
        self.resamples += 1

    def scan(self, data: bytes) -> LineHits:
        if self.resamples == 0 and len(data) >= 4 * self.SLICE:
            self._resample(data)
        out = self._scan(data)
        if self.resamples < self.MAX_RESAMPLES and len(data) >= 4 * self.SLICE and self._wasteful(data, out):
            self._resample(data)
        return out

    def _wasteful(self, data: bytes, hits: LineHits) -> bool:
        return self.last_candidates > 64 * (len(data) / (1 << 20)) and self.last_candidates > 4 * len(hits)

    def _scan(self, data: bytes) -> LineHits:
        exact_gates, caseless_gates = self.gates
        lines: dict[int, int] = {}
        _collect_lines(data, exact_gates, lines)
        if caseless_gates:
            _collect_lines(data.lower(), caseless_gates, lines)
        self.last_candidates = len(lines)
        out: LineHits = []
        for start in sorted(lines):
            end = lines[start]
            line = data[start:end]
            lower = None
            found = []
            for index, literals, caseless in self.checks:
                if caseless:
                    lower = line.lower() if lower is None else lower
                    haystack = lower
                else:
                    haystack = line
                if any(lit in haystack for lit in literals):
                    found.append(index)
            if found:
                out.append((start, end, found))
        for index, rx in self.unfiltered:
            extra = [(m.start(), index) for m in rx.finditer(data)]
            if extra:
                merged = {start: (start, end, list(ids)) for start, end, ids in out}
                for start, end, ids in _group_by_line(data, extra):
                    merged.setdefault(start, (start, end, []))[2].extend(ids)
                out = [merged[k] for k in sorted(merged)]
        return out


def _minimal(literals: set[bytes]) -> list[bytes]:
    """Drop literals that contain another one: finding the shorter finds both."""
    return sorted(lit for lit in literals if not any(o != lit and o in lit for o in literals))


def choose_gates(literals: list[bytes], sample: bytes, gram: int) -> list[bytes]:
    """A small set of substrings covering every literal, preferring ones rare in the sample (greedy set cover)."""
    cover: dict[bytes, set[int]] = {}
    for i, lit in enumerate(literals):
        grams = {lit} if len(lit) <= gram else {lit[j:j + gram] for j in range(len(lit) - gram + 1)}
        for g in grams:
            cover.setdefault(g, set()).add(i)
    per_mb = (1 << 20) / max(len(sample), 1)
    # One extra pass over the data costs about as much as testing ~10 candidate lines per MiB.
    cost = {g: 1.0 + 0.1 * sample.count(g) * per_mb for g in cover}
    need = set(range(len(literals)))
    gates: list[bytes] = []
    while need:
        best = min((g for g in cover if cover[g] & need), key=lambda g: cost[g] / len(cover[g] & need))
        gates.append(best)
        need -= cover[best]
    return gates


def _collect_lines(data: bytes, gates: list[bytes], lines: dict[int, int]) -> None:
    find, rfind = data.find, data.rfind
    for gate in gates:
        pos = find(gate)
        while pos >= 0:
            start = rfind(b"\n", 0, pos) + 1
            end = find(b"\n", pos)
            if end < 0:
                end = len(data)
            lines[start] = end
            pos = find(gate, end)
