"""Messages recognised from most of their words: a source template whose text a line holds cut or reworded.

Users paste what they see, and what they see is not always the message as printed: a line cut at the terminal's
edge ('... between these two device'), a wrapper that keeps the middle of NCCL's text ('rank 27 and rank 19
both on CUDA device 53000'), a message retyped into an issue. The exact signatures miss such lines. Here every
specific source template (logs/templates.py: NCCL, RCCL, aws-ofi-nccl, Gloo, PyTorch, CUDA) is a sequence of
words, numbers standing as '#'; a line no signature claimed is compared with the templates that share runs of
three words with it, and it is read as the template whose words it holds most of, in order. Coverage below
MIN_COVERAGE, or fewer than MIN_WORDS matched words, reads as nothing.

Only the lines of small sources are compared (reading.FRAGMENT_BYTES): pasted excerpts, where a cut line is
often all there is; whole logs are read by their exact signatures.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from difflib import SequenceMatcher
from functools import cache

from .templates import PRINTF, Template, stored_meanings, templates

MIN_COVERAGE = 0.6  # share of a template's words the line holds, in order
MIN_WORDS = 4  # matched words that are not numbers
MIN_RUN = 4  # ... of which this many in one unbroken run
MIN_TEMPLATE_WORDS = 5  # templates with fewer words are too vague to recognise from a part
COMMON_TRIGRAM = 40  # runs of three words that this many templates share locate nothing
NUMBER = "#"

_TOKEN = re.compile(r"[a-z0-9]+")
_HAS_DIGIT = re.compile(r"\d")
_GAP = "\x00"  # a %s: any words may stand there, no run of three crosses it


@dataclass(frozen=True)
class Reading:
    """A line read as a template from part of its words."""

    template: Template
    coverage: float  # share of the template's words found in the line, in order


def tokens(text: str) -> list[str]:
    """Lower-case words; any word holding a digit (numbers, hex, bus ids) is NUMBER."""
    return [NUMBER if _HAS_DIGIT.search(t) else t for t in _TOKEN.findall(text.lower())]


def template_tokens(text: str) -> list[str]:
    """A template's words: numeric placeholders are NUMBER, string placeholders a gap."""
    def placeholder(m: re.Match[str]) -> str:
        conv = m.group("conv")
        return " " if conv == "%" else (f" {_GAP} " if conv in "sc" else " 0 ")

    out: list[str] = []
    for part in PRINTF.sub(placeholder, text).split(_GAP):
        out += tokens(part) + [_GAP]
    return out[:-1]


@dataclass(frozen=True)
class Entry:
    template: Template
    words: tuple[str, ...]  # template_tokens without gaps
    strength: float  # its main cause's: between two templates a line holds as much of, the more telling


class Index:
    """The specific templates, found by the runs of three words they hold."""

    def __init__(self) -> None:
        meanings = stored_meanings()
        self.entries: list[Entry] = []
        by_trigram: dict[tuple[str, ...], set[int]] = {}
        for template in templates():
            meaning = meanings[template]
            if meaning.role != "root" or not meaning.causes:  # generic ones tell too little from a part
                continue
            seq = template_tokens(template.text)
            words = tuple(t for t in seq if t != _GAP)
            if sum(t != NUMBER for t in words) < MIN_TEMPLATE_WORDS:
                continue
            index = len(self.entries)
            self.entries.append(Entry(template, words, max(meaning.causes.values())))
            for tri in trigrams(seq):
                by_trigram.setdefault(tri, set()).add(index)
        self.by_trigram = {tri: ids for tri, ids in by_trigram.items() if len(ids) < COMMON_TRIGRAM}

    def read(self, text: str) -> Reading | None:
        """The template the line holds most of, if it holds enough of one."""
        words = tokens(text)
        if len(words) < MIN_WORDS:
            return None
        shared = Counter(i for tri in set(trigrams(words)) for i in self.by_trigram.get(tri, ()))
        best: tuple[float, float, Entry] | None = None
        for i, _ in shared.most_common(8):
            entry = self.entries[i]
            coverage = covered(entry.words, words)
            if coverage >= MIN_COVERAGE and (best is None or (coverage, entry.strength) > best[:2]):
                best = (coverage, entry.strength, entry)
        if best is None:
            return None
        coverage, _, entry = best
        return Reading(entry.template, round(coverage, 2))


def trigrams(seq: list[str]) -> list[tuple[str, ...]]:
    """Runs of three words, none crossing a gap and not all numbers."""
    return [tri for tri in zip(seq, seq[1:], seq[2:])
            if _GAP not in tri and any(t != NUMBER for t in tri)]


def covered(template: tuple[str, ...], line: list[str]) -> float:
    """Share of the template's words the line holds in order; 0 unless enough words and one long run match."""
    blocks = SequenceMatcher(None, template, line, autojunk=False).get_matching_blocks()
    words = sum(1 for b in blocks for t in template[b.a:b.a + b.size] if t != NUMBER)
    if words < MIN_WORDS or max(b.size for b in blocks) < MIN_RUN:
        return 0.0
    return sum(b.size for b in blocks) / len(template)


@cache
def index() -> Index:
    return Index()
