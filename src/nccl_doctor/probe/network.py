"""Network facts: interfaces (psutil), which interfaces NCCL and Gloo would pick, routes to the rendezvous host.

`nccl_select_interfaces` follows NCCL's ncclFindInterfaces / ncclOsFindInterfaces (src/misc/socket.cc) and
matchIfList (src/misc/utils.cc) exactly:

- NCCL_SOCKET_IFNAME of two or more characters is a comma list (at most 16 entries) of interface-name
  prefixes; a leading `^` excludes the listed names, then a leading `=` makes them exact names; `:port`
  suffixes are parsed and ignored; an empty list matches everything (so `^=` matches nothing);
- unset (or one character): `ib` prefixes first, then anything but `docker`/`lo`/`virbr`, then `docker`,
  then `lo`, then `virbr`; the NCCL_COMM_ID subnet step is not modelled;
- only interfaces that are UP and RUNNING, with an IPv4 or IPv6 address (IPv6 loopback skipped), optionally
  restricted by NCCL_SOCKET_FAMILY (exactly "AF_INET" or "AF_INET6"; any other value means either);
- each interface appears once with the first address getifaddrs reports for it (IPv4 entries come first).

Gloo (GLOO_SOCKET_IFNAME) takes exact names only: one device per listed name, using that interface's first
IPv4/IPv6 address; a name without an address fails ("Unable to find address for: NAME").
"""

from __future__ import annotations

import errno
import ipaddress
import socket
from collections.abc import Mapping
from typing import Any

import psutil

from ..bounded import within
from ..redact import redact

MAX_IFS = 16  # NCCL's MAX_IFS: entries parsed from NCCL_SOCKET_IFNAME, interfaces returned
NCCL_DEFAULT_ORDER = ("ib", "^docker,lo,virbr", "docker", "lo", "virbr")
FAMILIES = {socket.AF_INET: "AF_INET", socket.AF_INET6: "AF_INET6"}
RESOLVE_TIMEOUT_S = 2.0


# ------------------------------------------------------------------ interfaces

def interfaces() -> list[dict[str, Any]]:
    """Every interface: name, up, running, mtu, speed_mbps, addresses [{family, address, netmask}]."""
    addrs = psutil.net_if_addrs()
    stats = psutil.net_if_stats()
    result = []
    for name in [*addrs, *(n for n in stats if n not in addrs)]:
        st = stats.get(name)
        flags = set(st.flags.split(",")) if st and getattr(st, "flags", "") else set()
        result.append({
            "name": name,
            "up": bool(st and st.isup),
            "running": "running" in flags if flags else bool(st and st.isup),
            "loopback": "loopback" in flags or name == "lo",
            "mtu": st.mtu if st else None,
            "speed_mbps": st.speed if st and st.speed else None,
            "addresses": [
                {"family": FAMILIES[a.family], "address": a.address.split("%")[0], "netmask": a.netmask}
                for a in addrs.get(name, ()) if a.family in FAMILIES
            ],
        })
    return result


def _parse_list(spec: str) -> list[str]:
    """NCCL's parseStringList: comma-separated entries, ':port' suffix dropped, empties skipped, max 16."""
    names = [entry.split(":", 1)[0][:63] for entry in spec.split(",")]
    return [n for n in names if n][:MAX_IFS]


def _matches(name: str, spec: str) -> bool:
    """NCCL's matchIfList(name, -1, list, n, exact) XOR the leading '^'."""
    exclude = spec.startswith("^")
    spec = spec[1:] if exclude else spec
    exact = spec.startswith("=")
    spec = spec[1:] if exact else spec
    wanted = _parse_list(spec)
    hit = not wanted or any(name == w if exact else name.startswith(w) for w in wanted)
    return hit != exclude


def _candidates(interfaces: list[dict], family: str | None) -> list[tuple[dict, dict]]:
    """(interface, address) pairs in getifaddrs order (IPv4 entries, then IPv6), first address per interface."""
    pairs = []
    for fam in ("AF_INET", "AF_INET6"):
        if family in FAMILIES.values() and fam != family:
            continue
        for iface in interfaces:
            if not iface.get("up") or not iface.get("running", iface.get("up")):
                continue
            for addr in iface.get("addresses", ()):
                if addr.get("family") != fam:
                    continue
                if fam == "AF_INET6" and addr.get("address") == "::1":
                    continue
                pairs.append((iface, addr))
    seen: set[str] = set()
    first = []
    for iface, addr in pairs:
        if iface["name"] not in seen:
            seen.add(iface["name"])
            first.append((iface, addr))
    return first


def _find(spec: str, interfaces: list[dict], family: str | None) -> list[dict]:
    found = [{**iface, "selected_address": addr} for iface, addr in _candidates(interfaces, family)
             if _matches(iface["name"], spec)]
    return found[:MAX_IFS]


def nccl_select_interfaces(spec: str | None, interfaces: list[dict], family: str | None = None) -> list[dict]:
    """The interfaces NCCL would use for bootstrap and sockets (bootstrap uses the first), in NCCL's order.

    `spec` is NCCL_SOCKET_IFNAME (None = unset), `family` NCCL_SOCKET_FAMILY. Each result is a copy of the
    interface dict with the address NCCL would use under "selected_address".
    """
    if spec is not None and len(spec) > 1:
        return _find(spec, interfaces, family)
    for step in NCCL_DEFAULT_ORDER:
        found = _find(step, interfaces, family)
        if found:
            return found
    return []


def gloo_select_interfaces(spec: str | None, interfaces: list[dict]) -> list[dict]:
    """The interfaces Gloo would use for GLOO_SOCKET_IFNAME: exact names that exist with an address.

    Returns [] when `spec` is unset or one character (Gloo then binds to the address of the host name).
    Names that match nothing are simply absent: compare with `spec.split(',')` to find them.
    """
    if spec is None or len(spec) <= 1:
        return []
    by_name = {iface["name"]: iface for iface in interfaces}
    found = []
    for name in spec.split(","):
        iface = by_name.get(name)
        addrs = [a for a in (iface or {}).get("addresses", ()) if a.get("family") in ("AF_INET", "AF_INET6")]
        if iface and addrs:
            found.append({**iface, "selected_address": addrs[0]})
    return found


def would_use(env: Mapping[str, str], network: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Which interfaces NCCL and Gloo would pick under `env` on the host of `network` (facts): the one place
    that decides it. The first interface of each carries bootstrap and rendezvous traffic.

    nccl: {"setting": NCCL_SOCKET_IFNAME or None, "interfaces": [...]}; gloo: {"setting", "interfaces",
    "missing": names GLOO_SOCKET_IFNAME lists that have no address here, "via": "GLOO_SOCKET_IFNAME" or
    "hostname" (unset: Gloo binds to the address the host name resolves to)}. Interfaces are copies of the
    interface facts with the address used under "selected_address".
    """
    ifaces = list(network.get("interfaces") or [])
    nccl_spec, gloo_spec = env.get("NCCL_SOCKET_IFNAME"), env.get("GLOO_SOCKET_IFNAME")
    nccl = {"setting": nccl_spec if nccl_spec and len(nccl_spec) > 1 else None,
            "interfaces": nccl_select_interfaces(nccl_spec, ifaces, env.get("NCCL_SOCKET_FAMILY"))}
    if gloo_spec and len(gloo_spec) > 1:
        chosen = gloo_select_interfaces(gloo_spec, ifaces)
        found = {i["name"] for i in chosen}
        return {"nccl": nccl, "gloo": {"setting": gloo_spec, "interfaces": chosen, "via": "GLOO_SOCKET_IFNAME",
                                       "missing": [n for n in gloo_spec.split(",") if n not in found]}}
    owners = {a["address"]: i for i in ifaces for a in i.get("addresses", ())}
    named = [{**owners.get(address, {"name": "hostname"}), "selected_address": {"address": address}}
             for address in ((network.get("hostname") or {}).get("addresses") or [])[:1]]
    return {"nccl": nccl, "gloo": {"setting": None, "interfaces": named, "via": "hostname", "missing": []}}


# ------------------------------------------------------------------ resolution and routes

def resolve(host: str, timeout: float | None = None) -> list[str]:
    """Addresses of `host` (getaddrinfo in a daemon thread, so a hung resolver cannot hold us)."""
    timeout = RESOLVE_TIMEOUT_S if timeout is None else timeout

    def lookup() -> list[str]:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
        return list(dict.fromkeys(info[4][0] for info in infos))

    try:
        addresses = within(timeout, lookup, name="resolve")
    except TimeoutError:
        raise TimeoutError(f"resolving {host} took more than {timeout:g} s") from None
    if not addresses:
        raise OSError(f"no address for {host}")
    return addresses


def _local_addresses(ifaces: list[dict]) -> dict[str, str]:
    return {a["address"]: i["name"] for i in ifaces for a in i.get("addresses", ())}


def route_to(host: str, port: int = 9, ifaces: list[dict] | None = None) -> dict[str, Any]:
    """Which local interface and source address the kernel uses to reach `host`.

    Uses the UDP connect trick: connecting a UDP socket asks the kernel for a route and sends nothing.
    Resolution failures and missing routes become {"unavailable": why, "error": kind}.
    """
    if ifaces is None:
        ifaces = interfaces()
    try:
        addresses = resolve(host)
    except TimeoutError as exc:
        return {"host": host, "error": "timeout", "unavailable": str(exc)}
    except (OSError, UnicodeError) as exc:
        return {"host": host, "error": "unresolvable", "unavailable": f"cannot resolve {host}: {exc}"}
    address = addresses[0]
    ip = ipaddress.ip_address(address)
    info: dict[str, Any] = {"host": host, "addresses": addresses, "address": address, "loopback": ip.is_loopback}
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            sock.connect((address, port))
            source = sock.getsockname()[0]
    except OSError as exc:
        kind = "no-route" if exc.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH, errno.EADDRNOTAVAIL) else "error"
        return {**info, "error": kind, "unavailable": f"no route to {address}: {exc.strerror or exc}"}
    local = _local_addresses(ifaces)
    return {**info, "source_address": source, "interface": local.get(source),
            "local": ip.is_loopback or address in local}


def hostname_facts(ifaces: list[dict]) -> dict[str, Any]:
    """What the host name resolves to: Gloo binds to it when GLOO_SOCKET_IFNAME is unset."""
    name = socket.gethostname()
    try:
        addresses = resolve(name)
    except (OSError, UnicodeError, TimeoutError) as exc:
        return {"name": name, "unavailable": f"cannot resolve {name}: {exc}"}
    local = _local_addresses(ifaces)
    return {"name": name, "addresses": addresses,
            "loopback_only": all(ipaddress.ip_address(a).is_loopback for a in addresses),
            "interfaces": sorted({local[a] for a in addresses if a in local})}


def port_listeners(port: int) -> list[dict[str, Any]]:
    """Local TCP sockets listening on `port` (pid and process name when visible to us)."""
    found = []
    for conn in psutil.net_connections(kind="tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port:
            entry: dict[str, Any] = {"address": conn.laddr.ip, "pid": conn.pid}
            if conn.pid:
                try:
                    entry["process"] = psutil.Process(conn.pid).name()
                except psutil.Error:
                    pass
            found.append(entry)
    return found


def master_facts(env: Mapping[str, str], ifaces: list[dict]) -> dict[str, Any] | None:
    addr, port_text = env.get("MASTER_ADDR"), env.get("MASTER_PORT")
    if not addr and not port_text:
        return None
    facts: dict[str, Any] = {"addr": redact("MASTER_ADDR", addr) if addr else addr, "port": port_text}
    port = int(port_text) if port_text and port_text.strip().isdigit() else None
    if addr:
        route = route_to(addr, port if port and 0 < port < 65536 else 9, ifaces)
        facts["route"] = {k: v.replace(addr, facts["addr"]) if isinstance(v, str) else v for k, v in route.items()}
    if port is not None and 0 < port < 65536:
        try:
            facts["listeners"] = port_listeners(port)
        except (psutil.Error, OSError) as exc:
            facts["listeners"] = {"unavailable": f"cannot list sockets: {exc}"}
    return facts


def probe(env: Mapping[str, str]) -> dict[str, Any]:
    ifaces = interfaces()
    facts: dict[str, Any] = {"interfaces": ifaces, "hostname": hostname_facts(ifaces)}
    facts["would_use"] = {role: {**chosen, "interfaces": [{"name": i["name"], "address": i["selected_address"]["address"]}
                                                           for i in chosen["interfaces"]]}
                          for role, chosen in would_use(env, facts).items()}
    master = master_facts(env, ifaces)
    if master is not None:
        facts["master"] = master
    return facts
