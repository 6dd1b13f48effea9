"""probe/infiniband.py: the one reader of /sys/class/infiniband (fake trees), and NCCL_IB_HCA matching checked
against a character-by-character transcription of NCCL's parseStringList/matchIfList with the C library's atoi."""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import re

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from nccl_doctor.probe import infiniband
from test_topo_fakes import FakeHost


def make_sysfs(root, devices):
    for name, ports, netdev in devices:
        dev = root / "sys" / "class" / "infiniband" / name
        (dev / "ports").mkdir(parents=True)
        (dev / "fw_ver").write_text("28.39.1002\n")
        (dev / "node_type").write_text("1: CA\n")
        if netdev:
            (dev / "device" / "net" / netdev).mkdir(parents=True)
        for number, (state, phys, rate, layer) in enumerate(ports, 1):
            port = dev / "ports" / str(number)
            port.mkdir()
            (port / "state").write_text(state + "\n")
            (port / "phys_state").write_text(phys + "\n")
            (port / "rate").write_text(rate + "\n")
            (port / "link_layer").write_text(layer + "\n")
    return root


ACTIVE = ("4: ACTIVE", "5: LinkUp", "200 Gb/sec (4X HDR)", "InfiniBand")
DOWN = ("1: DOWN", "3: Disabled", "10 Gb/sec (4X SDR)", "InfiniBand")
ROCE = ("4: ACTIVE", "5: LinkUp", "100 Gb/sec (2X HDR)", "Ethernet")


def test_infiniband_from_sysfs(tmp_path):
    root = make_sysfs(tmp_path, [("mlx5_0", [ACTIVE], "ib0"), ("mlx5_1", [DOWN, ROCE], None),
                                 ("mlx5_10", [ACTIVE], None)])
    facts = infiniband.probe({}, root=root)
    dev = facts["devices"][0]
    assert dev["name"] == "mlx5_0" and dev["netdevs"] == ["ib0"] and dev["fw_ver"] == "28.39.1002"
    assert dev["ports"][0] == {"port": 1, "state": "ACTIVE", "state_code": 4, "phys_state": "LinkUp",
                               "phys_state_code": 5, "rate": "200 Gb/sec (4X HDR)", "rate_gbps": 200.0,
                               "width": "4X", "speed": "HDR", "link_layer": "InfiniBand"}
    devices = facts["devices"]
    pick = lambda spec: [(p["device"], p["port"]) for p in infiniband.ib_select_ports(spec, devices)]  # noqa: E731
    assert pick(None) == [("mlx5_0", 1), ("mlx5_1", 2), ("mlx5_10", 1)]
    assert pick("mlx5_1") == [("mlx5_1", 2), ("mlx5_10", 1)]  # prefix: mlx5_1 also selects mlx5_10
    assert pick("=mlx5_1") == [("mlx5_1", 2)]
    assert pick("mlx5_1:1") == [("mlx5_10", 1)]  # port 1 of mlx5_1 is DOWN
    assert pick("^mlx5_1") == [("mlx5_0", 1)]
    assert pick("^=mlx5_1") == [("mlx5_0", 1), ("mlx5_10", 1)]
    assert pick("mlx5_2") == []
    assert facts["dev_infiniband"] == {"present": False, "uverbs": []}


def test_no_infiniband_is_a_fact_not_an_error(tmp_path):
    assert infiniband.probe({}, root=tmp_path) == {"sysfs": str(tmp_path / "sys/class/infiniband"), "devices": [],
                                                   "dev_infiniband": {"present": False, "uverbs": []}}


def test_devices_carry_pci_numa_and_the_first_gid_slots_of_roce_ports(tmp_path):
    host = FakeHost(tmp_path)
    host.pci("0000:00:03.0")
    host.pci("0000:00:03.0", "0000:06:00.0", vendor="0x15b3", cls="0x020000", numa=1)
    many = {i: (f"0000:0000:0000:0000:0000:ffff:0a00:{i:04x}", "RoCE v2", "eth2") for i in range(200)}
    host.rdma("mlx5_0", "0000:06:00.0", {1: {"layer": "Ethernet", "gids": many}, 2: {}})
    dev = infiniband.read_devices(tmp_path)["devices"][0]
    assert (dev["pci"], dev["numa_node"], dev["hca_type"]) == ("0000:06:00.0", 1, "MT4129")
    roce, ib = dev["ports"]
    assert roce["gid_slots"] == 200 and roce["gids_read"] == infiniband.GID_SLOTS_BASIC
    assert [g["index"] for g in roce["gids"]] == list(range(infiniband.GID_SLOTS_BASIC))
    assert roce["gids"][10]["ipv4"] == "10.0.0.10"
    assert "gids" not in ib and "counters" not in roce  # IB GIDs and counters are topo's (ib_health)
    assert len(json.dumps(dev)) < 4000


@pytest.mark.parametrize("text, expected", [("4: ACTIVE", (4, "ACTIVE")), ("ACTIVE", (None, "ACTIVE")),
                                            (None, (None, None))])
def test_port_state_parsing(text, expected):
    assert infiniband.split_state(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("400 Gb/sec (4X NDR)", (400.0, "4X", "NDR")),
    ("56 Gb/sec (4X FDR)", (56.0, "4X", "FDR")),
    ("2.5 Gb/sec (1X SDR)", (2.5, "1X", "SDR")),
    ("25 Gb/sec (1X EDR)", (25.0, "1X", "EDR")),
    ("garbage", (None, None, None)),
])
def test_rate_formats_of_the_kernel(text, expected):
    rate = infiniband.parse_rate(text)
    assert (rate["gbps"], rate["width"], rate["speed"]) == expected


# ---------------------------------------------------------------- NCCL_IB_HCA

@pytest.mark.parametrize("spec, device, port, expected", [
    (None, "mlx5_0", 1, True), ("mlx5_0", "mlx5_0", 1, True), ("mlx5_1", "mlx5_10", 1, True),
    ("=mlx5_1", "mlx5_10", 1, False), ("^mlx5_0", "mlx5_0", 1, False), ("^mlx5_0", "mlx5_2", 1, True),
    ("mlx5_0:2", "mlx5_0", 1, False), ("mlx5_0:1,mlx5_3:1", "mlx5_3", 1, True), ("^=mlx5_1", "mlx5_10", 1, True),
    ("", "mlx5_0", 1, True), ("^", "mlx5_0", 1, False),  # an empty list matches all, so `^` alone excludes all
    ("mlx5_0:", "mlx5_0", 1, False), ("mlx5_0:x", "mlx5_0", 1, False),  # atoi gives port 0
    ("mlx5_0:1:2", "mlx5_0", 1, True), (" mlx5_0", "mlx5_0", 1, False),  # no trimming
    ("=mlx5_0,=mlx5_1", "mlx5_1", 1, False),  # '=' counts only at the start of the whole value
    ("mlx5_0:2", "mlx5_0", None, True),  # a NIC of a saved matrix: its ports are unknown
])
def test_nccl_ib_hca_semantics(spec, device, port, expected):
    assert infiniband.hca_matches(device, port, spec) is expected


LIBC = ctypes.CDLL(ctypes.util.find_library("c"))


def nccl_parse_string_list(string: str, max_list: int = infiniband.MAX_IB_DEVS) -> list[tuple[str, int]]:
    """src/misc/utils.cc parseStringList, transcribed character by character (the C string ends in NUL)."""
    text = string + "\0"
    entries, prefix, i = [], "", 0
    while True:
        c = text[i]
        if c == ":":
            if prefix:
                entries.append((prefix, LIBC.atoi(text[i + 1:-1].encode())))
                prefix = ""
            while c not in (",", "\0"):
                i += 1
                c = text[i]
        elif c in (",", "\0"):
            if prefix:
                entries.append((prefix, -1))
                prefix = ""
        else:
            prefix += c
        i += 1
        if not (len(entries) < max_list and c != "\0"):
            return entries


def nccl_selects(device: str, port: int, spec: str) -> bool:
    """init.cc: strip '^' then '='; matchIfList(name, port, list, exact) ^ searchNot."""
    search_not = spec.startswith("^")
    spec = spec[1:] if search_not else spec
    exact = spec.startswith("=")
    entries = nccl_parse_string_list(spec[1:] if exact else spec)
    hit = not entries or any((device == name if exact else device[:len(name)] == name)
                             and (want == -1 or want == port) for name, want in entries)
    return hit != search_not


@settings(max_examples=400, deadline=None)
@given(spec=st.text(alphabet="mlx5_01:,^= x+-", max_size=40),
       device=st.sampled_from(["mlx5_0", "mlx5_1", "mlx5_10", "mlx5_11", "mlx4_0", "=mlx5_1"]),
       port=st.integers(min_value=1, max_value=2))
def test_hca_matching_is_nccls(spec, device, port):
    assume(not re.search(r"\d{9}", spec))  # C's atoi overflows there
    assert infiniband.hca_matches(device, port, spec) == nccl_selects(device, port, spec)
    rest = spec[1:] if spec.startswith("^") else spec
    rest = rest[1:] if rest.startswith("=") else rest
    assert list(infiniband.parse_hca(spec).entries) == nccl_parse_string_list(rest)


def test_at_most_max_ib_devs_entries_count():
    spec = ",".join(f"x{i}" for i in range(40)) + ",mlx5_0"
    assert not infiniband.hca_matches("mlx5_0", 1, spec) and not nccl_selects("mlx5_0", 1, spec)
