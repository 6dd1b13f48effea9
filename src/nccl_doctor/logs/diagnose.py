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
from collections import defaultdict
from collections.abc import Callable

from ..model import Evidence, Finding, Severity
from .candidates import MAX_EVIDENCE, Candidate, Context, compact, who
from .collect import Collection, Event, Proc
from .fallback import rule_fallback, rule_known_bugs, rule_nccl_crash
from .signatures import version_tuple
from .timeouts import rule_timeouts

VIRTUAL_IFACES = re.compile(r"^(?:lo|docker\d*|virbr\d*|veth\w*|br-\w+|cni\d*|flannel\.\d+|tailscale\d*|tun\d+)$")
# NCCL fixed the fatal stray bootstrap connection in 2.27.3.
STRAY_CONNECTION_FIXED = (2, 27, 3)


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
            ranks={e.rank for e in events if e.rank is not None} | _named_ranks(events),
            hosts={e.host for e in events if e.host},
        )
    return cands


def _named_ranks(events: list[Event]) -> set[int]:
    """Ranks a message itself names ('rank 1 and rank 0 both on CUDA device ...')."""
    return {int(v) for e in events for k, v in e.caps.items() if k.startswith("rank_") and v.isdigit()}


def _describe(events: list[Event]) -> str:
    first = min(events, key=lambda e: (-e.sig.weight, e.order))  # the most specific line, earliest
    speaker = who(events)
    text = first.message or first.text
    text = text if len(text) <= 160 else text[:157] + "..."
    more = f" ({len(events)} lines)" if len(events) > 1 else ""
    return f"{speaker}{text}{more}"


# ---------------------------------------------------------------------------- cross-host rules

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
    oldest = min(seen, key=version_tuple, default=None)
    if oldest and version_tuple(oldest) < (2,) and ctx.has_error:
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
    return ("ranks " + compact(ranks)) if ranks else ",".join(sorted({e.source for e in events}))


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
        diverged = ", ".join(_proc_name(p, e) for p, e in {id(p): (p, e) for p, e in minority}.values())
        listing = "; ".join(f"{op} on {len({id(p) for p, _ in items})} process(es)" for op, items in sorted(ops.items()))
        evidence = [Evidence(e.source, e.text, e.line) for op in sorted(ops) for _, e in ops[op][:2]]
        cands["collective-mismatch"] = Candidate(
            cause="collective-mismatch", weight=82, confidence=0.8, role="rule",
            message=f"at opCount {opcount:x} processes issue different collectives ({listing}): {diverged} diverged",
            extra_evidence=evidence[:MAX_EVIDENCE], ranks=ranks, hosts={h for p in procs for h in p.hosts},
            explains={"collective-timeout", "rank-hang", "rank-died", "straggler-rank"},
            fix=[f"Make {diverged} issue the same collective sequence as the others (a rank-dependent branch or a "
                 "different stream/communicator there)."])
        return


def rule_fingerprints(ctx: Context, cands: dict[str, Candidate]) -> None:
    """TORCH_DISTRIBUTED_DEBUG=DETAIL fingerprints: once collectives failed, the rank whose last one differs."""
    latest: dict[int, Event] = {}
    for proc, e in ctx.facts("fingerprint"):
        rank = e.rank if e.rank is not None else (min(proc.ranks) if len(proc.ranks) == 1 else None)
        if rank is not None and (rank not in latest or e.order > latest[rank].order):
            latest[rank] = e
    failed = ctx.by_cause.get("collective-mismatch") or ctx.by_cause.get("collective-timeout")
    if len(latest) < 2 or not failed:
        return  # without a failure, fingerprints taken at different moments differ for no reason
    groups: dict[tuple[str, ...], set[int]] = defaultdict(set)
    for rank, e in latest.items():
        groups[tuple(e.caps.get(k, "") for k in ("seq", "op", "shape", "dtype"))].add(rank)
    if len(groups) < 2:
        return
    sizes = sorted((len(g) for g in groups.values()), reverse=True)
    majority = max(groups.values(), key=len) if sizes[0] > sizes[1] else set()
    diverged = set(latest) - majority
    listing = "; ".join(f"ranks {compact(sorted(g))}: {_fingerprint(latest[min(g)])}" for g in groups.values())
    cand = cands.get("collective-mismatch") or Candidate(
        cause="collective-mismatch", weight=80, confidence=0.75, role="rule",
        explains={"collective-timeout", "rank-hang", "rank-died", "straggler-rank"})
    cand.message = (f"rank {compact(sorted(diverged))} ran a different collective than the others" if majority
                    else "ranks ran different collectives") + f" ({listing})" + (
        f" - {cand.message}" if cand.message else "")
    cand.ranks = diverged
    ordered = sorted(latest.values(), key=lambda e: e.order)
    cand.extra_evidence += [Evidence(e.source, e.text, e.line) for e in ordered][:4]
    cands["collective-mismatch"] = cand


def _fingerprint(e: Event) -> str:
    caps = e.caps
    return " ".join(filter(None, (caps.get("op"), f"#{caps['seq']}" if caps.get("seq") else "",
                                  caps.get("shape"), caps.get("dtype"))))


def _proc_name(proc: Proc, event: Event) -> str:
    if proc.ranks and proc.rank_inferred:
        return f"{event.host or '?'} pid {event.pid} (GPU {compact(sorted(proc.devs))}, likely rank {compact(sorted(proc.ranks))})"
    if proc.ranks:
        return "rank " + compact(sorted(proc.ranks))
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
    versions = [version_tuple(e.caps["version"]) for _, e in ctx.facts("nccl_version")]
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


QUIET_AFTER_SETUP = 40  # lines after NCCL's last setup line that still fit "nothing happened after init"
# GPU models without NVLink between boards: peer-to-peer goes over PCIe, where ACS/IOMMU break it.
PCIE_ONLY_GPU = re.compile(r"GeForce|TITAN|Quadro|RTX A\d000|RTX \d000 Ada|RTX PRO|\bL4\b|\bL40S?\b|\bA10G?\b|\bT4\b")


def rule_hang_after_init(ctx: Context, cands: dict[str, Candidate]) -> None:
    """NCCL set up on several GPUs of one host, then nothing: the classic peer-to-peer (ACS/IOMMU) hang.

    Weak evidence (a log can also just be cut short), so a low-confidence warning: stronger when init
    visibly completed, when a progress bar sits at 0, and on boards whose GPUs talk over PCIe only.
    """
    ended = ctx.facts("comm_end") or ctx.facts("coll_done") or ctx.hint("error_line") or ctx.hint("dist_error")
    if ended or ctx.multi_host() or any(c.severity == Severity.ERROR for c in cands.values()):
        return  # it finished, or failed in a way a hang does not
    procs = ctx.col.procs
    started = any(p.init_phases or p.facts.get("nccl_version") or p.facts.get("bootstrap") for p in procs)
    if not started or (ctx.world_size() or len(ctx.facts("rank_host"))) < 2 or _output_after_setup(ctx):
        return
    completed = [p for p in procs if any("COMPLETE" in ph for ph in p.init_phases.values())]
    stuck = [ln for ln in (p.last_line for p in procs) if ln and re.search(r"\b0%\||\s0/\d+", ln[2])]
    gpus = sorted({e.caps["gpu"] for _, e in ctx.facts("rank_host") if e.caps.get("gpu")})
    count = max(ctx.world_size() or 0, len({e.caps["rank"] for _, e in ctx.facts("rank_host")}))
    pcie = [g for g in gpus if PCIE_ONLY_GPU.search(g)]
    transports = sorted({t for p in procs for t in p.transports})
    confidence = 0.3 + 0.1 * bool(completed) + 0.1 * bool(stuck) + 0.05 * bool(pcie)
    cands["p2p-acs-iommu"] = Candidate(
        cause="p2p-acs-iommu", weight=30, confidence=min(confidence, 0.5), role="rule",
        severity=Severity.WARNING,
        message=("NCCL " + ("communicators initialised" if completed else "started initialising") + " on "
                 + (f"{count}x {gpus[0]}" if len(gpus) == 1 else f"{count} GPUs") + " of one host and the log "
                 "then shows no progress, no result and no error"
                 + (f" (last line: {stuck[0][2][:80]!r})" if stuck else "")
                 + (f"; intra-node transports: {', '.join(transports)}" if transports else "")
                 + ". A hang right after init between local GPUs is the signature of PCIe ACS/IOMMU breaking "
                 "peer-to-peer (if the log was merely cut short, ignore this)"),
        extra_evidence=[Evidence(s, t, n) for s, n, t in stuck[:1]],
        events=[e for _, e in ctx.facts("rank_host")][:2],
        fix=["Test quickly: rerun with `NCCL_P2P_DISABLE=1`; if it then works, disable ACS/IOMMU (BIOS, kernel "
             "`intel_iommu=off` / `amd_iommu=off`, or `setpci` per the NCCL troubleshooting guide)."])


def rule_acs_enabled(ctx: Context, cands: dict[str, Candidate]) -> None:
    """`lspci -vvv` in the log shows ACS enabled on PCI bridges: peer-to-peer between local GPUs goes through
    the root complex, where it hangs or fails. Evidence for p2p-acs-iommu, strongest with P2P channels set up."""
    acs = ctx.hint("acs_enabled")
    if not acs:
        return
    p2p = sorted({t for p in ctx.col.procs for t in p.transports if t.startswith("P2P")})
    seen = (f"lspci shows ACS enabled on {len(acs)} PCI bridge(s) ({acs[0].message.strip()[:70]!r})"
            + (f" and NCCL set up {', '.join(p2p)} channels between local GPUs" if p2p else ""))
    evidence = [Evidence(e.source, e.text, e.line) for e in acs[:2]]
    cand = cands.get("p2p-acs-iommu")
    if cand is not None:  # a P2P failure or hang already points there: ACS confirms it
        cand.confidence = max(cand.confidence, 0.7 if p2p else 0.6)
        cand.message += f"; {seen}"
        cand.extra_evidence += evidence
        return
    other_error = any(c.severity == Severity.ERROR for c in cands.values())
    cands["p2p-acs-iommu"] = Candidate(
        cause="p2p-acs-iommu", weight=25 if other_error else 40 if p2p else 30,
        confidence=0.3 if other_error else 0.55 if p2p else 0.4, role="rule", severity=Severity.WARNING,
        message=(f"{seen}. ACS redirects GPU peer-to-peer traffic through the root complex, where it is slow or "
                 "lost: a hang or failure between local GPUs" + (" may come from it" if other_error else "")),
        extra_evidence=evidence,
        fix=["Disable ACS on the bridges (`setpci` per the NCCL troubleshooting guide, or the BIOS) or the IOMMU; "
             "to confirm first, rerun with `NCCL_P2P_DISABLE=1`."])


def _output_after_setup(ctx: Context) -> bool:
    """Did the job print much after NCCL's last setup line (training went on, so no hang right after init)?"""
    last: dict[str, int] = {}
    for proc in ctx.col.procs:
        for events in proc.facts.values():
            for e in events:
                last[e.source] = max(last.get(e.source, 0), e.line)
    return any(ctx.col.source_lines.get(src, 0) - line > QUIET_AFTER_SETUP for src, line in last.items())


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
    rule_versions, rule_address_family, rule_interfaces, rule_network, rule_coll_calls, rule_fingerprints,
    rule_timeouts, rule_invalid_usage, rule_elastic_root, rule_nccl_crash, rule_echo_only, rule_init_failure_on_some_hosts,
    rule_single_host_system_error, rule_known_bugs, rule_fallback, rule_hang_after_init, rule_acs_enabled,
    rule_adjust_hints,
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


def _finding(cand: Candidate, secondary: list[Candidate], evidence_limit: int = MAX_EVIDENCE) -> Finding:
    ranks = cand.ranks or {e.rank for e in cand.events if e.rank is not None}
    return Finding(
        cand.cause, cand.severity, cand.message, confidence=cand.confidence,
        ranks=sorted(ranks), hosts=sorted(cand.hosts), evidence=cand.evidence()[:evidence_limit], fix=cand.fix,
        secondary=[_finding(s, [], evidence_limit=3) for s in secondary],
    )


def diagnose(col: Collection) -> list[Finding]:
    ctx = Context(col)
    cands = signature_candidates(ctx)
    for rule in RULES:
        rule(ctx, cands)
    return rank_findings(cands)
