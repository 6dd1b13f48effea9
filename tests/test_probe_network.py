"""Interface selection with NCCL's and Gloo's exact rules, routes, listeners (loopback only)."""

from __future__ import annotations

import errno
import os
import socket
import time

import pytest

from nccl_doctor.probe import network
from nccl_doctor.probe.network import gloo_select_interfaces, nccl_select_interfaces, route_to


def iface(name, *addrs, up=True, running=None):
    fams = [{"family": "AF_INET6" if ":" in a else "AF_INET", "address": a, "netmask": None} for a in addrs]
    return {"name": name, "up": up, "running": up if running is None else running, "mtu": 1500, "speed_mbps": None,
            "addresses": fams}


IFACES = [
    iface("lo", "127.0.0.1", "::1"),
    iface("eth0", "10.0.0.2", "fe80::1"),
    iface("eth1", "10.9.0.2", up=False),
    iface("eth10", "10.1.0.2"),
    iface("ib0", "192.168.0.2"),
    iface("ib1", "192.168.1.2", running=False),
    iface("docker0", "172.17.0.1"),
    iface("virbr0", "192.168.122.1"),
    iface("enp1s0", "fd00::2"),
    iface("eno1"),
]


def names(spec, interfaces=IFACES, family=None):
    return [i["name"] for i in nccl_select_interfaces(spec, interfaces, family)]


@pytest.mark.parametrize("spec, expected", [
    (None, ["ib0"]),  # ib* first; ib1 is not RUNNING
    ("", ["ib0"]), ("e", ["ib0"]), ("^", ["ib0"]),  # shorter than 2 characters: ignored
    ("eth", ["eth0", "eth10"]),  # prefixes; eth1 is down
    ("eth0", ["eth0"]),
    ("eth1", ["eth10"]),  # a prefix: eth1 itself is down, eth10 matches
    ("=eth1", []),  # exact name
    ("=eth0,=eth10", ["eth0"]),  # '=' only counts at the start: the second entry is literally '=eth10'
    ("=eth0,eth10", ["eth0", "eth10"]),
    ("^eth,ib", ["lo", "docker0", "virbr0", "enp1s0"]),  # IPv4 interfaces first, then IPv6-only ones
    ("^=eth1", ["lo", "eth0", "eth10", "ib0", "docker0", "virbr0", "enp1s0"]),
    ("^=", []),  # an empty list matches everything, so excluding it leaves nothing
    ("eth0:1234", ["eth0"]),  # ':port' is parsed and ignored
    ("eth0,,ib", ["eth0", "ib0"]),
    ("docker", ["docker0"]),
])
def test_nccl_matching_rules(spec, expected):
    assert names(spec) == expected


def test_nccl_default_order_falls_back():
    no_ib = [i for i in IFACES if not i["name"].startswith("ib")]
    assert names(None, no_ib) == ["eth0", "eth10", "enp1s0"]  # anything but docker/lo/virbr
    assert names(None, [IFACES[0], IFACES[6], IFACES[7]]) == ["docker0"]  # then docker
    assert names(None, [IFACES[0], IFACES[7]]) == ["lo"]  # then lo
    assert names(None, [IFACES[7]]) == ["virbr0"]  # then virbr
    assert names(None, [IFACES[2], IFACES[9]]) == []


def test_nccl_family_and_address_choice():
    assert names(None, family="AF_INET6") == ["eth0", "enp1s0"]  # no IPv6 on ib*; ::1 is skipped
    assert names("^lo", family="AF_INET") == ["eth0", "eth10", "ib0", "docker0", "virbr0"]
    assert names("enp", family="bogus") == ["enp1s0"]  # any other value means either family
    chosen = nccl_select_interfaces("eth0", IFACES)[0]
    assert chosen["selected_address"]["address"] == "10.0.0.2" and chosen["mtu"] == 1500


def test_nccl_returns_at_most_16_interfaces():
    many = [iface(f"eth{i}", f"10.0.{i}.1") for i in range(20)]
    assert len(names("eth", many)) == 16


@pytest.mark.parametrize("spec, expected", [
    (None, []), ("e", []), ("eth0", ["eth0"]), ("eth", []), ("eth0,ib0", ["eth0", "ib0"]),
    ("eth1", ["eth1"]),  # Gloo does not check that the interface is up
    ("^lo", []), ("=eth0", []), ("eno1", []),  # no address
    ("enp1s0", ["enp1s0"]),
])
def test_gloo_takes_exact_names(spec, expected):
    assert [i["name"] for i in gloo_select_interfaces(spec, IFACES)] == expected


def test_interfaces_of_this_host_are_well_formed():
    found = network.interfaces()
    assert any(i["name"] == "lo" or i["loopback"] for i in found)
    for i in found:
        assert set(i) >= {"name", "up", "running", "mtu", "speed_mbps", "addresses"}
        assert all(a["family"] in ("AF_INET", "AF_INET6") and "%" not in a["address"] for a in i["addresses"])


def test_route_to_loopback():
    route = route_to("127.0.0.1")
    assert route["interface"] in ("lo", "lo0") and route["local"] and route["loopback"]
    assert route["source_address"] == "127.0.0.1"


def test_route_to_unresolvable_host():
    route = route_to("no-such-host.invalid")
    assert route["error"] in ("unresolvable", "timeout") and "unavailable" in route


def test_resolution_is_bounded(monkeypatch):
    monkeypatch.setattr(network, "RESOLVE_TIMEOUT_S", 0.2)
    monkeypatch.setattr(network.socket, "getaddrinfo", lambda *a, **k: time.sleep(60) or [])
    start = time.monotonic()
    route = route_to("slow.example")
    assert route["error"] == "timeout" and time.monotonic() - start < 30


def test_route_without_a_route(monkeypatch):
    class NoRoute(socket.socket):
        def connect(self, address):
            raise OSError(errno.ENETUNREACH, "Network is unreachable")

    monkeypatch.setattr(network.socket, "socket", NoRoute)
    route = route_to("127.0.0.1", ifaces=IFACES)
    assert route["error"] == "no-route" and "Network is unreachable" in route["unavailable"]


def test_master_facts_see_a_local_listener():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        facts = network.master_facts({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}, network.interfaces())
    assert facts["route"]["local"] is True
    assert any(entry["pid"] in (os.getpid(), None) for entry in facts["listeners"])
    assert network.master_facts({}, []) is None
    assert "listeners" not in network.master_facts({"MASTER_PORT": "99999"}, [])


def test_hostname_facts():
    host = network.hostname_facts(network.interfaces())
    assert host["name"] == socket.gethostname()
    assert "addresses" in host or "unavailable" in host
