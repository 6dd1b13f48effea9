"""How NCCL and PyTorch parse environment values, reproduced so that lint can say what they will really use.

- NCCL_PARAM integers and booleans: strtoll(value, NULL, 0): leading spaces and a sign are accepted, `0x`
  means hex and a leading `0` octal, parsing stops at the first bad character without any error (so `4M` is 4
  and `true` is 0); only overflow (ERANGE) makes NCCL fall back to the default.
- NCCL_ALGO / NCCL_PROTO (parseList in src/graph/tuning.cc): `[func:]list` entries separated by `;`, only the
  first may omit the function, a list may start with `^`; names are case-insensitive; since 2.24 an unknown
  name or function fails with ncclInvalidUsage, before that unknown names were ignored.
- PyTorch: getCvarBool accepts y/yes/1/t/true and n/no/0/f/false (any case) and raises on anything else;
  getCvarInt uses std::stoi (trailing junk ignored, no digits raises).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
NCCL_FUNCTIONS = ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce")
PER_FUNCTION_SINCE = (2, 24, 3)  # first release with 'func:list' entries and strict token checks
TORCH_TRUE = ("1", "true", "t", "yes", "y")
TORCH_FALSE = ("0", "false", "f", "no", "n")


@dataclass(frozen=True)
class Strtoll:
    """What strtoll(text, NULL, 0) gives: the number, how much it consumed, and whether it overflowed."""

    value: int
    consumed: str
    rest: str
    overflow: bool = False

    @property
    def complete(self) -> bool:
        return bool(self.consumed) and not self.rest

    @property
    def octal(self) -> bool:
        return bool(re.fullmatch(r"[+-]?0[0-7]+", self.consumed.strip()))


def strtoll(text: str) -> Strtoll:
    m = re.match(r"[ \t\n\v\f\r]*([+-]?)(0[xX](?=[0-9a-fA-F])[0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)", text)
    if not m:
        return Strtoll(0, "", text)
    sign, digits = m.group(1), m.group(2)
    if digits[:2].lower() == "0x":
        number = int(digits, 16)
    elif digits.startswith("0") and len(digits) > 1:
        number = int(digits, 8)
    else:
        number = int(digits)
    number = -number if sign == "-" else number
    overflow = not INT64_MIN <= number <= INT64_MAX
    return Strtoll(max(INT64_MIN, min(INT64_MAX, number)), m.group(0), text[m.end():], overflow)


def stoi(text: str) -> int | None:
    """std::stoi: leading spaces, sign, decimal digits; None where it would throw."""
    m = re.match(r"\s*([+-]?\d+)", text)
    return int(m.group(1)) if m else None


def torch_bool(text: str) -> bool | None:
    low = text.lower()
    return True if low in TORCH_TRUE else False if low in TORCH_FALSE else None


@dataclass
class AlgoProtoList:
    """The result of parsing an NCCL_ALGO / NCCL_PROTO value: what each function may use, and the problems."""

    enabled: dict[str, set[str]] = field(default_factory=dict)  # function -> enabled names
    unknown: list[str] = field(default_factory=list)  # element tokens that name nothing
    unknown_functions: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # grammar errors (NCCL >= 2.24 fails)
    per_function: bool = False  # uses 'func:list' syntax


def parse_algo_proto(text: str, names: tuple[str, ...]) -> AlgoProtoList:
    """NCCL's parseList(str, ncclFuncStr, ..., names): which names each collective may use."""
    result = AlgoProtoList(enabled={f: set(names) for f in NCCL_FUNCTIONS})
    canon = {n.lower(): n for n in names}
    funcs = {f.lower(): f for f in NCCL_FUNCTIONS}
    entries = [e for e in text.split(";") if e]
    for position, entry in enumerate(entries):
        parts = [p for p in entry.split(":") if p]
        if not parts:
            continue
        if len(parts) == 1:
            if position > 0:
                result.errors.append(f"entry '{entry}' has no function prefix (only the first entry may omit it)")
                continue
            prefix, elements = None, parts[0]
        else:
            prefix, elements = parts[0], parts[1]
            result.per_function = True
        negate = elements.startswith("^")
        tokens = [t for t in (elements[1:] if negate else elements).split(",") if t]
        chosen = set()
        for token in tokens:
            if token.lower() in canon:
                chosen.add(canon[token.lower()])
            else:
                result.unknown.append(token)
        selected = set(names) - chosen if negate else chosen
        if prefix is None:
            targets = list(NCCL_FUNCTIONS)
        elif prefix.lower() in funcs:
            targets = [funcs[prefix.lower()]]
        else:
            result.unknown_functions.append(prefix)
            continue
        for func in targets:
            result.enabled[func] = set(selected)
    return result


def legacy_algo_proto(text: str, names: tuple[str, ...]) -> set[str]:
    """Before 2.24: one comma list, optional '^', unknown tokens silently ignored (so 'allreduce:tree' is nothing)."""
    negate = text.startswith("^")
    tokens = {t.lower() for t in (text[1:] if negate else text).split(",") if t}
    chosen = {n for n in names if n.lower() in tokens}
    return set(names) - chosen if negate else chosen
