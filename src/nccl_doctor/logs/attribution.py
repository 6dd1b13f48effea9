"""Who wrote a line: rank, host, pid and time, from the prefixes launchers and libraries put on it.

Prefixes are peeled off the front one at a time, outermost first (a launcher's tag wraps PyTorch's,
which wraps NCCL's): mpirun `[1,3]<stderr>:`, torchrun `[rank3]:` / `[default3]:`, srun --label `3: `,
Ray `(Worker pid=12)`, timestamps (ISO, kubectl --timestamps, glog `[E0709 17:05:38.16 file.cpp:12]`),
then NCCL's `host:pid:tid [dev]`. PyTorch's `[PG ... Rank 3]` / `[Rank 3]` inside the message come last.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from datetime import datetime

_LAUNCHER_PREFIXES = [
    re.compile(r"\|\s+"),  # log viewers that print columns (CloudWatch: "| 2024-11-28T07:42:14.532Z | ...")
    re.compile(r"(?P<file>[\w.-]+\.(?:log|txt|out|err)):(?:\d+:)?(?=\S)"),  # grep -r / grep -H: "rank3.log:..."
    re.compile(r"\[\d+,(?P<rank>\d+)\]<(?:stdout|stderr)>:"),  # mpirun --tag-output
    re.compile(r"(?:\w+ )?\[rank=(?P<rank>\d+)\]\s*\|\|\s*"),  # Determined AI: "fa88a9df [rank=1] || ..."
    re.compile(r"\[(?P<rank>\d+)\] (?=[\w.-]+:\d+:\d+ \[\d+\] )"),  # "[3] host:pid:tid [dev] NCCL ..."
    re.compile(r"\[(?:rank|default|trainer|worker|role)?[A-Za-z_-]*?(?P<rank>\d+)(?:\|\d+)?\]:"),  # torchrun/torchx
    re.compile(r"\s*(?P<rank>\d{1,5}): (?=\S)"),  # srun --label
    re.compile(r"\((?P<actor>[A-Za-z_][\w.]*)(?: pid=(?P<pid>\d+))?(?:, ip=(?P<host>[\d.]+))?\) "),  # Ray
    re.compile(r"(?P<iso>\d{4}-\d\d-\d\d[T ]\d\d:\d\d(?::\d\d(?:[.,]\d+)?)?(?:Z|[+-]\d\d:?\d\d)?)(?: \|)?\s+"),
    re.compile(r"\[(?P<iso>\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?)\]\s*"),
    re.compile(r"\[(?P<level>[IWEF])(?P<mmdd>\d{3,4})? ?(?P<hms>\d\d:\d\d:\d\d(?:\.\d+)?)? ?[\w.-]+:\d+\]\s*"),
    re.compile(r"(?P<host>[\w.-]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] "),  # NCCL
    re.compile(r"\[(?P<dev>\d+)\] (?=(?:[\w/.]+:\d+ (?:\([^)]*\) )?)?NCCL )"),  # NCCL with host cut off
]
# All of them in one alternation, tried in the same order in one call: which one matches, if any (the loop below
# then runs that one for its fields). A line is attributed twice per NCCL line read; this halves the cost.
_ANY_PREFIX = re.compile("|".join(f"(?P<p{i}>{re.sub(r'[(][?]P<[a-z]+>', '(?:', p.pattern)})"
                                  for i, p in enumerate(_LAUNCHER_PREFIXES)))
# Most lines of a log: NCCL's own prefix, then its message, or torchrun's tag, then a space and a word. For these
# the loop below takes that one prefix and stops (attribute_common says when): read in one match, at half the cost.
_NCCL_LINE = re.compile(r"([\w.-]+):(\d+):\d+ \[(\d+)\] (?=NCCL [^\[])")
_RANK_TAG = re.compile(r"\[rank(\d+)\]:(?= [A-Za-z])")
_FILE_SUFFIXES = (".log", ".txt", ".out", ".err")
_EMBEDDED_RANK = re.compile(r"\[rank(?P<rank>\d+)\]:")
_MESSAGE_RANK = re.compile(r"\[(?:PG (?:ID )?\d+ (?:PG GUID \d+(?:\([^)]*\))? )?(?:\([^)]*\) )?)?Rank (?P<rank>\d+)\]")
_HOST_COLON = re.compile(r"(?P<host>[\w.-]+): Test (?:NCCL )?failure")  # nccl-tests error lines

_FILE_RANK = [
    re.compile(r"(?:^|[^a-z])rank[-_.]?(\d+)", re.IGNORECASE),
    re.compile(r"^(?:worker|proc|process|task|node|gpu)[-_.]?(\d+)", re.IGNORECASE),
    re.compile(r"[._-](\d{1,5})\.(?:log|txt|out|err|stdout|stderr)(?:\.(?:gz|bz2|xz|zst))?$"),
]
_LOG_DIR_RANK = re.compile(r"attempt_\d+[/\\](\d+)[/\\](?:stdout|stderr)\.log")


@dataclass
class LineInfo:
    message: str
    rank: int | None = None
    host: str | None = None
    pid: int | None = None
    dev: int | None = None
    ts: float | None = None
    ts_kind: str | None = None  # "iso" or "glog": only same kinds compare


def attribute(text: str) -> LineInfo:
    """Peel the known prefixes off a line and say who wrote it."""
    common = attribute_common(text)
    if common is not None:
        info, rest = common
    else:
        info, rest = LineInfo(message=text), text.lstrip(" \t")
        for _ in range(6):  # prefixes nest a few deep at most
            which = _ANY_PREFIX.match(rest)
            if which is None:
                break
            m = _LAUNCHER_PREFIXES[int(which.lastgroup[1:])].match(rest)  # type: ignore[index]
            _absorb(info, m.groupdict())  # type: ignore[union-attr]
            rest = rest[m.end():]  # type: ignore[union-attr]
    return _from_message(text, info, rest)


def attribute_common(text: str) -> tuple[LineInfo, str] | None:
    """`host:pid:tid [dev] NCCL ...` or `[rankN]: word...` as the prefix loop reads it (who; the rest of the line),
    or None where the loop might read it otherwise (test_common_prefixes_are_read_as_the_loop_reads_them).

    NCCL's: no earlier prefix matches at its start, as they begin with a character a host name cannot (`|`, `[`,
    `(`, a space), with a word and a space, or with digits (so a host starting with one is left to the loop), or,
    for grep's file name, end in `.log:` and the like (so are such hosts). torchrun's: the earlier ones need `[`
    then a digit or `rank=`. After either, at `NCCL ` followed by anything but `[`, or at a space and a letter, no
    prefix matches."""
    m = _NCCL_LINE.match(text)
    if m is not None:
        host = m.group(1)
        if host[0].isdigit() or host.endswith(_FILE_SUFFIXES):
            return None
        return LineInfo(message=text, host=sys.intern(host), pid=int(m.group(2)), dev=int(m.group(3))), text[m.end():]
    m = _RANK_TAG.match(text)
    if m is not None:
        return LineInfo(message=text, rank=int(m.group(1))), text[m.end():]
    return None


def _from_message(text: str, info: LineInfo, rest: str) -> LineInfo:
    """The rank PyTorch puts in the message (or a tag the prefixes did not take), and nccl-tests' host."""
    if info.rank is None:  # torchrun's tag behind a prefix we do not know
        m = _EMBEDDED_RANK.search(text, 0, 100)
        if m:
            info.rank = int(m.group("rank"))
    m = _MESSAGE_RANK.search(rest, 0, 240)
    if m:
        if info.rank is None:  # PyTorch's own prefix: the rank in its process group (global in the default one)
            info.rank = int(m.group("rank"))
        if m.start() == 0:
            rest = rest[m.end():].lstrip()
    if info.host is None:
        m = _HOST_COLON.match(rest)
        if m:
            info.host = m.group("host")
    info.message = rest
    return info


def _absorb(info: LineInfo, fields: dict[str, str | None]) -> None:
    if fields.get("file") and info.rank is None:  # grep's file name prefix: a per-rank file announces its rank
        info.rank = rank_from_path(fields["file"])  # type: ignore[arg-type]
    if fields.get("rank") is not None and info.rank is None:
        info.rank = int(fields["rank"])  # type: ignore[arg-type]
    if fields.get("host") and info.host is None:
        info.host = sys.intern(fields["host"])  # one string per host, not one per line kept
    if fields.get("pid") and info.pid is None:
        info.pid = int(fields["pid"])  # type: ignore[arg-type]
    if fields.get("dev") is not None and info.dev is None:
        info.dev = int(fields["dev"])  # type: ignore[arg-type]
    if fields.get("iso") and info.ts is None:
        info.ts, info.ts_kind = _iso_seconds(fields["iso"]), "iso"  # type: ignore[arg-type]
    elif fields.get("hms") and info.ts is None:
        info.ts, info.ts_kind = _glog_seconds(fields.get("mmdd"), fields["hms"]), "glog"  # type: ignore[arg-type]


def _iso_seconds(text: str) -> float | None:
    try:
        return datetime.fromisoformat(text.replace(",", ".").replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _glog_seconds(mmdd: str | None, hms: str) -> float | None:
    try:
        h, m, s = hms.split(":")
        seconds = int(h) * 3600 + int(m) * 60 + float(s)
    except ValueError:
        return None
    if mmdd:
        seconds += (int(mmdd[:-2]) * 31 + int(mmdd[-2:])) * 86400
    return seconds


def rank_from_path(path: str) -> int | None:
    """The rank a per-rank file name announces (rank-3.log, worker_3.err, job.3.out, .../attempt_0/3/stdout.log)."""
    m = _LOG_DIR_RANK.search(path)
    if m:
        return int(m.group(1))
    name = os.path.basename(path)
    for rx in _FILE_RANK:
        m = rx.search(name)
        if m:
            return int(m.group(1))
    return None
