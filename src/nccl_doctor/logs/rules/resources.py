"""Clues about the resources a job's processes share on a host, as the log shows them."""

from __future__ import annotations

import re
from collections.abc import Iterator

from ...model import Severity
from ..evidence import Clue, LogView, hosts_in
from . import rule

SMALL_SHM = 512 << 20  # NCCL's shared-memory segments for a few local GPUs take more than this on a busy job
UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
SIZE = re.compile(r"(?P<number>\d+(?:\.\d+)?)(?P<unit>[KMG])")


def shm_bytes(caps: dict[str, str]) -> int | None:
    """The /dev/shm size a `dev-shm-size` line states, in bytes."""
    exact = caps.get("bytes") or caps.get("shm_bytes")
    if exact:
        return int(exact)
    m = SIZE.fullmatch(caps.get("size") or "")
    return round(float(m.group("number")) * UNITS[m.group("unit")]) if m else None


@rule("dev-shm-small", "dev-shm-small-quiet")
def rule_small_shm(view: LogView) -> Iterator[Clue]:
    """/dev/shm is a container's default 64 MB (or not much more): NCCL puts its intra-node buffers there."""
    small = [(size, e) for e in view.hint("shm_size") if (size := shm_bytes(e.caps)) is not None and size <= SMALL_SHM]
    if not small:
        return
    size, first = min(small, key=lambda se: se[0])
    events = tuple(e for _, e in small[:3])
    failed = view.failed or bool(view.failure_lines())
    message = (f"/dev/shm is {size / (1 << 20):.0f} MB here: NCCL keeps its buffers between GPUs of one host in "
               "shared memory, and a container's default 64 MB runs out as soon as a few GPUs talk")
    if failed:
        yield Clue("dev-shm-small", message, events=events, hosts=hosts_in(events))
    else:
        yield Clue("dev-shm-small-quiet", message + " (nothing has failed in this log yet)", events=events,
                   hosts=hosts_in(events), severity=Severity.WARNING)
