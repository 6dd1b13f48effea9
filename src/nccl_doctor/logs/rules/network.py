"""Clues about the network NCCL chose: which interfaces and addresses it bootstraps and connects over, whether
the hosts agree, and whether InfiniBand or TCP sockets carry the traffic."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator

from ...catalog import cause as lookup_cause
from ...model import Evidence, Severity
from ..records import Event
from ..evidence import Clue, LogView, as_evidence, hosts_in, ranks_of, unique
from . import rule

# Interfaces other hosts cannot reach: loopback, container bridges and veths, overlay and tunnel devices.
VIRTUAL = re.compile(r"^(?:lo|docker\d*|virbr\d*|veth\w*|br-\w+|cni\d*|flannel\.\d+|cali\w+|vxlan\.?\w*|kube-\w+|"
                     r"weave|podman\d*|lxcbr\d*|lxdbr\d*)$")
TUNNEL = re.compile(r"^(?:ip6tnl\d*|ip6gre\d*|gre\d*|gretap\d*|erspan\d*|sit\d*|tun\d+|tap\d+|wg\d+|tailscale\d*|"
                    r"zt\w+|ipip\d*|ip_vti\d*|vti\d*|ipsec\d*|nebula\d*)$")
IPOIB = re.compile(r"ib\w*\d")  # IPoIB interfaces: ib0, ib1.8001, ibp12s0, ibs5
DEVICE = re.compile(r"\[\d+\](?P<iface>[\w.@-]+):(?P<addr>[0-9a-fA-F:.%\w-]+?)<\d+>")
# Link-local addresses: IPv6 fe80::/10 (with its %scope) and IPv4 169.254/16 (cloud metadata and pod-identity
# links, hosts with no DHCP answer). Each host has its own; no other host can route to them.
LINK_LOCAL = re.compile(r"(?<![\w.:])(?P<addr>fe80:[0-9a-fA-F:]*|169\.254\.\d{1,3}\.\d{1,3})(?:%(?P<iface>[\w.@-]+))?")
# Docker's default bridge network: a container without host networking has an address here that only its own
# host reaches.
DOCKER_BRIDGE = re.compile(r"(?<![\d.])172\.17\.\d{1,3}\.\d{1,3}(?![\d.])")
NETWORK_FAILURES = {"host-unreachable", "master-unreachable", "no-usable-interface", "socket-ifname-no-match",
                    "wrong-interface-selected", "rank-died", "nccl-internal-error"}
BIND_FAILURES = {"address-not-local", "port-in-use"}  # a listening socket of this host, not a path to another


def kind(iface: str, addr: str = "") -> str | None:
    """Why other hosts cannot use this interface, or None."""
    if TUNNEL.match(iface):
        return "a tunnel"
    if iface == "lo" or addr.startswith("127."):
        return "loopback"
    if VIRTUAL.match(iface):
        return "a container/virtual bridge"
    if addr.lower().startswith("fe80"):
        return "IPv6 link-local only"
    if addr.startswith("169.254."):
        return "IPv4 link-local"
    return None


def exclusion(iface: str) -> str:
    """The NCCL_SOCKET_IFNAME prefix that excludes an interface and its siblings (veth1a2b -> veth, br-x -> br-)."""
    m = re.match(r"(br-|[a-z]+)", iface)
    return m.group(1) if m else iface


def network_failed(view: LogView) -> list[Event]:
    """Error lines that a broken network path produces (connections refused, lost, timed out)."""
    return [e for e in view.events if e.cause not in BIND_FAILURES and (
        e.cause in NETWORK_FAILURES or lookup_cause(e.cause).category in ("network_interface", "rendezvous_network"))]


def used_interfaces(view: LogView) -> dict[tuple[str, str], Event]:
    """(interface, address) -> the line that shows NCCL using it: bootstrap and socket-transport device lists."""
    used: dict[tuple[str, str], Event] = {}
    for _, e in view.facts("bootstrap"):
        used.setdefault((e.caps["iface"], e.caps.get("addr", "")), e)
    for name in ("socket_devices", "socket_device_entry"):
        for _, e in view.facts(name):
            for m in DEVICE.finditer(e.caps.get("devices", e.message)):
                used.setdefault((m.group("iface"), m.group("addr")), e)
    return used


@rule("iface-unreachable-kind", "iface-unreachable-kind-quiet")
def rule_interface_kinds(view: LogView) -> Iterator[Clue]:
    """NCCL bootstraps or connects over an interface other hosts cannot reach: loopback, a docker/virtual
    bridge, a tunnel, or an IPv6 link-local address (common when NCCL_SOCKET_IFNAME is unset)."""
    bad = {(iface, addr): e for (iface, addr), e in used_interfaces(view).items() if kind(iface, addr)}
    if not bad:
        return
    failures = network_failed(view)
    kinds: dict[str, list[str]] = defaultdict(list)
    for iface, addr in bad:
        kinds[kind(iface, addr) or ""].append(iface)
    listing = "; ".join(f"{', '.join(names[:3])}{f' and {len(names) - 3} more' if len(names) > 3 else ''} ({what})"
                        for what, names in kinds.items())
    more = ""
    names = sorted({iface for iface, _ in bad})
    fix = (f"Keep NCCL (and Gloo) off {', '.join(names[:4])}: set NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME to the "
           f"interface the hosts share, or exclude them: `NCCL_SOCKET_IFNAME=^{','.join(exclusion(n) for n in names[:4])}`.",)
    events = unique(bad.values())
    if failures or view.multi_host():
        yield Clue("iface-unreachable-kind", f"NCCL uses interfaces other hosts cannot reach: {listing}{more}",
                   events=tuple(events[:4] + failures[:2]), hosts=hosts_in(events), fix=fix)
    else:
        yield Clue("iface-unreachable-kind-quiet", f"NCCL lists interfaces other hosts cannot reach: {listing}{more}"
                   " (harmless on one host; a multi-host job would fail over them)", events=tuple(events[:4]),
                   hosts=hosts_in(events), fix=fix, severity=Severity.WARNING)


@rule("connect-to-link-local")
def rule_link_local_connect(view: LogView) -> Iterator[Clue]:
    """A failed connection to a link-local address (IPv6 fe80::, IPv4 169.254/16): NCCL picked an address other
    hosts cannot route to."""
    failed = failed_connections_to(view, LINK_LOCAL)
    if failed:
        m = LINK_LOCAL.search(failed[0].message)
        via = f" via {m.group('iface')}" if m and m.group("iface") else ""
        yield Clue("connect-to-link-local", f"connections to the link-local address {m.group('addr') if m else '?'}"
                   f"{via} failed: NCCL chose an interface whose address other hosts cannot route to",
                   events=tuple(unique(failed))[:4], ranks=ranks_of(failed), hosts=hosts_in(failed),
                   fix=(f"Set NCCL_SOCKET_IFNAME to an interface with a routable address instead of "
                        f"{m.group('iface') if m and m.group('iface') else 'the link-local one'} (`ip -br addr`).",))


@rule("connect-to-docker-bridge")
def rule_docker_bridge_connect(view: LogView) -> Iterator[Clue]:
    """A failed connection to an address of Docker's default bridge (172.17.0.0/16): a process in a container
    without host networking gave out its bridge address, which other hosts cannot reach."""
    failed = failed_connections_to(view, DOCKER_BRIDGE)
    if failed:
        m = DOCKER_BRIDGE.search(failed[0].message)
        yield Clue("connect-to-docker-bridge", f"connections to {m.group(0) if m else '?'} failed: an address of Docker's "
                   "default bridge network, which only its own host can reach (a container without host networking)",
                   events=tuple(unique(failed))[:4], ranks=ranks_of(failed), hosts=hosts_in(failed),
                   fix=("Run the containers with host networking (`docker run --network host`, `hostNetwork: true`), "
                        "or set NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME and the rendezvous address to the interface "
                        "the hosts share.",))


CONNECT_SIGNATURES = ("socket-connect-failed", "socket-call-failed", "connection-closed-by-peer")


def failed_connections_to(view: LogView, address: re.Pattern[str]) -> list[Event]:
    """Failed connections whose line names an address of this kind."""
    return [e for e in network_failed(view) + view.events_of(*CONNECT_SIGNATURES) if address.search(e.message)]


@rule("ifname-differs", "ifname-differs-quiet")
def rule_interface_names(view: LogView) -> Iterator[Clue]:
    """Hosts bootstrap over differently named interfaces: one NCCL_SOCKET_IFNAME cannot match them all."""
    by_host, first = view.by_host("bootstrap", lambda e: e.caps["iface"])
    names = {n for v in by_host.values() for n in v}
    if len(by_host) > 1 and len(names) > 1 and all(len(v) == 1 for v in by_host.values()):
        listing = "; ".join(f"{h}: {','.join(sorted(v))}" for h, v in sorted(by_host.items()))
        failed = bool(network_failed(view))
        yield Clue("ifname-differs" if failed else "ifname-differs-quiet",
                   f"hosts bootstrap over differently named interfaces ({listing})",
                   evidence=as_evidence(list(first.values())[:6]), hosts=frozenset(by_host),
                   fix=(f"Make NCCL_SOCKET_IFNAME match on every host, e.g. "
                        f"`NCCL_SOCKET_IFNAME={','.join(sorted(names))}`.",),
                   severity=None if failed else Severity.WARNING)


@rule("init-fails-on-some-hosts")
def rule_init_failure_on_some_hosts(view: LogView) -> Iterator[Clue]:
    """A generic init error on some hosts only, nothing more specific: those hosts are set up differently."""
    if any(e.sig.role == "root" for e in view.events):
        return
    generic = [e for e in view.events if e.sig.role == "generic" and e.host]
    hosts = view.col.hosts_seen()
    failing = {e.host for e in generic}
    if generic and len(hosts) > 1 and failing and failing < hosts:
        others = sorted(hosts - failing)
        yield Clue("init-fails-on-some-hosts",
                   f"NCCL init fails on {', '.join(sorted(failing))} only ({generic[0].message[:100]}) while "
                   f"{', '.join(others[:3])} do not: something differs between the hosts, most often the network "
                   "interface names that NCCL_SOCKET_IFNAME has to match (or the NCCL version)",
                   events=tuple(generic), hosts=frozenset(failing),
                   fix=("Compare `ip -br addr` and the NCCL version on the failing and the working hosts; rerun "
                        "with NCCL_DEBUG=INFO to see the `Bootstrap : Using` interface per host.",))


@rule("ib-on-some-hosts", "ib-expected-sockets-used")
def rule_transports(view: LogView) -> Iterator[Clue]:
    """InfiniBand on some hosts and TCP sockets on others; InfiniBand expected but sockets used."""
    nets, shown = view.by_host("network", lambda e: e.caps["net"])
    socket_hosts = sorted(h for h, n in nets.items() if "Socket" in n)
    other_hosts = sorted(h for h, n in nets.items() if n - {"Socket"})
    absent = [e for _, e in view.facts("ib_absent")]
    expected = [p for p in view.col.procs if p.env.get("NCCL_IB_HCA") or p.env.get("NCCL_IB_DISABLE") == "0"]
    if socket_hosts and other_hosts:
        others = sorted(set().union(*(nets[h] for h in other_hosts)) - {"Socket"})
        yield Clue("ib-on-some-hosts", f"{', '.join(other_hosts[:4])} use {', '.join(others)} but "
                   f"{', '.join(socket_hosts[:4])} fell back to TCP sockets",
                   events=tuple(absent[:3]), hosts=frozenset(socket_hosts),
                   evidence=tuple(Evidence(shown[h].source, shown[h].text, shown[h].line)
                                  for h in socket_hosts[:3] + other_hosts[:2]),
                   fix=(f"On {', '.join(socket_hosts[:4])}: check `ibv_devinfo`, that /dev/infiniband is mapped into "
                        "the container and that NCCL_IB_DISABLE / NCCL_IB_HCA are not set differently there.",))
    elif socket_hosts and (expected or (absent and len(nets) > 1)):
        hca = sorted({p.env["NCCL_IB_HCA"] for p in expected if p.env.get("NCCL_IB_HCA")})
        cause = "ib-hca-no-match" if hca and absent else "ib-not-used"
        yield Clue("ib-expected-sockets-used",
                   f"NCCL_IB_HCA={','.join(hca)} is set but NCCL uses TCP sockets" if cause == "ib-hca-no-match"
                   else "InfiniBand was expected or probed but NCCL uses TCP sockets between hosts",
                   cause=cause, events=tuple(absent[:3]), hosts=frozenset(socket_hosts),
                   evidence=tuple(Evidence(shown[h].source, shown[h].text, shown[h].line) for h in socket_hosts[:3]))


@rule("sockets-over-ipoib", "sockets-over-ipoib-quiet")
def rule_sockets_over_ipoib(view: LogView) -> Iterator[Clue]:
    """NCCL's TCP socket transport over an InfiniBand interface (IPoIB): the fabric is there, NCCL's IB transport
    is not - in a container without libibverbs it cannot even open the verbs library. NCCL sets up its network
    transport in single-host jobs too, where it carries nothing: there it is only a warning."""
    ipoib = [(iface, e) for (iface, _), e in used_interfaces(view).items()
             if IPOIB.match(iface) and e.sig.fact in ("socket_devices", "socket_device_entry")]
    if not ipoib or any("IB" in e.caps.get("net", "") for _, e in view.facts("network")):
        return
    verbs = [e for _, e in view.facts("ib_absent") if "libibverbs" in e.message.lower()]
    iface, shown = ipoib[0]
    between_hosts = view.multi_host() or bool(network_failed(view))
    yield Clue("sockets-over-ipoib" if between_hosts else "sockets-over-ipoib-quiet",
               f"NCCL's socket transport uses {iface}, an InfiniBand interface (IPoIB)"
               + (", and NCCL could not open libibverbs" if verbs else "") + ": traffic goes over TCP instead of RDMA",
               cause="ib-missing-in-container" if verbs else "ib-not-used", events=(shown, *verbs[:1]),
               fix=("Install rdma-core (libibverbs) in the image and map /dev/infiniband into the container "
                    "(`--device=/dev/infiniband`, `--cap-add=IPC_LOCK`); check `ibv_devinfo` inside it and that "
                    "NCCL_IB_DISABLE is not set.",))


@rule("retry-exceeded-on-roce")
def rule_roce(view: LogView) -> Iterator[Clue]:
    """Retries exceeded on a RoCE fabric: most often a GID index that cannot carry the traffic."""
    retry = view.events_of("ib-completion-retry-exceeded")
    roce = [e for _, e in view.facts("ib_devices") if "/RoCE" in e.caps.get("devices", "")]
    if retry and roce:
        yield Clue("retry-exceeded-on-roce", "transport retries exceeded on a RoCE fabric: a GID index that is not a "
                   "routable RoCE v2 address drops every packet", events=tuple(retry[:2]),
                   evidence=(Evidence(roce[0].source, roce[0].text, roce[0].line),), ranks=ranks_of(retry),
                   hosts=hosts_in(retry),
                   fix=("Pick a routable RoCE v2 GID: `show_gids` lists them; set e.g. `NCCL_IB_GID_INDEX=3` on every "
                        "host.",))


@rule("connect-failed-with-pinned-interface")
def rule_pinned_interface(view: LogView) -> Iterator[Clue]:
    """Connections between hosts failed while NCCL_SOCKET_IFNAME pins an interface: a common culprit is that the
    named interface exists on every host but does not carry traffic between them."""
    pinned = sorted({e.caps["value"] for name in ("socket_ifname", "nccl_env", "nccl_env_cmd") for _, e in view.facts(name)
                     if e.caps.get("value") and (name == "socket_ifname" or e.caps.get("var") == "NCCL_SOCKET_IFNAME")})
    failures = [e for e in network_failed(view) if e.sig.role != "timeout"]
    if pinned and failures:
        yield Clue("connect-failed-with-pinned-interface", f"connections failed while NCCL_SOCKET_IFNAME={','.join(pinned)} "
                   "pins the interface", events=tuple(failures[:2]),
                   fix=(f"Check that {','.join(pinned)} carries traffic between the hosts (`ping -I {pinned[0]} <peer>`); "
                        "else name the interface they share.",))
