"""Clues from what software each rank ran: NCCL versions and network plugins compared across ranks and hosts."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator

from ...model import Evidence
from ...model import ranges
from ..records import Event
from ..evidence import MAX_EVIDENCE, Clue, LogView, hosts_in, ranks_of
from ...catalog.env_vars import version_tuple
from . import rule


@rule("versions-differ", "obsolete-nccl")
def rule_versions(view: LogView) -> Iterator[Clue]:
    """Different NCCL versions across hosts or ranks; an NCCL 1.x release."""
    seen: dict[str, list] = defaultdict(list)
    for proc, e in view.facts("nccl_version"):
        seen[e.caps["version"]].append((proc, e))
    if len(seen) > 1:
        per_version = "; ".join(f"{v} on {where(view, group)}" for v, group in sorted(seen.items()))
        evidence = [Evidence(e.source, e.text, e.line) for group in seen.values() for _, e in group[:2]]
        yield Clue("versions-differ", f"different NCCL versions in one job: {per_version}",
                   evidence=tuple(evidence[:MAX_EVIDENCE]),
                   hosts=frozenset(h for g in seen.values() for p, e in g for h in ([e.host] if e.host else p.hosts)),
                   fix=(f"Install the same NCCL on every host (versions seen: {', '.join(sorted(seen))}).",))
        return
    oldest = min(seen, key=version_tuple, default=None)
    if oldest and version_tuple(oldest) < (2,) and view.failed:
        e = seen[oldest][0][1]
        yield Clue("obsolete-nccl", f"NCCL {oldest} is in use: releases before 2.0 do not support current GPUs, "
                   "drivers and usage", evidence=(Evidence(e.source, e.text, e.line),))


def where(view: LogView, group: list) -> str:
    hosts = sorted({e.host for _, e in group if e.host} | {h for p, _ in group for h in p.hosts})
    if hosts:
        return ",".join(hosts[:4]) + (" ..." if len(hosts) > 4 else "")
    ranks = sorted({r for p, _ in group for r in p.ranks})
    return ("ranks " + ranges(ranks, most=8)) if ranks else ",".join(sorted({e.source for _, e in group}))


def plugin_name(caps: dict[str, str]) -> str:
    """'internal' when NCCL found no plugin, else the plugin's name or path."""
    if caps.get("plugin_path"):
        return caps["plugin_path"].split(":", 1)[-1].strip()
    plugin = caps.get("plugin", "").strip()
    return "internal" if not plugin or re.search(r"No plugin|Could not find|internal", plugin) else plugin


@rule("family0-with-ifname-set")
def rule_address_family(view: LogView) -> Iterator[Clue]:
    """'family N is neither AF_INET' with NCCL_SOCKET_IFNAME set: the named interface is missing somewhere."""
    family = view.events_of("family-not-inet")
    settings = view.facts("socket_ifname")
    values = sorted({e.caps["value"] for _, e in settings}
                    | {p.env["NCCL_SOCKET_IFNAME"] for p in view.col.procs if p.env.get("NCCL_SOCKET_IFNAME")})
    if family and values:
        yield Clue("family0-with-ifname-set",
                   f"NCCL_SOCKET_IFNAME={','.join(values)} is set and NCCL then connected to an uninitialised "
                   f"address ('{family[0].caps.get('family', '?')}' is no address family): the named interface "
                   "does not exist on some host",
                   events=tuple(family), evidence=tuple(Evidence(e.source, e.text, e.line) for _, e in settings[:2]),
                   ranks=ranks_of(family), hosts=hosts_in(family),
                   fix=(f"Check that an interface matching NCCL_SOCKET_IFNAME={','.join(values)} exists on every "
                        "host (`ip -br addr`); correct or unset it.",))


@rule("net-plugin-differs")
def rule_net_plugins(view: LogView) -> Iterator[Clue]:
    """Hosts that load different NCCL network plugins (or none): their transports cannot talk to each other."""
    by_host, first = view.by_host("net_plugin", lambda e: plugin_name(e.caps))
    evidence = {host: Evidence(e.source, e.text, e.line) for host, e in first.items()}
    if len(by_host) > 1 and len({frozenset(v) for v in by_host.values()}) > 1:
        listing = "; ".join(f"{h}: {', '.join(sorted(v))}" for h, v in sorted(by_host.items()))
        yield Clue("net-plugin-differs", f"hosts load different NCCL network plugins ({listing})",
                   evidence=tuple(evidence.values())[:MAX_EVIDENCE], hosts=frozenset(by_host),
                   fix=("Install the same NCCL network plugin (libnccl-net.so, e.g. HPC-X's or aws-ofi-nccl) on "
                        "every host, or none; check NCCL_NET_PLUGIN and LD_LIBRARY_PATH per host.",))


@rule("nccl-libraries-differ")
def rule_nccl_libraries(view: LogView) -> Iterator[Clue]:
    """The log lists NCCL libraries, packages or wheels of different versions (or CUDA builds) on one system:
    which one a process loads depends on the search path."""
    seen: dict[str, Event] = {}
    for _, e in view.facts("nccl_library"):
        caps = e.caps
        name = (f"{caps['wheel']} {caps['wheel_version']}" if caps.get("wheel")
                else f"{caps.get('version') or caps.get('pkg_version')}" + (f"+cuda{caps['cuda']}" if caps.get("cuda") else ""))
        seen.setdefault(name, e)
    versions = {n.split("+")[0].split()[-1] for n in seen}
    builds = {n.split()[0] for n in seen if n.startswith("cu")}
    if len(versions) > 1 or len(builds) > 1:
        yield Clue("nccl-libraries-differ", f"the log lists NCCL builds of different versions: {', '.join(sorted(seen))}",
                   events=tuple(seen.values())[:4],
                   fix=("Keep one NCCL: remove the other packages or wheels (`pip list | grep -i nccl`, `rpm -qa | grep -i "
                        "nccl`, `ldconfig -p | grep nccl`) and check which one the job loads (`NCCL_DEBUG=VERSION`).",))
