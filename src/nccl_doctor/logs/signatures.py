"""The log signature catalog (catalog/signatures.toml), loaded and compiled.

Each pattern lives once, as a Python regex; the other engines get derived forms: hyperscan needs no
named groups and no trailing unbounded tails (they would report one match per character), grep -E
needs POSIX classes. A required literal per signature feeds the portable pre-filter.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from functools import cache, cached_property
from collections.abc import Iterator
from typing import Any

try:  # Python 3.11+ keeps the regex parser here (sre_parse is a deprecated alias)
    from re import _constants as sre_constants  # type: ignore[attr-defined]
    from re import _parser as sre_parse  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants  # type: ignore[no-redef]
    import sre_parse  # type: ignore[no-redef]

from ..catalog import cause as lookup_cause
from ..catalog import load_toml, read_text
from ..catalog.env_vars import version_tuple
from .templates import example as template_example
from .templates import enum_word as template_enum_word
from .templates import literal as template_literal
from .templates import stored_meanings
from .templates import pattern as template_pattern
from .templates import Template, templates
from . import disk_cache

ROLES = ("root", "generic", "echo", "timeout", "fact", "hint")
ERROR_ROLES = ("root", "generic", "echo", "timeout")


@dataclass(frozen=True)
class Signature:
    index: int
    id: str
    role: str
    pattern: str
    example: str
    cause: str | None = None
    fact: str | None = None
    hint: str | None = None
    strength: float = 0.0  # how strongly the line alone argues for `cause` (0..1)
    also: tuple[tuple[str, float], ...] = ()  # other causes the same line is typical of
    literals: tuple[str, ...] = ()
    caseless: bool = False
    scope: str = "all"  # "tail": only read in the last lines of each file (frequent lines)
    unclaimed: bool = False  # hints: kept only for lines no fact/error signature claims
    fixed_in: tuple[int, ...] | None = None  # NCCL release that fixed the defect this message reveals
    note: str = ""
    prefilter: bool = False  # a source template: its literal is a word of it, the regex decides
    addon: bool = False  # reads part of a line (an OS error text); does not replace the templates' readings
    by_literal: bool = False  # engines look for its literals (rare in healthy logs), not for the whole pattern

    def __reduce__(self) -> tuple[Any, tuple[int]]:
        """Pickled as its place in the catalog (readings come back from worker processes)."""
        return signature_at, (self.index,)

    @cached_property
    def regex(self) -> re.Pattern[str]:
        """Compiled on first use: of thousands of signatures a log meets a few."""
        return re.compile(self.pattern)

    @property
    def is_error(self) -> bool:
        return self.role in ERROR_ROLES

    @property
    def causes(self) -> dict[str, float]:
        """What the line means: each cause it argues for, with its strength."""
        return {self.cause: self.strength, **dict(self.also)} if self.cause else {}

    @cached_property
    def runs(self) -> tuple[tuple[tuple[str, ...], ...], bool]:
        """literal_runs of the pattern: worked out on first use, like the regex."""
        return literal_runs(self.pattern)

    def may_match(self, text: str) -> bool:
        """False where every alternative of the pattern misses a run of plain characters that its matches hold: the
        regex need not run (a few template regexes take 20-350 us on a long line they do not match, and CUDA's error
        strings, each an alternation of its text and its enum name, 13 us on any line holding a common word)."""
        alternatives, folded = self.runs
        if not text.isascii():  # beyond ASCII, a caseless regex equates more than lower() does
            return True
        found_in = text.lower() if folded else text
        return any(all(run in found_in for run in runs) for runs in alternatives)

    def match(self, text: str) -> dict[str, str] | None:
        """Named captures of the first match in `text` (empty dict if none named), or None."""
        if not self.may_match(text):
            return None
        m = self.regex.search(text)
        return captures(m) if m else None


FIELDS = tuple(f.name for f in dataclasses.fields(Signature))  # the order of a cached table's rows


def captures(m: re.Match[str]) -> dict[str, str]:
    """A match's named captures; interned: the same values (sizes, phases, ids) recur in thousands of kept lines."""
    return {k: sys.intern(v) for k, v in m.groupdict().items() if v is not None}


def literal_runs(pattern: str) -> tuple[tuple[tuple[str, ...], ...], bool]:
    """Per alternative of the pattern (one, unless the whole pattern is an alternation, bare or in one group), the
    runs of plain characters at its top level (every match of it holds each), those in ASCII of three characters or
    more; and whether the pattern ignores case (then the runs are in lower case). An alternative without runs
    stands for any text."""
    try:
        parsed = sre_parse.parse(pattern)
    except (re.error, sre_constants.error):  # pragma: no cover - patterns are tested to compile
        return ((),), False
    folded = bool(parsed.state.flags & re.IGNORECASE)
    alternatives = _branches(list(parsed)) or [list(parsed)]
    runs = tuple(tuple(dict.fromkeys(r.lower() if folded else r for r in _runs(items) if r.isascii() and len(r) >= 3))
                 for items in alternatives)
    return runs, folded


def _branches(items: list[Any]) -> list[list[Any]] | None:
    """The branches of a pattern that is one alternation: `a|b`, or `(?:a|b)`."""
    if len(items) != 1:
        return None
    op, av = items[0]
    if op is sre_constants.BRANCH:
        return [list(branch) for branch in av[1]]
    if op is sre_constants.SUBPATTERN and not av[1] and not av[2] and len(av[-1]) == 1 \
            and av[-1][0][0] is sre_constants.BRANCH:  # (a group with flags of its own may fold case: not read)
        return [list(branch) for branch in av[-1][0][1][1]]
    return None


def _runs(items: list[Any]) -> list[str]:
    """The runs of consecutive literal characters in a sequence of parsed items."""
    runs: list[str] = []
    run: list[str] = []
    for op, av in [*items, (None, None)]:
        if op is sre_constants.LITERAL:
            run.append(chr(av))
            continue
        if run:
            runs.append("".join(run))
            run = []
    return runs


def required_literals(pattern: str) -> tuple[str, ...]:
    """Literals of which every match of `pattern` contains at least one (() when none is certain).

    Picks, at the top level of the pattern, the element whose alternatives have the longest shortest
    literal: a plain run of characters, or a group / alternation whose every branch has one.
    """
    try:
        parsed = sre_parse.parse(pattern)
    except (re.error, sre_constants.error):  # pragma: no cover - patterns are tested to compile
        return ()
    found = _alternatives(list(parsed))
    if not found:
        return ()
    if parsed.state.flags & re.IGNORECASE:
        found = [lit.lower() for lit in found]
    return tuple(dict.fromkeys(found))


def _alternatives(items: list[Any]) -> list[str] | None:
    candidates: list[list[str]] = []
    run: list[str] = []

    def flush() -> None:
        if run:
            candidates.append(["".join(run)])
            run.clear()

    for op, av in items:
        if op is sre_constants.LITERAL:
            run.append(chr(av))
            continue
        flush()
        sub: list[str] | None = None
        if op is sre_constants.SUBPATTERN:
            sub = _alternatives(list(av[-1]))
        elif op is sre_constants.BRANCH:
            branches = [_alternatives(list(b)) for b in av[1]]
            if all(branches):
                sub = [lit for b in branches for lit in b]  # type: ignore[union-attr]
        elif op in (sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT) and av[0] >= 1:
            sub = _alternatives(list(av[2]))
        if sub:
            candidates.append(sub)
    flush()
    if not candidates:
        return None
    return max(candidates, key=lambda alts: min(len(a) for a in alts))


_NAMED_GROUP = re.compile(r"\(\?P<\w+>")
_TAIL_ATOM = r"(?:\.|\\[SsWwDd]|\[[^\]]*\])[*+]\??"
_TRAILING_TAIL = re.compile(rf"(?:\(\?:{_TAIL_ATOM}\)|\(\?:[^()]*\)[*+]\??|{_TAIL_ATOM})\$?$")


def hyperscan_expression(pattern: str) -> str:
    """The pattern as hyperscan wants it: plain groups, no leading group, no unbounded tail.

    Python's re re-checks every reported line, so hyperscan only has to report every line that may match: a
    group at the start (the contexts a short template needs, an optional prefix) or an unbounded tail at the end
    changes no line's verdict, only its cost (a leading `[\\w/.-]+` or `(?:...|^\\W{0,4}|\\]:\\s*)` makes hyperscan
    track most positions of the input).
    """
    expr = _strip_head(_NAMED_GROUP.sub("(?:", pattern))
    while True:
        stripped = _strip_optional_tail(_TRAILING_TAIL.sub("", expr))
        if stripped == expr or not stripped or _unbalanced(stripped):
            return expr
        expr = stripped


_FLAGS = re.compile(r"\(\?[aiLmsux]+\)")
_QUANTIFIER = re.compile(r"(?:[?*+]|\{\d*,?\d*\})\??")
_ANY_RUN = re.compile(r"(?:\.|\\[sSwWdD])[*+]\??")  # '.*?' '\s+': dropped from the head like a group


def _strip_head(expr: str) -> str:
    """'(X)rest' -> 'rest' (X optional or not: what is left finds a superset of the lines), repeatedly, while the
    rest holds a literal of MIN_LITERAL characters and no top-level '|'."""
    flags = _FLAGS.match(expr)
    prefix = flags.group() if flags else ""
    expr = expr[len(prefix):]
    while expr.startswith("(") or _ANY_RUN.match(expr):
        run = _ANY_RUN.match(expr)
        end = run.end() - 1 if run else _group_end(expr)
        if end < 0:
            break
        rest = expr[end + 1:]
        quantifier = None if run else _QUANTIFIER.match(rest)
        rest = rest[quantifier.end():] if quantifier else rest
        literals = required_literals(prefix + rest) if rest and "|" not in _top_level(rest) else ()
        if not literals or min(map(len, literals)) < MIN_LITERAL:
            break
        expr = rest
    return prefix + expr


def scan_expression(pattern: str, common: CommonText) -> str:
    """What hyperscan looks for: `hyperscan_expression`, then, where healthy logs share its beginning, its
    shortest suffix that still finds the fewest healthy lines.

    A suffix finds a superset of the lines (re re-checks them). A common beginning is costly: `comm 0x.. rank 0
    nranks 8 cudaDev 0 busId 1000 - Abort COMPLETE` makes hyperscan follow every `Init COMPLETE` line up to its
    end, while `Abort COMPLETE` alone is found at the speed of a literal.
    """
    expr = hyperscan_expression(pattern)
    flags = _FLAGS.match(expr)
    prefix = flags.group() if flags else ""
    body = expr[len(prefix):]
    if "|" in _top_level(body):
        return expr  # a suffix of one branch would miss the others
    options = re.IGNORECASE if "i" in prefix else 0
    whole = required_literals(expr)
    longest = min(SCAN_LITERAL, max(map(len, whole), default=0))  # a suffix keeps a literal this long
    best: tuple[int, int, str] | None = None
    cuts = [0, *_atom_ends(body)]
    for before, cut in zip([0, *cuts], cuts):
        if _in_word(body[before:cut], body[cut:cut + 1]):
            continue  # a word's tail ('ort COMPLETE') is a weaker literal than the word, and no faster
        rest = body[cut:]
        literals = required_literals(prefix + rest)
        if not literals or min(map(len, literals)) < MIN_LITERAL or max(map(len, literals)) < longest:
            continue
        try:
            finder = re.compile(rest, options | re.MULTILINE)
        except re.error:
            continue  # cut inside a construct the atom reader does not know: not a candidate
        found = sum(1 for line in common.lines if finder.search(line))
        if best is None or (found, len(rest)) <= (best[0], best[1]):
            best = (found, len(rest), rest)
    return prefix + best[2] if best else expr


def _in_word(atom: str, following: str) -> bool:
    return len(atom) == 1 and atom.isalnum() and following.isalnum()


def _atom_ends(expr: str) -> Iterator[int]:
    """End of each top-level atom of expr with its quantifier: a group, a class, an escape or one character."""
    i = 0
    while i < len(expr):
        if expr[i] == "(":
            end = _group_end(expr[i:])
            if end < 0:
                return
            i += end + 1
        elif expr[i] == "[":
            j = i + 1 + (expr[i + 1:i + 2] == "^")
            j += expr[j:j + 1] == "]"
            while j < len(expr) and expr[j] != "]":
                j += 2 if expr[j] == "\\" else 1
            i = j + 1
        else:
            i += 2 if expr[i] == "\\" else 1
        quantifier = _QUANTIFIER.match(expr, i)
        i = quantifier.end() if quantifier else i
        yield i


def _strip_optional_tail(expr: str) -> str:
    """'head(?:X)?' -> 'head' when the group is a whole top-level element and the head has no top-level '|'."""
    if not expr.endswith(")?") or expr.endswith("\\)?"):
        return expr
    for start in (i for i, ch in enumerate(expr) if ch == "("):
        if _group_end(expr[start:]) == len(expr) - start - 2:
            head = expr[:start]
            if head and not _unbalanced(head) and "|" not in _top_level(head) and not head.endswith("\\"):
                return head
            return expr
    return expr


def _parens(expr: str) -> Iterator[tuple[int, int]]:
    """(index, nesting depth after it) of every grouping parenthesis, skipping escapes and [classes];
    a final (len(expr), -1) marks an unterminated character class."""
    depth, escaped, in_class = 0, False, False
    for i, ch in enumerate(expr):
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif in_class:
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
        elif ch in "()":
            depth += 1 if ch == "(" else -1
            yield i, depth
    if in_class:
        yield len(expr), -1


def _group_end(expr: str) -> int:
    """Index of the parenthesis closing the group that opens expr[0], or -1."""
    return next((i for i, depth in _parens(expr) if depth == 0 and i < len(expr)), -1)


def _top_level(expr: str) -> str:
    """expr with every parenthesised group removed (to see top-level alternation)."""
    out, i = [], 0
    while i < len(expr):
        if expr[i] == "\\":
            out.append(expr[i:i + 2])
            i += 2
        elif expr[i] == "(":
            end = _group_end(expr[i:])
            if end < 0:
                return expr
            i += end + 1
        else:
            out.append(expr[i])
            i += 1
    return "".join(out)


def _unbalanced(expr: str) -> bool:
    depth = 0
    for _, depth in _parens(expr):
        if depth < 0:
            return True
    return depth != 0


_ERE_REPLACEMENTS = [
    (re.compile(r"\(\?P<\w+>"), "("),
    (re.compile(r"\(\?:"), "("),
    (re.compile(r"\\d"), "[0-9]"),
    (re.compile(r"\\b"), ""),
    (re.compile(r"\*\?"), "*"),
    (re.compile(r"\+\?"), "+"),
    (re.compile(r"\?\?"), "?"),
]
_CLASS_ESCAPES = {"w": "[:alnum:]_", "d": "0-9", "s": "[:space:]", "]": "", "-": "", "\\": "\\"}


def grep_expression(pattern: str) -> str:
    """A GNU `grep -E` rendering of the pattern (for the benchmark that compares with grep)."""
    expr = _posix_brackets(pattern.removeprefix("(?i)"))
    for rx, repl in _ERE_REPLACEMENTS:
        expr = rx.sub(repl, expr)
    return expr


def _posix_brackets(pattern: str) -> str:
    """Rewrite [...] classes for POSIX: no backslash escapes inside, ']' first and '-' last."""
    out, i = [], 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            out.append(pattern[i:i + 2])
            i += 2
            continue
        if ch != "[":
            out.append(ch)
            i += 1
            continue
        j = i + 1
        negate = pattern[j:j + 1] == "^"
        j += negate
        members, closing, dash = [], False, False
        while j < len(pattern):
            c = pattern[j]
            if c == "\\" and j + 1 < len(pattern):
                esc = pattern[j + 1]
                if esc == "]":
                    closing = True
                elif esc == "-":
                    dash = True
                else:
                    members.append(_CLASS_ESCAPES.get(esc, esc))
                j += 2
                continue
            if c == "]" and (members or closing or dash):
                break
            if c == "-" and (j + 1 < len(pattern) and pattern[j + 1] == "]"):
                dash = True
            else:
                members.append(c)
            j += 1
        out.append("[" + ("^" if negate else "") + ("]" if closing else "") + "".join(members) + ("-" if dash else "") + "]")
        i = j + 1
    return "".join(out)


MIN_LITERAL = 4
SCAN_LITERAL = 8  # a suffix hyperscan looks for instead of the pattern keeps a literal this long (or the longest)


class CommonText:
    """What healthy logs are made of (lower case): catalog/healthy.log and the examples of the catalog's facts. A
    literal found there would send every such line to the Python re-check, so a signature holding one is looked
    for by its whole pattern instead (and a template by another of its words)."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        normal = [r["example"] for r in rows if r["role"] == "fact" or r.get("scope") == "tail"]
        self.lines = normal + read_text("healthy.log").splitlines()
        self.text = "\n".join(self.lines).lower()
        words = set(self.text.split())
        self.parts = {w[i:j] for w in words for i in range(len(w)) for j in range(i + 1, len(w) + 1)}

    def __contains__(self, literal: str) -> bool:
        """Whether the text holds `literal` (lower case): a set lookup for a literal without spaces."""
        if any(c.isspace() for c in literal):
            return literal in self.text
        return literal in self.parts

    def lines_with(self, literal: str) -> list[str]:
        return [line for line in self.lines if literal in line.lower()]


def distinctive(literal: str, common: CommonText, pattern: str | None = None) -> bool:
    """Whether looking for `literal` reports few lines of healthy logs: none, or only lines `pattern` matches."""
    lit = literal.lower()
    if len(lit) < MIN_LITERAL and (len(lit) < 3 or lit.isalnum()):
        return False
    if lit not in common:
        return True
    return pattern is not None and all(re.search(pattern, line) for line in common.lines_with(lit))


TABLE_FORMAT = 2  # bump when what a cached signature table means changes


@cache
def signatures() -> tuple[Signature, ...]:
    """Every signature: the written ones, then one per source template. Deriving the templates' patterns and
    literals takes a fifth of a second; the table is kept on disk (logs/disk_cache.py) under a key of the files
    it is made from and of this code."""
    try:
        name = f"signature-table-{disk_cache.key(TABLE_FORMAT, catalog_stamps())}.json"
    except (OSError, TypeError):  # the package is not plain files (a zip): no cache
        return _build()
    blob = disk_cache.read(name)
    if blob is not None:
        try:
            return tuple(_from_json(row) for row in json.loads(blob))
        except (ValueError, TypeError, KeyError, IndexError):  # a damaged entry: made again below
            pass
    table = _build()
    disk_cache.write(name, json.dumps([[getattr(s, f) for f in FIELDS] for s in table]).encode())
    return table


def catalog_stamps() -> list[tuple[str, int, int]]:
    """Name, size and modification time of the catalog files and modules the table is derived from."""
    catalog, here = resources.files("nccl_doctor.catalog"), Path(__file__).parent
    paths = [catalog / "signatures.toml", catalog / "healthy.log", catalog / "causes.toml",
             *sorted((catalog / "templates").iterdir(), key=lambda p: p.name),
             here / "signatures.py", here / "templates.py"]
    return [(str(path), (st := os.stat(str(path))).st_size, st.st_mtime_ns) for path in paths]


def _from_json(row: list[Any]) -> Signature:
    """A cached row (the fields in order) as the Signature it was: set in place, as a frozen dataclass's own
    __init__ would (a third of the time; thousands are made at each start)."""
    if len(row) != len(FIELDS):
        raise ValueError("a row of another table format")
    values = dict(zip(FIELDS, row))
    for name in ("literals", "fixed_in"):
        if values[name] is not None:
            values[name] = tuple(values[name])
    values["also"] = tuple(tuple(pair) for pair in values["also"])
    sig = object.__new__(Signature)
    sig.__dict__.update(values)
    return sig


def _build() -> tuple[Signature, ...]:
    rows = load_toml("signatures.toml")["signature"]
    common = common_text()
    table: list[Signature] = []
    seen: set[str] = set()
    for i, row in enumerate(rows):
        role = row["role"]
        if role not in ROLES:
            raise ValueError(f"signature {row['id']}: unknown role {role}")
        if row["id"] in seen:
            raise ValueError(f"signature {row['id']} defined twice")
        seen.add(row["id"])
        cause = row.get("cause")
        also = tuple(row.get("also", {}).items())
        for named in ([cause] if cause else []) + [c for c, _ in also]:
            lookup_cause(named)
        if role in ERROR_ROLES and not (cause and "strength" in row):
            raise ValueError(f"signature {row['id']}: role {role} needs a cause and a strength")
        pattern = row["pattern"]
        literals = _literals(row, pattern)
        table.append(Signature(
            index=i, id=row["id"], role=role, pattern=pattern, example=row["example"], cause=cause,
            fact=row.get("fact"), hint=row.get("hint"),
            strength=float(row.get("strength", 0.0)), also=also,
            literals=literals, by_literal=all(distinctive(lit, common, pattern) for lit in literals),
            caseless=pattern.startswith("(?i)"),
            scope=row.get("scope", "all"),
            unclaimed=bool(row.get("unclaimed", False)), addon=bool(row.get("addon", False)),
            fixed_in=version_tuple(row["fixed_in"]) if row.get("fixed_in") else None,
            note=row.get("note", ""),
        ))
    return tuple(table) + template_signatures(len(table), common)


@cache
def common_text() -> CommonText:
    return CommonText(load_toml("signatures.toml")["signature"])


def signature_at(index: int) -> Signature:
    return signatures()[index]


def template_id(tpl: Template) -> str:
    """A template signature's id: its project and a digest of its text (releases that print it share it)."""
    return f"{tpl.project}:{hashlib.sha1(tpl.text.encode()).hexdigest()[:10]}"


def template_signature(tpl: Template) -> Signature | None:
    """The signature made from a template (None for templates too vague to have one)."""
    return _by_id().get(template_id(tpl))


def template_signatures(start: int, common: CommonText) -> tuple[Signature, ...]:
    """One signature per source template (logs/templates.py), after the written ones."""
    out: list[Signature] = []
    seen: set[str] = set()
    meanings = stored_meanings()
    for tpl in templates():
        meaning, regex = meanings[tpl], template_pattern(tpl)
        if not meaning.role:
            meaning = None
        if meaning is None or regex is None:
            continue  # unclaimed (a test forbids it) or too little fixed text to recognise
        sig_id = template_id(tpl)
        if sig_id in seen:
            continue
        seen.add(sig_id)
        ranked = sorted(meaning.causes.items(), key=lambda cs: -cs[1])
        word = template_literal(tpl, common)
        named = template_enum_word(tpl)  # a CUDA error's enum name, in CUDA's and HIP's spelling
        cause, strength = ranked[0] if ranked else (None, 0.0)
        out.append(Signature(
            index=start + len(out), id=sig_id, role=meaning.role, pattern=regex, example=template_example(tpl),
            cause=cause, hint="benign_warn" if meaning.benign else None, strength=strength, also=tuple(ranked[1:]),
            literals=(word, named) if named else (word,), caseless=True, prefilter=True,
            by_literal=distinctive(word, common), note=tpl.provenance + (
                f" - not a failure: {meaning.benign}" if meaning.benign else "")))
    return tuple(out)


@dataclass(frozen=True)
class Fallback:
    """What an error no signature explains most likely is (catalog/signatures.toml [fallback])."""

    generic: str
    watchdog: str
    by_source: tuple[tuple[str, str], ...]  # (NCCL source-file prefix, cause), first match wins
    by_result: dict[int, str]  # ncclResult_t code -> cause

    def cause_for_source(self, path: str) -> str | None:
        path = path.removeprefix("src/")
        return next((cause for prefix, cause in self.by_source if path.startswith(prefix)), None)


@cache
def fallback() -> Fallback:
    table = load_toml("signatures.toml")["fallback"]
    fb = Fallback(generic=table["generic"], watchdog=table["watchdog"],
                  by_source=tuple(table["source"].items()),
                  by_result={int(code): cause for code, cause in table["result"].items()})
    for cause in (fb.generic, fb.watchdog, *dict(fb.by_source).values(), *fb.by_result.values()):
        lookup_cause(cause)
    return fb


def _literals(row: dict[str, Any], pattern: str) -> tuple[str, ...]:
    given = row.get("literal")
    if given:
        return (given,) if isinstance(given, str) else tuple(given)
    return required_literals(pattern)


def by_id(signature_id: str) -> Signature:
    return _by_id()[signature_id]


@cache
def _by_id() -> dict[str, Signature]:
    return {sig.id: sig for sig in signatures()}
