"""Lint rules about network interfaces: which interfaces NCCL and Gloo would really select on this host, using
their exact matching rules (probe/network.py), and NCCL_IB_DISABLE. NCCL_IB_HCA, the RDMA ports and the rest
of the hardware are judged by rules/hardware.py, which lint runs through lint_hardware.py."""

from __future__ import annotations

from collections.abc import Iterator

from ..model import Evidence, Finding, Severity
from .lint_context import Context
from .nccl_parse import strtoll
from ..roads import emits

VIRTUAL_PREFIXES = ("lo", "docker", "virbr", "veth", "br-", "cni", "flannel", "cali", "tun", "tailscale", "wg")


def _usable(interfaces: list[dict]) -> list[dict]:
    """UP interfaces with an address."""
    return [i for i in interfaces if i.get("up") and i.get("addresses")]


def _listing(interfaces: list[dict]) -> str:
    shown = [f"{i['name']} {i['addresses'][0]['address']}" for i in _usable(interfaces)]
    return ", ".join(shown) if shown else "none"


def _address(iface: dict) -> str:
    return (iface.get("selected_address") or {}).get("address", "?")


def _best_interface(ctx: Context, interfaces: list[dict]) -> str | None:
    """The interface to recommend: the one this host uses to reach MASTER_ADDR, else the first non-virtual one."""
    route = ctx.master_route or {}
    if route.get("interface") and not route.get("loopback"):
        return route["interface"]
    real = [i["name"] for i in _usable(interfaces) if not i["name"].startswith(VIRTUAL_PREFIXES)]
    return real[0] if real else None


def _exists_but_unusable(spec: str, interfaces: list[dict]) -> list[str]:
    """Why the interfaces a (non-excluding) spec names were not selected: down, or without an address."""
    if spec.startswith("^"):
        return []
    names = [n.split(":")[0] for n in spec.lstrip("=").split(",") if n]
    notes = []
    for iface in interfaces:
        if any(iface["name"].startswith(n) for n in names):
            if not iface.get("up") or not iface.get("running", True):
                notes.append(f"{iface['name']} exists but is DOWN")
            elif not iface.get("addresses"):
                notes.append(f"{iface['name']} exists but has no IP address")
    return notes


@emits("env-invalid-value", "socket-ifname-no-match", "wrong-interface-selected")
def socket_ifname(ctx: Context) -> Iterator[Finding]:
    """NCCL_SOCKET_IFNAME that selects nothing on this host (prefix list, `^` excludes, `=` exact names), or
    only loopback/virtual interfaces in a multi-node job."""
    s, interfaces = ctx.get("NCCL_SOCKET_IFNAME"), ctx.interfaces
    if s is None or interfaces is None:
        return
    if len(s.value) <= 1:
        yield Finding("env-invalid-value", Severity.WARNING,
                      f"{s.shown}: NCCL ignores values shorter than 2 characters and picks interfaces itself",
                      evidence=[s.evidence()], fix=[f"Name the interface, e.g. `export NCCL_SOCKET_IFNAME="
                                                    f"{_best_interface(ctx, interfaces) or 'eth0'}`."])
        return
    family = ctx.value("NCCL_SOCKET_FAMILY")
    selected = ctx.would_use["nccl"]["interfaces"]
    if not selected:
        notes = _exists_but_unusable(s.value, interfaces)
        best = _best_interface(ctx, interfaces)
        fam = f" of family {family}" if family in ("AF_INET", "AF_INET6") else ""
        yield Finding("socket-ifname-no-match", Severity.ERROR,
                      f"{s.shown} selects no interface{fam} on this host"
                      + (f" ({'; '.join(notes)})" if notes else "")
                      + f"; UP interfaces with an address: {_listing(interfaces)}",
                      evidence=[s.evidence()],
                      fix=[f"`export NCCL_SOCKET_IFNAME={best}`" if best else
                           "Bring an interface up with an address, then name it in NCCL_SOCKET_IFNAME."])
        return
    if ctx.multi_node and all(i["name"].startswith(("lo", "docker", "virbr")) for i in selected):
        yield Finding("wrong-interface-selected", Severity.ERROR,
                      f"{s.shown} selects only {', '.join(i['name'] for i in selected)}, which other nodes cannot "
                      f"reach", evidence=[s.evidence()],
                      fix=[f"`export NCCL_SOCKET_IFNAME={_best_interface(ctx, interfaces) or 'eth0'}`"])


@emits("no-usable-interface", "wrong-interface-selected")
def bootstrap_interface(ctx: Context) -> Iterator[Finding]:
    """The interface NCCL would bootstrap over (the first it selects) is loopback/virtual, or is not the one this
    host uses to reach MASTER_ADDR, in a multi-node job; or no interface is usable at all."""
    interfaces = ctx.interfaces
    if interfaces is None:
        return
    spec = ctx.get("NCCL_SOCKET_IFNAME")
    spec_value = spec.value if spec and len(spec.value) > 1 else None
    family = ctx.value("NCCL_SOCKET_FAMILY")
    selected = ctx.would_use["nccl"]["interfaces"]
    if not selected:
        if spec_value is None:  # a NCCL_SOCKET_IFNAME that matches nothing is socket_ifname's finding
            fam = ctx.get("NCCL_SOCKET_FAMILY")
            yield Finding("no-usable-interface", Severity.ERROR,
                          "NCCL finds no usable interface (UP and RUNNING with an address"
                          + (f" of family {family}" if fam else "") + f"); interfaces: {_listing(interfaces)}",
                          evidence=[fam.evidence()] if fam else [Evidence("probe:network", _listing(interfaces))])
        return
    if not ctx.multi_node:
        return
    first = selected[0]
    shown = f"{first['name']} ({_address(first)})"
    if spec_value is None:
        how = "without NCCL_SOCKET_IFNAME NCCL picks"
        evidence = [Evidence("probe:network", f"NCCL's default order (ib*, then not docker/lo/virbr) gives {shown}")]
        if first["name"].startswith(VIRTUAL_PREFIXES):
            yield Finding("wrong-interface-selected", Severity.WARNING,
                          f"{how} {shown} for bootstrap, a loopback/virtual interface other nodes may not reach",
                          evidence=evidence, fix=[f"`export NCCL_SOCKET_IFNAME={_best_interface(ctx, interfaces)}`"])
            return
    else:
        how, evidence = f"{spec.shown} selects", [spec.evidence()]
        if all(i["name"].startswith(("lo", "docker", "virbr")) for i in selected):
            return  # socket_ifname reports it
    route = ctx.master_route or {}
    if route.get("interface") and not route.get("local") and route["interface"] != first["name"]:
        yield Finding("wrong-interface-selected", Severity.WARNING,
                      f"{how} {shown} for bootstrap, but this host reaches MASTER_ADDR {route.get('host')} through "
                      f"{route['interface']} ({route.get('source_address')}); peers may not reach {first['name']}",
                      confidence=0.5,
                      evidence=[*evidence, Evidence("probe:network", f"route to {route.get('address')} via "
                                                                     f"{route['interface']}")],
                      fix=[f"`export NCCL_SOCKET_IFNAME={route['interface']}` (on every node, with its own name)"])


@emits("gloo-ifname-no-match", "wrong-interface-selected")
def gloo_ifname(ctx: Context) -> Iterator[Finding]:
    """GLOO_SOCKET_IFNAME names that do not exist (Gloo takes exact names only: no prefixes, `^` or `=`); or,
    when unset in a multi-node job, a host name that resolves only to loopback (Gloo binds to it)."""
    s, interfaces = ctx.get("GLOO_SOCKET_IFNAME"), ctx.interfaces
    if interfaces is None:
        return
    if s is None:
        yield from _gloo_default(ctx)
        return
    if len(s.value) <= 1:
        return
    missing = ctx.would_use["gloo"]["missing"]
    if not missing:
        return
    names = {i["name"] for i in interfaces}
    hints = []
    if any(n[:1] in "^=" or (n not in names and any(x.startswith(n) for x in names)) for n in missing):
        hints.append("Gloo takes exact interface names, not NCCL's prefix/^/= syntax")
    hints += [f"{n} exists but has no IP address" for n in missing if n in names]
    if any(n.replace(".", "").isdigit() for n in missing):
        hints.append("it takes interface names, not addresses")
    best = _best_interface(ctx, interfaces)
    listed = ", ".join(map(repr, missing))
    yield Finding("gloo-ifname-no-match", Severity.ERROR,
                  f"{s.shown}: no interface named {listed} with an address on this host"
                  + (f" ({'; '.join(hints)})" if hints else "")
                  + f"; Gloo fails with 'Unable to find address for: {missing[0]}'",
                  evidence=[s.evidence()],
                  fix=[f"`export GLOO_SOCKET_IFNAME={best}`" if best else "Name an existing interface."])


@emits("wrong-interface-selected")
def _gloo_default(ctx: Context) -> Iterator[Finding]:
    """Gloo without GLOO_SOCKET_IFNAME on a multi-node job whose host name resolves to loopback only."""
    host = (ctx.section("network") or {}).get("hostname") or {}
    if ctx.multi_node and host.get("loopback_only"):
        yield Finding("wrong-interface-selected", Severity.WARNING,
                      f"GLOO_SOCKET_IFNAME is unset and the host name {host.get('name')} resolves only to "
                      f"{', '.join(host.get('addresses', []))} (loopback): Gloo binds there and other nodes cannot "
                      f"connect", evidence=[Evidence("probe:network", f"{host.get('name')} -> "
                                                                      f"{', '.join(host.get('addresses', []))}")],
                      fix=[f"`export GLOO_SOCKET_IFNAME={_best_interface(ctx, ctx.interfaces or []) or 'eth0'}`",
                           "Or fix /etc/hosts so the host name maps to the routable address."])


@emits("ib-not-used")
def ib_disabled(ctx: Context) -> Iterator[Finding]:
    """NCCL_IB_DISABLE=1 on a host with ACTIVE InfiniBand/RoCE ports: inter-node traffic goes over TCP."""
    s = ctx.get("NCCL_IB_DISABLE")
    if s is None or strtoll(s.value).value == 0 or not ctx.active_ib_ports:
        return
    ports = ", ".join(f"{d}:{p.get('port')} ({p.get('rate')})" for d, p in ctx.active_ib_ports)
    yield Finding("ib-not-used", Severity.WARNING,
                  f"{s.shown} although this host has ACTIVE RDMA ports ({ports}): inter-node traffic goes over TCP "
                  f"sockets at a fraction of the bandwidth", evidence=[s.evidence()],
                  fix=["`unset NCCL_IB_DISABLE` unless it works around a confirmed IB problem."])

