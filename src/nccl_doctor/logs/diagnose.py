"""Correlation: matched events and per-process facts -> ranked findings.

What grep cannot do happens here: errors are grouped by cause and ranked so that the rank that failed
first, with the most specific message, comes first while the echoes on its peers (closed connections,
remote errors, the abort cascade) fold under it; collective timeouts are compared across ranks (SeqNum,
last completed work, flight-recorder dumps, desync reports, NCCL COLL calls) to name the ranks that lag;
facts from different hosts are compared (NCCL versions, bootstrap interfaces, IB versus sockets).
"""

from __future__ import annotations

import functools
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ..model import Evidence, Finding, Severity
from .collect import Collection, Event, Proc

MAX_EVIDENCE = 8
VIRTUAL_IFACES = re.compile(r"^(?:lo|docker\d*|virbr\d*|veth\w*|br-\w+|cni\d*|flannel\.\d+|tailscale\d*|tun\d+)$")
# NCCL fixed the fatal stray bootstrap connection in 2.27.3.
STRAY_CONNECTION_FIXED = (2, 27, 3)


@dataclass
class Candidate:
    """A cause the evidence points at, before ranking."""

    cause: str
    weight: float
    confidence: float
    role: str  # root, generic, echo, timeout, rule
    message: str = ""
    events: list[Event] = field(default_factory=list)
    extra_evidence: list[Evidence] = field(default_factory=list)
    ranks: set[int] = field(default_factory=set)
    hosts: set[str] = field(default_factory=set)
    fix: list[str] = field(default_factory=list)
    severity: Severity = Severity.ERROR
    explains: set[str] = field(default_factory=set)  # causes it accounts for (folded under it)

    def first(self) -> Event | None:
        return min(self.events, key=lambda e: e.order) if self.events else None

    def evidence(self) -> list[Evidence]:
        extra = list({(e.source, e.line, e.text): e for e in self.extra_evidence}.values())
        taken = {(e.source, e.line) for e in extra}
        chosen = _spread([e for e in self.events if (e.source, e.line) not in taken], MAX_EVIDENCE - len(extra))
        return extra + [Evidence(e.source, e.text, e.line) for e in chosen]


def _spread(events: list[Event], limit: int) -> list[Event]:
    """Evidence lines in order, one per rank/host first so that several ranks show."""
    unique = {(e.source, e.line): e for e in sorted(events, key=lambda e: e.order, reverse=True)}
    ordered = sorted(unique.values(), key=lambda e: e.order)
    picked: list[Event] = []
    seen: set[object] = set()
    for e in ordered:
        who = (e.rank, e.host, e.source)
        if who not in seen:
            seen.add(who)
            picked.append(e)
    for e in ordered:
        if len(picked) >= limit:
            break
        if e not in picked:
            picked.append(e)
    return sorted(picked[:max(0, limit)], key=lambda e: e.order)


class Context:
    """The collection plus handy views of it for the rules."""

    def __init__(self, col: Collection) -> None:
        self.col = col
        self.events = col.events
        self.by_cause: dict[str, list[Event]] = defaultdict(list)
        for e in col.events:
            if e.cause:
                self.by_cause[e.cause].append(e)
        self.has_error = any(e.sig.role in ("root", "generic", "timeout") for e in col.events)

    def proc(self, event: Event) -> Proc | None:
        return self.col.proc_of(event)

    def events_of(self, *sig_ids: str) -> list[Event]:
        return [e for e in self.events if e.sig.id in sig_ids]

    def hint(self, name: str) -> list[Event]:
        return self.col.hints.get(name, [])

    def facts(self, name: str) -> list[tuple[Proc, Event]]:
        return [(p, e) for p in self.col.procs for e in p.facts.get(name, [])]

    def host_of(self, proc: Proc, event: Event | None = None) -> str:
        if event is not None and event.host:
            return event.host
        if proc.hosts:
            return ",".join(sorted(proc.hosts))
        return proc.label()

    def multi_host(self) -> bool:
        return len(self.col.hosts_seen()) > 1

    def world_size(self) -> int | None:
        sizes = [int(e.caps.get("n") or e.caps.get("ws") or 0) for e in self.col.global_facts.get("world_size", [])]
        sizes += [n for p in self.col.procs for n in p.comm_sizes.values()]
        sizes = [s for s in sizes if s > 0]
        return max(sizes) if sizes else None


# ---------------------------------------------------------------------------- candidates from signatures

def signature_candidates(ctx: Context) -> dict[str, Candidate]:
    cands: dict[str, Candidate] = {}
    for cause, events in ctx.by_cause.items():
        best = max(events, key=lambda e: (e.sig.weight, e.sig.confidence))
        roles = {e.sig.role for e in events}
        role = next(r for r in ("root", "timeout", "generic", "echo") if r in roles)
        cands[cause] = Candidate(
            cause=cause, weight=best.sig.weight, confidence=best.sig.confidence, role=role,
            message=_describe(events), events=list(events),
            ranks={e.rank for e in events if e.rank is not None},
            hosts={e.host for e in events if e.host},
        )
    return cands


def _describe(events: list[Event]) -> str:
    first = min(events, key=lambda e: (-e.sig.weight, e.order))  # the most specific line, earliest
    who = _who(events)
    text = first.message or first.text
    text = text if len(text) <= 160 else text[:157] + "..."
    more = f" ({len(events)} lines)" if len(events) > 1 else ""
    return f"{who}{text}{more}"


def _who(events: Iterable[Event]) -> str:
    events = list(events)
    ranks = sorted({e.rank for e in events if e.rank is not None})
    hosts = sorted({e.host for e in events if e.host})
    parts = []
    if ranks:
        parts.append(("rank " if len(ranks) == 1 else "ranks ") + _compact(ranks))
    if hosts:
        parts.append(("on " if parts else "host ") + ",".join(hosts[:4]) + (" ..." if len(hosts) > 4 else ""))
    return (" ".join(parts) + ": ") if parts else ""


def _compact(values: list[int]) -> str:
    if len(values) > 2 and values[-1] - values[0] == len(values) - 1:
        return f"{values[0]}-{values[-1]}"
    if len(values) > 8:
        return ",".join(map(str, values[:8])) + ",..."
    return ",".join(map(str, values))


# ---------------------------------------------------------------------------- cross-host rules

def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text)[:3])


def rule_versions(ctx: Context, cands: dict[str, Candidate]) -> None:
    """Different NCCL versions across hosts/ranks; NCCL 1.x."""
    seen: dict[str, list[tuple[Proc, Event]]] = defaultdict(list)
    for proc, e in ctx.facts("nccl_version"):
        seen[e.caps["version"]].append((proc, e))
    if len(seen) > 1:
        evidence = [Evidence(e.source, e.text, e.line) for group in seen.values() for _, e in group[:2]]
        per_version = "; ".join(
            f"{v} on {_where([p for p, _ in group], [e for _, e in group])}" for v, group in sorted(seen.items()))
        cands["nccl-version-mismatch"] = Candidate(
            cause="nccl-version-mismatch", weight=96, confidence=0.95 if ctx.has_error else 0.8, role="rule",
            message=f"different NCCL versions in one job: {per_version}",
            extra_evidence=evidence[:MAX_EVIDENCE], events=ctx.by_cause.get("nccl-version-mismatch", []),
            hosts={h for group in seen.values() for p, e in group for h in ([e.host] if e.host else p.hosts)},
            severity=Severity.ERROR,
            explains={"nccl-internal-error", "rank-died", "unhandled-cuda-error", "collective-size-mismatch"},
            fix=[f"Install the same NCCL on every host (versions seen: {', '.join(sorted(seen))})."],
        )
        return
    oldest = min(seen, key=_version_tuple, default=None)
    if oldest and _version_tuple(oldest) < (2,) and ctx.has_error:
        e = seen[oldest][0][1]
        cands["obsolete-nccl"] = Candidate(
            cause="obsolete-nccl", weight=85, confidence=0.75, role="rule",
            message=f"NCCL {oldest} is in use: releases before 2.0 do not support current GPUs, drivers and usage",
            extra_evidence=[Evidence(e.source, e.text, e.line)],
            explains={"unhandled-cuda-error", "nccl-internal-error", "duplicate-gpu", "collective-mismatch"},
        )


def _where(procs: list[Proc], events: list[Event]) -> str:
    hosts = sorted({e.host for e in events if e.host} | {h for p in procs for h in p.hosts})
    if hosts:
        return ",".join(hosts[:4]) + (" ..." if len(hosts) > 4 else "")
    ranks = sorted({r for p in procs for r in p.ranks})
    return ("ranks " + _compact(ranks)) if ranks else ",".join(sorted({e.source for e in events}))


def rule_address_family(ctx: Context, cands: dict[str, Candidate]) -> None:
    """'family N is neither AF_INET': a bad NCCL_SOCKET_IFNAME when one is set, else a version mismatch."""
    family = ctx.events_of("family-not-inet")
    if not family or cands.get("nccl-version-mismatch", Candidate("", 0, 0, "")).role == "rule":
        return
    settings = [(p, e) for p, e in ctx.facts("socket_ifname")]
    env_values = {p.env.get("NCCL_SOCKET_IFNAME") for p in ctx.col.procs if p.env.get("NCCL_SOCKET_IFNAME")}
    values = sorted({e.caps["value"] for _, e in settings} | env_values)
    if values:
        cands.pop("nccl-version-mismatch", None)
        cands["socket-ifname-no-match"] = Candidate(
            cause="socket-ifname-no-match", weight=88, confidence=0.8, role="rule",
            message=(f"NCCL_SOCKET_IFNAME={','.join(values)} is set and NCCL then connected to an uninitialised "
                     f"address ('{family[0].caps.get('family', '?')}' is no address family): the named "
                     "interface does not exist on some host"),
            events=family + ctx.by_cause.get("socket-ifname-no-match", []),
            extra_evidence=[Evidence(e.source, e.text, e.line) for _, e in settings[:2]],
            ranks={e.rank for e in family if e.rank is not None}, hosts={e.host for e in family if e.host},
            fix=[f"Check that an interface matching NCCL_SOCKET_IFNAME={','.join(values)} exists on every host "
                 "(`ip -br addr`); correct or unset it."],
            explains={"nccl-internal-error", "rank-died"},
        )
    elif "nccl-version-mismatch" in cands:
        cand = cands["nccl-version-mismatch"]
        cand.message = (f"{cand.message} - a garbage peer address, typical of ranks running different NCCL builds "
                        "(or of an NCCL_SOCKET_IFNAME that matches nothing)")
        cand.explains |= {"nccl-internal-error", "rank-died"}


def rule_interfaces(ctx: Context, cands: dict[str, Candidate]) -> None:
    """Bootstrap interfaces: names that differ between hosts; loopback/docker on a multi-host job."""
    by_host: dict[str, set[str]] = defaultdict(set)
    evidence: dict[str, Event] = {}
    for proc, e in ctx.facts("bootstrap"):
        host = ctx.host_of(proc, e)
        by_host[host].add(e.caps["iface"])
        evidence.setdefault(f"{host}/{e.caps['iface']}", e)
    names = {n for v in by_host.values() for n in v}
    bootstrap_failed = any(c in cands for c in ("nccl-internal-error", "rank-died", "master-unreachable",
                                                "socket-ifname-no-match", "no-usable-interface"))
    if len(by_host) > 1 and len(names) > 1 and all(len(v) == 1 for v in by_host.values()):
        listing = "; ".join(f"{h}: {','.join(sorted(v))}" for h, v in sorted(by_host.items()))
        cands.setdefault("ifname-differs-between-hosts", Candidate(
            cause="ifname-differs-between-hosts", weight=70 if bootstrap_failed else 30,
            confidence=0.7 if bootstrap_failed else 0.5, role="rule",
            severity=Severity.ERROR if bootstrap_failed else Severity.WARNING,
            message=f"hosts bootstrap over differently named interfaces ({listing})",
            extra_evidence=[Evidence(e.source, e.text, e.line) for e in list(evidence.values())[:6]],
            hosts=set(by_host),
            fix=[f"Make NCCL_SOCKET_IFNAME match on every host, e.g. `NCCL_SOCKET_IFNAME={','.join(sorted(names))}`."],
            explains={"nccl-internal-error"},
        ))
    if ctx.multi_host():
        bad = {k: e for k, e in evidence.items() if VIRTUAL_IFACES.match(e.caps["iface"])}
        if bad:
            ifaces = sorted({e.caps["iface"] for e in bad.values()})
            cands.setdefault("wrong-interface-selected", Candidate(
                cause="wrong-interface-selected", weight=72 if ctx.has_error else 30,
                confidence=0.7, role="rule", severity=Severity.ERROR if ctx.has_error else Severity.WARNING,
                message=f"NCCL bootstraps over {', '.join(ifaces)} on a multi-host job; other hosts cannot reach it",
                extra_evidence=[Evidence(e.source, e.text, e.line) for e in list(bad.values())[:4]],
                hosts={k.split("/")[0] for k in bad},
                explains={"rank-died", "master-unreachable", "nccl-internal-error"},
            ))


def rule_network(ctx: Context, cands: dict[str, Candidate]) -> None:
    """IB on some hosts and sockets on others; IB expected but not used; RoCE hints."""
    nets: dict[str, set[str]] = defaultdict(set)
    ev: dict[str, Event] = {}
    for proc, e in ctx.facts("network"):
        host = ctx.host_of(proc, e)
        nets[host].add(e.caps["net"])
        ev.setdefault(host, e)
    socket_hosts = sorted(h for h, n in nets.items() if "Socket" in n)
    other_hosts = sorted(h for h, n in nets.items() if n - {"Socket"})
    ib_hints = ctx.facts("ib_devices")
    ib_absent = ctx.facts("ib_absent")
    expected = [p for p in ctx.col.procs if p.env.get("NCCL_IB_HCA") or p.env.get("NCCL_IB_DISABLE") == "0"]
    if socket_hosts and other_hosts:
        cands.setdefault("ib-not-used", Candidate(
            cause="ib-not-used", weight=74, confidence=0.8, role="rule",
            message=(f"{', '.join(other_hosts[:4])} use {', '.join(sorted(set().union(*(nets[h] for h in other_hosts)) - {'Socket'}))} "
                     f"but {', '.join(socket_hosts[:4])} fell back to TCP sockets"),
            extra_evidence=[Evidence(ev[h].source, ev[h].text, ev[h].line) for h in (socket_hosts[:3] + other_hosts[:2])],
            events=[e for _, e in ib_absent][:3], hosts=set(socket_hosts),
            fix=[f"On {', '.join(socket_hosts[:4])}: check `ibv_devinfo`, that /dev/infiniband is mapped into the "
                 "container and that NCCL_IB_DISABLE / NCCL_IB_HCA are not set differently there."],
        ))
    elif socket_hosts and (expected or (ib_absent and len(nets) > 1)):
        hca = {p.env.get("NCCL_IB_HCA") for p in expected if p.env.get("NCCL_IB_HCA")}
        cause = "ib-hca-no-match" if hca and ctx.facts("ib_absent") else "ib-not-used"
        cands.setdefault(cause, Candidate(
            cause=cause, weight=40, confidence=0.55, role="rule", severity=Severity.WARNING,
            message=("NCCL_IB_HCA=" + ",".join(sorted(hca)) + " is set but NCCL uses TCP sockets" if cause == "ib-hca-no-match"
                     else "InfiniBand was expected or probed but NCCL uses TCP sockets between hosts"),
            extra_evidence=[Evidence(ev[h].source, ev[h].text, ev[h].line) for h in socket_hosts[:3]],
            events=[e for _, e in ib_absent][:3], hosts=set(socket_hosts),
        ))
    retry = cands.get("ib-retry-exceeded")
    roce = [e for _, e in ib_hints if "/RoCE" in e.caps.get("devices", "")]
    if retry is not None and roce:
        retry.fix.append("On RoCE, pick a routable RoCE v2 GID: `show_gids` lists them; set e.g. `NCCL_IB_GID_INDEX=3` on every host.")
        retry.extra_evidence.append(Evidence(roce[0].source, roce[0].text, roce[0].line))
        retry.message += " (RoCE fabric)"


# ---------------------------------------------------------------------------- timeouts

TIMEOUT_SIGS = ("watchdog-timeout", "blocking-wait-timeout", "gloo-timeout", "nonblocking-init-timeout")


def rule_timeouts(ctx: Context, cands: dict[str, Candidate]) -> None:
    """Whose fault is a collective timeout: lagging ranks, mismatched collectives, rank-0-only work."""
    timeouts = ctx.events_of(*TIMEOUT_SIGS)
    store_waits = ctx.events_of("store-wait-timeout")
    if not timeouts and not store_waits:
        return
    cands.pop("collective-timeout", None)
    cands.pop("store-wait-timeout", None)
    evidence_events = timeouts + store_waits
    timed_out = {e.rank for e in timeouts if e.rank is not None}
    seqs = {e.rank: int(e.caps["seq"]) for e in timeouts if e.rank is not None and e.caps.get("seq")}
    ops = {e.rank: e.caps.get("op", "?") for e in timeouts if e.rank is not None}
    numel = {e.rank: int(e.caps["numel_in"]) for e in timeouts if e.rank is not None and e.caps.get("numel_in")}
    hints = {name: ctx.hint(name) for name in ("progress_bar", "preprocessing", "checkpoint", "evaluation",
                                                "cuda_graphs", "eager")}
    explains = {"collective-timeout", "rank-died", "store-wait-timeout", "rank-hang", "nccl-internal-error"}
    summary = _timeout_summary(timeouts, store_waits)

    mismatch = _mismatched_at_same_seq(timeouts)
    if mismatch:
        culprits, text = mismatch
        cands["collective-mismatch"] = Candidate(
            cause="collective-mismatch", weight=75, confidence=0.8, role="rule", message=text,
            events=evidence_events, ranks=culprits, hosts=_hosts_of(ctx, culprits), explains=explains,
            fix=[f"Compare what ranks {_compact(sorted(culprits))} run at that step with the others "
                 "(TORCH_DISTRIBUTED_DEBUG=DETAIL reports the mismatching call)."])
        return

    lagging, lag_text = _lagging_ranks(ctx, timeouts, seqs)
    rank0_signals = _rank0_only_signals(hints, timeouts, store_waits, seqs, numel, timed_out, lagging)
    if rank0_signals:
        cause, reasons, ev_hints = rank0_signals
        confidence = min(0.9, 0.5 + 0.12 * len(reasons))
        waited = _compact(sorted(timed_out)) if timed_out else "the others"
        cands[cause] = Candidate(
            cause=cause, weight=66, confidence=confidence, role="rule",
            message=(f"{summary}; ranks {waited} waited while {'rank ' + _compact(sorted(lagging)) if lagging else 'rank 0'} "
                     f"was busy elsewhere: {'; '.join(reasons)}"),
            events=ev_hints[:3] + evidence_events, ranks=lagging or ({0} if 0 not in timed_out else set()),
            hosts=_hosts_of(ctx, lagging), explains=explains,
            fix=_rank0_fix(cause, timeouts),
        )
        return

    if hints["cuda_graphs"] and not hints["eager"] and not lagging:
        cands["nccl-cudagraph-mixing"] = Candidate(
            cause="nccl-cudagraph-mixing", weight=62, confidence=0.55, role="rule",
            message=f"{summary}, in a job that captures NCCL collectives in CUDA graphs (no rank lags behind)",
            events=hints["cuda_graphs"][:2] + evidence_events, ranks=timed_out, hosts=_hosts_of(ctx, timed_out),
            explains=explains)
        return

    if lagging:
        cause = "straggler-rank" if hints["evaluation"] else "rank-hang"
        cands[cause] = Candidate(
            cause=cause, weight=64, confidence=0.75, role="rule",
            message=f"{summary}; {lag_text}",
            events=evidence_events, ranks=lagging, hosts=_hosts_of(ctx, lagging), explains=explains,
            fix=[f"Look at what rank(s) {_compact(sorted(lagging))} were doing when the others timed out "
                 "(their log just before the timeout, `py-spy dump`)."])
        return

    if hints["evaluation"] and 0 in timed_out:
        cands["straggler-rank"] = Candidate(
            cause="straggler-rank", weight=60, confidence=0.6, role="rule",
            message=f"{summary} during evaluation/generation: some ranks took longer than the timeout",
            events=hints["evaluation"][:2] + evidence_events, ranks=timed_out, explains=explains)
        return

    never_completed = [e for e in ctx.col.procs for s in e.facts.get("pg_status", [])
                       if int(s.caps.get("completed") or s.caps.get("completed_old") or 0) < 0]
    detail = (" - nothing ever completed on this process group, which points at setup/connectivity "
              "rather than a slow rank") if never_completed else ""
    cands["collective-timeout"] = Candidate(
        cause="collective-timeout", weight=48, confidence=0.5, role="timeout",
        message=f"{summary}{detail}", events=evidence_events, ranks=timed_out,
        hosts=_hosts_of(ctx, timed_out), explains={"rank-died"},
        fix=_timeout_fix(timeouts, ctx))


def _timeout_summary(timeouts: list[Event], store_waits: list[Event]) -> str:
    if not timeouts:
        e = store_waits[0]
        return f"{_who(store_waits)}store wait timed out ({e.message[:120]})"
    by_key = Counter((e.caps.get("op", "?"), e.caps.get("seq"), e.caps.get("numel_in")) for e in timeouts)
    parts = []
    for (op, seq, numel), n in by_key.most_common(3):
        desc = op + (f" SeqNum={seq}" if seq else "") + (f" NumelIn={numel}" if numel else "")
        parts.append(desc)
    minutes = max(int(e.caps.get("timeout_ms", 0) or 0) for e in timeouts) / 60000
    when = f" after the {minutes:g} min timeout" if minutes else ""
    return f"{_who(timeouts)}collective timed out{when} ({'; '.join(parts)})"


def _mismatched_at_same_seq(timeouts: list[Event]) -> tuple[set[int], str] | None:
    by_seq: dict[str, dict[str, set[int]]] = defaultdict(lambda: defaultdict(set))
    for e in timeouts:
        if e.caps.get("seq") and e.rank is not None:
            by_seq[e.caps["seq"]][e.caps.get("op", "?")].add(e.rank)
    for seq, ops in by_seq.items():
        if len(ops) > 1:
            majority = max(ops, key=lambda op: len(ops[op]))
            culprits = {r for op, ranks in ops.items() if op != majority for r in ranks}
            listing = ", ".join(f"{op} on ranks {_compact(sorted(r))}" for op, r in sorted(ops.items()))
            return culprits, f"ranks timed out in different collectives at the same SeqNum {seq}: {listing}"
    return None


def _lagging_ranks(ctx: Context, timeouts: list[Event], seqs: dict[int, int]) -> tuple[set[int], str]:
    """Ranks that never reached the collective the others timed out in, with the reason we think so."""
    desync = ctx.col.global_facts.get("desync", [])
    named = set()
    for e in desync:
        named |= {int(x) for x in re.findall(r"\d+", e.caps.get("ranks", ""))}
    if named:
        return named, f"PyTorch's desync report names rank(s) {_compact(sorted(named))} as lagging"
    fr_lag = _flight_recorder_lag(ctx)
    if fr_lag:
        return fr_lag
    ops = {e.caps.get("op") for e in timeouts if e.caps.get("seq")}
    if len(set(seqs.values())) > 1 and len(ops) == 1 and max(seqs.values()) - min(seqs.values()) <= 8:
        # Within one process group the ranks that time out sit at (nearly) the same SeqNum; far-apart
        # numbers or different collectives come from different groups and do not compare.
        top = max(seqs.values())
        behind = {r for r, s in seqs.items() if s < top}
        if len(behind) < len(seqs):
            listing = ", ".join(f"rank {r} at {s}" for r, s in sorted(seqs.items()) if r in behind)
            return behind, f"rank(s) {_compact(sorted(behind))} are behind ({listing}; the others reached SeqNum {top})"
    status = {}
    for proc in ctx.col.procs:
        for e in proc.facts.get("pg_status", []):
            enq = e.caps.get("enqueued") or e.caps.get("enqueued_old")
            if enq is not None and proc.ranks:
                status[min(proc.ranks)] = int(enq)
    if seqs and status:
        target = max(seqs.values())
        behind = {r for r, enq in status.items() if enq < target}
        if behind:
            return behind, f"rank(s) {_compact(sorted(behind))} never enqueued collective #{target}"
    timed_out = {e.rank for e in timeouts if e.rank is not None}
    silent = {r for p in ctx.col.procs for r in p.ranks if p.last_line and r not in timed_out}
    if timed_out and silent and _per_rank_logs(ctx):
        return silent, (f"rank(s) {_compact(sorted(silent))} left output but never reported the timeout: they "
                        "were not inside the collective")
    colls = _coll_lag(ctx)
    if colls:
        return colls
    return set(), ""


def _per_rank_logs(ctx: Context) -> bool:
    ranked = [p for p in ctx.col.procs if p.ranks]
    return len(ranked) > 1 and all(len(p.sources) == 1 for p in ranked) and \
        len({s for p in ranked for s in p.sources}) == len(ranked)


def _flight_recorder_lag(ctx: Context) -> tuple[set[int], str] | None:
    dumps = {min(p.ranks): p.fr for p in ctx.col.procs if p.fr is not None and p.ranks}
    if len(dumps) < 2:
        return None
    last_seq: dict[int, int] = {}
    for rank, dump in dumps.items():
        seqs = [c.seq for c in dump.last.values() if not c.p2p]
        last_seq[rank] = max(seqs) if seqs else -1
    top = max(last_seq.values())
    behind = {r for r, s in last_seq.items() if s < top}
    if behind and len(behind) < len(last_seq):
        listing = ", ".join(f"rank {r} last #{last_seq[r]}" for r in sorted(behind))
        return behind, f"flight recorder: rank(s) {_compact(sorted(behind))} lag behind ({listing}; others #{top})"
    return None


def _coll_lag(ctx: Context) -> tuple[set[int], str] | None:
    last = {}
    for proc in ctx.col.procs:
        if proc.colls and proc.ranks:
            last[min(proc.ranks)] = max(c[0] for c in proc.colls)
    if len(last) < 2 or len(set(last.values())) < 2:
        return None
    top = max(last.values())
    behind = {r for r, v in last.items() if v < top}
    return behind, f"NCCL COLL calls: rank(s) {_compact(sorted(behind))} stopped at an earlier opCount than the others"


def _rank0_only_signals(hints, timeouts, store_waits, seqs, numel, timed_out, lagging):
    """Signs that a long piece of work ran on some ranks (usually rank 0) while the others waited."""
    if 0 in timed_out and not (lagging and 0 not in lagging):
        return None  # rank 0 itself waited: the work was not on rank 0 alone
    reasons: list[str] = []
    ev: list[Event] = []
    cause = None
    for name, label, target in (("checkpoint", "checkpoint save/load", "checkpoint-io"),
                                ("evaluation", "evaluation", "rank0-evaluation"),
                                ("preprocessing", "data preprocessing", "rank0-preprocessing")):
        if hints.get(name):
            reasons.append(f"{label} in the log ({hints[name][0].message[:80]!r})")
            ev += hints[name][:1]
            cause = cause or target
    if hints.get("progress_bar"):
        reasons.append("a progress bar was running when the timeout hit")
        ev += hints["progress_bar"][-1:]
        cause = cause or "rank0-preprocessing"
    early = [r for r, s in seqs.items() if s <= 3 and numel.get(r, 1) <= 1]
    if early and len(early) == len(seqs):
        reasons.append(f"the timed-out collective is one of the first (SeqNum {min(seqs.values())}) and tiny, "
                       "i.e. a barrier before training")
        cause = cause or "rank0-preprocessing"
    if store_waits and not timeouts:
        reasons.append("a TCPStore wait ran out after the full timeout")
        cause = cause or "store-wait-timeout"
    if not reasons or (len(reasons) == 1 and early and not timed_out):
        return None
    return cause, reasons, ev


def _rank0_fix(cause: str, timeouts: list[Event]) -> list[str]:
    ms = max((int(e.caps.get("timeout_ms") or 0) for e in timeouts), default=0)
    current = f" (now {ms // 60000} min)" if ms else ""
    return [
        "Measure how long that work takes and move it out of the distributed job (run it before launch, or "
        "shard it over all ranks) so no rank waits in a collective meanwhile.",
        f"Or raise the process-group timeout above the measured time{current}: "
        "`init_process_group(..., timeout=timedelta(minutes=N))` (HF Trainer: `--ddp_timeout`; accelerate: "
        "`InitProcessGroupKwargs(timeout=...)`).",
    ]


def _timeout_fix(timeouts: list[Event], ctx: Context) -> list[str]:
    if len({e.rank for e in timeouts if e.rank is not None}) <= 1 and len(ctx.col.procs) <= 1:
        return ["Only one rank's log was given: collect every rank's log and rerun `nccl-doctor logs DIR`."]
    return []


def _hosts_of(ctx: Context, ranks: set[int]) -> set[str]:
    return {h for p in ctx.col.procs if p.ranks & ranks for h in p.hosts}


# ---------------------------------------------------------------------------- COLL calls (NCCL_DEBUG_SUBSYS=COLL)

def rule_coll_calls(ctx: Context, cands: dict[str, Candidate]) -> None:
    """Same opCount, different collective on some processes: the code diverged there."""
    by_count: dict[tuple[int, int], dict[str, list[tuple[Proc, Event]]]] = defaultdict(lambda: defaultdict(list))
    for proc in ctx.col.procs:
        for opcount, op, _count, _comm, event in proc.colls:
            nranks = int(event.caps.get("nranks", 0))
            by_count[(nranks, opcount)][op].append((proc, event))
    for (_nranks, opcount), ops in sorted(by_count.items(), key=lambda kv: kv[0][1]):
        if len(ops) < 2:
            continue
        majority = max(ops, key=lambda op: len({id(p) for p, _ in ops[op]}))
        minority = [(p, e) for op, items in ops.items() if op != majority for p, e in items]
        procs = {id(p): p for p, _ in minority}.values()
        ranks = {r for p in procs for r in p.ranks}
        who = ", ".join(_proc_name(p, e) for p, e in {id(p): (p, e) for p, e in minority}.values())
        listing = "; ".join(f"{op} on {len({id(p) for p, _ in items})} process(es)" for op, items in sorted(ops.items()))
        evidence = [Evidence(e.source, e.text, e.line) for op in sorted(ops) for _, e in ops[op][:2]]
        cands["collective-mismatch"] = Candidate(
            cause="collective-mismatch", weight=82, confidence=0.8, role="rule",
            message=f"at opCount {opcount:x} processes issue different collectives ({listing}): {who} diverged",
            extra_evidence=evidence[:MAX_EVIDENCE], ranks=ranks, hosts={h for p in procs for h in p.hosts},
            explains={"collective-timeout", "rank-hang", "rank-died", "straggler-rank"},
            fix=[f"Make {who} issue the same collective sequence as the others (a rank-dependent branch or a "
                 "different stream/communicator there)."])
        return


def _proc_name(proc: Proc, event: Event) -> str:
    if proc.ranks and proc.rank_inferred:
        return f"{event.host or '?'} pid {event.pid} (GPU {_compact(sorted(proc.devs))}, likely rank {_compact(sorted(proc.ranks))})"
    if proc.ranks:
        return "rank " + _compact(sorted(proc.ranks))
    dev = re.match(r"\S+:\d+:\d+ \[(\d+)\]", event.text)
    host = event.host or (min(proc.hosts) if proc.hosts else "?")
    return f"{host} pid {event.pid}" + (f" (GPU {dev.group(1)})" if dev else "")


# ---------------------------------------------------------------------------- heuristics for thin logs

def rule_echo_only(ctx: Context, cands: dict[str, Candidate]) -> None:
    """Only echoes: a peer died (or, during bootstrap on old NCCL, a stray connection)."""
    strong = [c for c in cands.values() if c.role in ("root", "generic", "timeout", "rule")]
    echo = cands.get("rank-died")
    if strong or echo is None:
        return
    backtrace_files = {e.caps.get("file", "") for e in ctx.hint("nccl_backtrace")}
    in_bootstrap = any("bootstrap" in f for f in backtrace_files)
    closed = [e for e in echo.events if e.sig.id == "connection-closed-by-peer"]
    versions = [_version_tuple(e.caps["version"]) for _, e in ctx.facts("nccl_version")]
    old_enough = not versions or min(versions) < STRAY_CONNECTION_FIXED
    killed = ctx.facts("killed")
    if in_bootstrap and closed and old_enough and not killed and len({e.rank for e in echo.events}) <= 1:
        cands["nccl-bootstrap-stray-connection"] = Candidate(
            cause="nccl-bootstrap-stray-connection", weight=50, confidence=0.5, role="rule",
            message=("bootstrap failed on 'Connection closed by remote peer' and no rank reports an error of its "
                     f"own: {closed[0].message[:120]}"),
            events=echo.events, explains={"rank-died"},
            fix=["If a scanner, health check or another job can reach the bootstrap port, that connection is the "
                 "'peer'; NCCL >= 2.27.3 ignores it."])
        return
    echo.role = "rule"
    echo.weight = 40
    echo.confidence = 0.45
    peers = sorted({e.caps.get("peer") for e in closed if e.caps.get("peer")})
    echo.message = ("only secondary errors are visible (lost connections, remote errors): a peer process exited "
                    "first" + (f"; the closed connection came from {', '.join(peers[:3])}" if peers else "")
                    + ". Its own log holds the root cause.")


def rule_elastic_root(ctx: Context, cands: dict[str, Candidate]) -> None:
    """torchrun's 'Root Cause (first observed failure)' names the rank that died first."""
    for block in ctx.col.elastic_root:
        rank = re.match(r"(\d+)", block.get("rank", ""))
        exitcode = block.get("exitcode", "")
        if not rank:
            continue
        r = int(rank.group(1))
        for cand in cands.values():
            if r in cand.ranks and cand.role in ("root", "rule"):
                cand.confidence = min(0.95, cand.confidence + 0.05)
        if exitcode.startswith("-9") and not any(c.role == "root" for c in cands.values()):
            cands["rank-died"] = Candidate(
                cause="rank-died", weight=60, confidence=0.6, role="rule",
                message=f"rank {r} on {block.get('host', '?')} was killed (exit code -9, SIGKILL): usually the "
                        "host's OOM killer or the scheduler", ranks={r},
                hosts={block["host"]} if block.get("host") else set(),
                extra_evidence=[Evidence(block["source"], f"Root Cause: rank {r} exitcode {exitcode}", block["line"])],
                fix=[f"On {block.get('host', 'that host')}: `dmesg -T | grep -i -E 'killed process|out of memory'`."])


def rule_init_failure_on_some_hosts(ctx: Context, cands: dict[str, Candidate]) -> None:
    """A generic init error on some hosts only, nothing specific: those hosts are set up differently."""
    if any(c.role in ("root", "rule", "timeout") for c in cands.values()):
        return
    generic = [e for e in ctx.events if e.sig.role == "generic" and e.host]
    hosts = ctx.col.hosts_seen()
    failing = {e.host for e in generic}
    if generic and len(hosts) > 1 and failing and failing < hosts:
        others = sorted(hosts - failing)
        cands["ifname-differs-between-hosts"] = Candidate(
            cause="ifname-differs-between-hosts", weight=45, confidence=0.45, role="rule",
            message=(f"NCCL init fails on {', '.join(sorted(failing))} only ({generic[0].message[:100]}) while "
                     f"{', '.join(others[:3])} do not: something differs between the hosts, most often the "
                     "network interface names that NCCL_SOCKET_IFNAME has to match (or the NCCL version)"),
            events=generic, hosts=failing, explains={"nccl-internal-error", "rank-died", "duplicate-gpu"},
            fix=["Compare `ip -br addr` and the NCCL version on the failing and the working hosts; rerun with "
                 "NCCL_DEBUG=INFO to see the `Bootstrap : Using` interface per host."])


def rule_single_host_system_error(ctx: Context, cands: dict[str, Candidate]) -> None:
    """'unhandled system error' on one host with nothing more specific: /dev/shm is the usual culprit."""
    if any(c.role in ("root", "rule", "timeout") for c in cands.values()):
        return
    system = ctx.events_of("system-error")
    if not system or ctx.multi_host():
        return
    cands["shm-too-small"] = Candidate(
        cause="shm-too-small", weight=42, confidence=0.45, role="rule",
        message=("ncclSystemError on a single host without a more specific NCCL WARN: between local GPUs the "
                 "system calls that fail are usually /dev/shm allocations (containers default to 64 MB)"),
        events=system, ranks={e.rank for e in system if e.rank is not None},
        explains={"nccl-internal-error", "rank-died"},
        fix=["Check `df -h /dev/shm` inside the container; rerun with NCCL_DEBUG=WARN to see the failing call."])


def rule_invalid_usage(ctx: Context, cands: dict[str, Candidate]) -> None:
    """ncclInvalidUsage raised from a barrier or after PyTorch guessed the device: set_device came too late."""
    usage = ctx.events_of("invalid-usage")
    if not usage or any(c.role == "root" and c.weight >= 80 for c in cands.values()):
        return
    barrier, guess = ctx.hint("barrier"), ctx.hint("device_guess")
    if barrier or guess:
        cands["collective-before-set-device"] = Candidate(
            cause="collective-before-set-device", weight=66, confidence=0.6, role="rule",
            message=("ncclInvalidUsage while creating the communicator for "
                     + ("a barrier" if barrier else "a collective on a guessed device")
                     + ": ranks were bound to GPUs by rank number, not the GPUs the job selected"),
            events=(barrier + guess)[:2] + usage, ranks={e.rank for e in usage if e.rank is not None},
            explains={"duplicate-gpu", "rank-died", "nccl-internal-error"})


def rule_hang_after_init(ctx: Context, cands: dict[str, Candidate]) -> None:
    """Communicators initialised on one host, then nothing: the classic GPU peer-to-peer (ACS/IOMMU) hang."""
    if cands or ctx.multi_host():
        return
    procs = [p for p in ctx.col.procs if any("COMPLETE" in ph for ph in p.init_phases.values())]
    if not procs or not any(max(p.comm_sizes.values(), default=0) > 1 for p in procs):
        return
    ended = [p for p in ctx.col.procs if p.facts.get("comm_end")]
    if ended:
        return
    last = [p.last_line for p in ctx.col.procs if p.last_line]
    stuck = [ln for ln in last if re.search(r"\b0%\||\s0/\d+", ln[2])]
    transports = sorted({t for p in procs for t in p.transports})
    cands["p2p-acs-iommu"] = Candidate(
        cause="p2p-acs-iommu", weight=30, confidence=0.5 if stuck else 0.35, role="rule",
        severity=Severity.WARNING,
        message=("NCCL communicators initialised on one host and the job then made no progress"
                 + (f" (last line: {stuck[0][2][:80]!r})" if stuck else "") + "; intra-node transports: "
                 + (", ".join(transports) or "unknown") + ". A hang right after init between local GPUs is the "
                 "signature of PCIe ACS/IOMMU breaking peer-to-peer"),
        extra_evidence=[Evidence(s, t, n) for s, n, t in stuck[:1]],
        events=[e for p in procs for e in p.facts.get("comm_init", [])][:0],
        fix=["Test quickly: rerun with `NCCL_P2P_DISABLE=1`; if it then works, disable ACS/IOMMU (BIOS, or "
             "`setpci` per the NCCL troubleshooting guide)."])


def rule_adjust_hints(ctx: Context, cands: dict[str, Candidate]) -> None:
    """Context that raises or lowers confidence in a signature's cause."""
    efa = cands.get("efa-fork-unsafe")
    if efa is not None and ctx.hint("efa"):
        efa.confidence = 0.7
        efa.events = ctx.hint("efa")[:1] + efa.events
    graph = cands.get("nccl-graph-file")
    if graph is not None and ctx.hint("graph_file"):
        graph.confidence = 0.92
        graph.extra_evidence += [Evidence(e.source, e.text, e.line) for e in ctx.hint("graph_file")[:2]]
        graph.fix.insert(0, "Unset " + " and ".join(sorted({e.caps["var"] for e in ctx.hint("graph_file")}))
                         + " (check /etc/nccl.conf and ~/.nccl.conf too).")
    root = cands.get("socket-ifname-no-match")
    values = {p.env.get("NCCL_SOCKET_IFNAME") for p in ctx.col.procs if p.env.get("NCCL_SOCKET_IFNAME")}
    values |= {e.caps["value"] for _, e in ctx.facts("socket_ifname")}
    if root is not None and values and not root.fix:
        root.fix.append(f"NCCL_SOCKET_IFNAME is {', '.join(sorted(values))}: compare with `ip -br addr` on each host.")


RULES: list[Callable[[Context, dict[str, Candidate]], None]] = [
    rule_versions, rule_address_family, rule_interfaces, rule_network, rule_coll_calls, rule_timeouts,
    rule_invalid_usage, rule_elastic_root, rule_echo_only, rule_init_failure_on_some_hosts,
    rule_single_host_system_error, rule_hang_after_init, rule_adjust_hints,
]


# ---------------------------------------------------------------------------- ranking

def _tier(c: Candidate) -> int:
    return 3 if c.weight >= 80 else 2 if c.weight >= 50 else 1 if c.weight >= 25 else 0


def _earlier(a: Event | None, b: Event | None) -> int:
    """-1 when a happened before b, 1 after, 0 when the logs cannot tell."""
    if a is None or b is None:
        return 0
    if a.ts is not None and b.ts is not None and a.ts_kind == b.ts_kind:
        return -1 if a.ts < b.ts else 1 if a.ts > b.ts else 0
    if a.source == b.source:
        return -1 if a.line < b.line else 1 if a.line > b.line else 0
    return 0


def _compare(a: Candidate, b: Candidate) -> int:
    if _tier(a) != _tier(b):
        return -1 if _tier(a) > _tier(b) else 1
    order = _earlier(a.first(), b.first())
    if order and a.role != "rule" and b.role != "rule":
        return order
    if a.weight != b.weight:
        return -1 if a.weight > b.weight else 1
    return -1 if a.confidence > b.confidence else 1 if a.confidence < b.confidence else 0


def rank_findings(cands: dict[str, Candidate]) -> list[Finding]:
    ordered = sorted(cands.values(), key=functools.cmp_to_key(_compare))
    if not ordered:
        return []
    primary = ordered[0]
    top: list[tuple[Candidate, list[Candidate]]] = [(primary, [])]
    for cand in ordered[1:]:
        folded = (cand.cause in primary.explains or cand.role in ("echo", "generic", "timeout")
                  or (cand.severity == Severity.ERROR and _tier(cand) < _tier(primary) and cand.role != "rule"))
        if folded and primary.severity == Severity.ERROR:
            top[0][1].append(cand)
        else:
            top.append((cand, []))
    independent_roots = sum(1 for c, _ in top if c.severity == Severity.ERROR and _tier(c) == _tier(primary))
    if independent_roots > 1:
        primary.confidence *= 0.9
    return [_finding(c, subs) for c, subs in top]


def _finding(cand: Candidate, secondary: list[Candidate]) -> Finding:
    return Finding(
        cand.cause, cand.severity, cand.message, confidence=cand.confidence,
        ranks=sorted(cand.ranks | {e.rank for e in cand.events if e.rank is not None}) if not cand.ranks else sorted(cand.ranks),
        hosts=sorted(cand.hosts), evidence=cand.evidence(), fix=cand.fix,
        secondary=[_finding(s, []) for s in secondary],
    )


def diagnose(col: Collection) -> list[Finding]:
    ctx = Context(col)
    cands = signature_candidates(ctx)
    for rule in RULES:
        rule(ctx, cands)
    return rank_findings(cands)
