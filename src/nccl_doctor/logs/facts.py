"""The facts part of a `logs` report: inputs, per-rank last state, per-host facts, unrecognised lines."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from ..model import Finding
from . import resemblance
from .evidence import LogView
from .records import Collection, Event, Proc

MAX_ROWS = 512
MAX_UNRECOGNISED = 20
UNSURE = 0.5  # below this confidence the report also lists the lines no signature explained


def _resembles(col: Collection) -> list[dict[str, Any]]:
    """With nothing recognised: the categories whose labelled failures the words are most like, should the job
    have failed after all (the log itself tells no failure, so they are no finding)."""
    ranked = resemblance.table().ranked(LogView(col).words())[:resemblance.DIFFERENTIAL]
    return [{"category": r.category, "similarity": round(r.similarity, 2), "words": list(r.deciding)} for r in ranked]


def build_facts(col: Collection, findings: list[Finding]) -> dict[str, Any]:
    first_errors = _first_errors(col)
    facts: dict[str, Any] = {
        "inputs": {
            "read": col.sources_read,
            "problems": col.problems,
            "lines": col.lines,
            "bytes": col.bytes,
            "engine": col.engine,
        },
        "ranks": [_row(p, first_errors.get(id(p)), col) for p in col.procs[:MAX_ROWS]
                  if _worth_a_row(p, first_errors.get(id(p))) or (not findings and p.last_line)],
        "hosts": _hosts(col),
    }
    if not findings or findings[0].confidence < UNSURE:  # unsure: show what else was seen
        facts["unrecognized"] = [_ev(e) for e in col.hints.get("error_line", [])[:MAX_UNRECOGNISED]]
    if not findings:
        facts["unrecognized"] += [_ev(e) for e in col.events[:MAX_UNRECOGNISED]]
        facts["resembles"] = _resembles(col)
    return facts


def _first_errors(col: Collection) -> dict[int, Event]:
    out: dict[int, Event] = {}
    for e in col.events:
        proc = col.proc_of(e)
        if proc is None:
            continue
        best = out.get(id(proc))
        if best is None or _before(e, best):
            out[id(proc)] = e
    return out


def _before(a: Event, b: Event) -> bool:
    if a.ts is not None and b.ts is not None and a.ts_kind == b.ts_kind:
        return a.ts < b.ts
    return a.order < b.order


def _worth_a_row(proc: Proc, first_error: Event | None) -> bool:
    return bool(proc.ranks or proc.hosts or first_error or proc.fr or proc.init_phases)


def _row(proc: Proc, first_error: Event | None, col: Collection) -> dict[str, Any]:
    version = proc.fact("nccl_version")
    network = proc.fact("network")
    timeout = _timeout_of(proc, col)
    return {
        "rank": sorted(proc.ranks)[0] if len(proc.ranks) == 1 else None,
        "ranks": sorted(proc.ranks),
        "label": proc.label(),
        "host": ",".join(sorted(proc.hosts)) or None,
        "pid": sorted(proc.pids)[0] if proc.pids else None,
        "nccl_version": version.caps.get("version") if version else None,
        "network": network.caps.get("net") if network else None,
        "transports": sorted(proc.transports),
        "state": _state(proc, timeout, first_error),
        "last_collective": _last_collective(proc, timeout),
        "seq": int(timeout.caps["seq"]) if timeout is not None and timeout.caps.get("seq") else _fr_seq(proc),
        "first_error": _ev(first_error) if first_error else None,
        "last_line": {"source": proc.last_line[0], "line": proc.last_line[1], "text": proc.last_line[2][:300]}
        if proc.last_line else None,
    }


def _timeout_of(proc: Proc, col: Collection) -> Event | None:
    for e in col.events:
        if e.sig.role == "timeout" and e.caps.get("op") and col.proc_of(e) is proc:
            return e
    return None


def _state(proc: Proc, timeout: Event | None, first_error: Event | None) -> str:
    if timeout is not None:
        return "timed out"
    ends = proc.facts.get("comm_end", [])
    if ends:
        return "communicator " + ends[-1].caps.get("phase", "").lower() + "ed"
    if first_error is not None and first_error.sig.role in ("root", "generic"):
        return "failed"
    if proc.fr is not None:
        return "collective pending (flight recorder)" if proc.fr.first_pending else "idle (flight recorder)"
    phases = [ph for ph in proc.init_phases.values()]
    if phases and any("START" in ph and "COMPLETE" not in ph for ph in phases):
        return "stuck in NCCL init"
    if first_error is not None:
        return "error"
    if phases:
        return "NCCL init complete"
    return "-"


def _last_collective(proc: Proc, timeout: Event | None) -> str | None:
    if timeout is not None:
        seq = timeout.caps.get("seq")
        return timeout.caps.get("op", "?") + (f" #{seq}" if seq else "")
    if proc.fr is not None and proc.fr.last:
        pending = proc.fr.first_pending or proc.fr.last
        return "; ".join(c.describe() for c in list(pending.values())[:2])
    if proc.colls:
        opcount, op, count, _comm, _e = proc.colls[-1]
        return f"{op} opCount {opcount:x} count {count}"
    return None


def _fr_seq(proc: Proc) -> int | None:
    if proc.fr is None or not proc.fr.last:
        return None
    return max(c.seq for c in proc.fr.last.values())


def _hosts(col: Collection) -> dict[str, dict[str, list[str]]]:
    out: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for proc in col.procs:
        for host in proc.hosts or {"?"}:
            for fact, cap in (("nccl_version", "version"), ("bootstrap", "iface"), ("network", "net")):
                for e in proc.facts.get(fact, []):
                    if cap in e.caps:
                        out[host][fact].add(e.caps[cap])
            out[host]["transports"] |= proc.transports
    return {h: {k: sorted(v) for k, v in facts.items() if v} for h, facts in sorted(out.items())
            if any(facts.values())}


def _ev(e: Event) -> dict[str, Any]:
    return {"source": e.source, "line": e.line, "text": e.text[:300], "message": (e.message or e.text)[:300]}
