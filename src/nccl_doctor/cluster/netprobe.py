"""Host-to-host reachability on the addresses NCCL and Gloo would use: listeners and probes.

One rank per host (its leader) listens on every candidate address of its host: the interfaces NCCL
would pick under NCCL_SOCKET_IFNAME, the ones Gloo would pick (GLOO_SOCKET_IFNAME, or the address the
host name resolves to), and every other interface that is up, so that a working alternative can be
suggested. The other leaders connect with a short deadline and exchange one line naming the run and
the host, so an address that leads to a different machine (docker0, a copied IP) does not count.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Mapping

PROBE_TIMEOUT = 1.5  # seconds per connection attempt between hosts
MAX_PARALLEL = 64
HELLO, REPLY = b"nccl-doctor?", b"nccl-doctor!"


def candidates(env: Mapping[str, str], facts: Mapping[str, Any]) -> list[dict[str, Any]]:
    """(iface, address, roles) this host should listen on; roles say who would use the address."""
    from ..probe.network import would_use

    network = facts.get("network") or {}
    ifaces = network.get("interfaces") or []
    netmasks = {(i["name"], a["address"]): a.get("netmask") for i in ifaces for a in i.get("addresses", [])}
    found: dict[tuple[str, str], dict[str, Any]] = {}

    def add(iface: str, address: str, role: str | None) -> None:
        if not _usable(address):
            return
        entry = found.setdefault((iface, address), {"iface": iface, "address": address, "roles": [],
                                                    "netmask": netmasks.get((iface, address))})
        if role and role not in entry["roles"]:
            entry["roles"].append(role)

    for role, chosen in would_use(env, network).items():
        for iface in chosen["interfaces"][:1]:  # the first one carries bootstrap and rendezvous traffic
            add(iface["name"], iface["selected_address"]["address"], role)
    for iface in ifaces:
        if iface.get("up") and iface.get("running", True) and not iface.get("loopback"):
            for addr in iface.get("addresses", []):
                if addr.get("family") == "AF_INET":
                    add(iface["name"], addr["address"], None)
    return list(found.values())


def _usable(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return not ip.is_link_local and not ip.is_multicast and not ip.is_unspecified


@dataclass
class Listeners:
    """Sockets accepting probes until closed; answers each hello with this host's name."""

    host: str
    token: str
    entries: list[dict[str, Any]] = field(default_factory=list)
    _socks: list[socket.socket] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def open(self, wanted: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for entry in wanted:
            family = socket.AF_INET6 if ":" in entry["address"] else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM)
            try:
                sock.bind((entry["address"], 0))
                sock.listen(64)
                sock.settimeout(0.2)
            except OSError as exc:
                sock.close()
                self.entries.append({**entry, "port": None, "error": exc.strerror or str(exc)})
                continue
            self._socks.append(sock)
            self.entries.append({**entry, "port": sock.getsockname()[1]})
            threading.Thread(target=self._serve, args=(sock,), daemon=True, name="nccl-doctor-listen").start()
        return self.entries

    def _serve(self, sock: socket.socket) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            with conn:
                conn.settimeout(PROBE_TIMEOUT)
                try:
                    if _read_line(conn).startswith(HELLO + self.token.encode()):
                        conn.sendall(REPLY + self.host.encode() + b"\n")
                except OSError:
                    pass

    def close(self) -> None:
        self._stop.set()
        for sock in self._socks:
            sock.close()


def _read_line(conn: socket.socket, limit: int = 512) -> bytes:
    data = b""
    while not data.endswith(b"\n") and len(data) < limit:
        chunk = conn.recv(limit - len(data))
        if not chunk:
            break
        data += chunk
    return data


def probe_one(host: str, target: str, listener: Mapping[str, Any], token: str) -> dict[str, Any]:
    """Connect to one listener of `target` and check that `target` answers."""
    result = {"to": target, "iface": listener["iface"], "address": listener["address"], "ok": False}
    if not listener.get("port"):
        return {**result, "error": f"nothing listens there ({listener.get('error', 'not opened')})"}
    try:
        with socket.create_connection((listener["address"], listener["port"]), timeout=PROBE_TIMEOUT) as conn:
            conn.settimeout(PROBE_TIMEOUT)
            conn.sendall(HELLO + token.encode() + b" " + host.encode() + b"\n")
            answer = _read_line(conn)
    except socket.timeout:
        return {**result, "error": f"timed out after {PROBE_TIMEOUT:g} s (link down, firewall or no route)"}
    except OSError as exc:
        return {**result, "error": exc.strerror or str(exc)}
    if not answer.startswith(REPLY):
        return {**result, "error": "something else answers on that address"}
    answered = answer[len(REPLY):].decode(errors="replace").strip()
    if answered != target:
        return {**result, "error": f"the address leads to {answered}, not {target}"}
    return {**result, "ok": True}


def probe_hosts(host: str, targets: Mapping[str, list[dict[str, Any]]], token: str) -> list[dict[str, Any]]:
    """Probe every listener of every other host, in parallel, each attempt bounded."""
    jobs = [(target, listener) for target, listeners in sorted(targets.items()) if target != host
            for listener in listeners]
    if not jobs:
        return []
    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL, len(jobs)), thread_name_prefix="nccl-doctor-probe") as pool:
        return list(pool.map(lambda job: probe_one(host, job[0], job[1], token), jobs))
