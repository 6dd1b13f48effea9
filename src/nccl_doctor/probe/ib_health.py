"""InfiniBand/RoCE port health from /sys/class/infiniband: state, rate, GID table, error counters.

Every reader takes `root` (default "/"), the directory that holds sys/ and dev/, so tests point it
at a fake tree. Facts only: judging happens in rules/topology.py.
"""

from __future__ import annotations

import ipaddress
import os
import re
import time
from pathlib import Path
from typing import Any, Callable

RATE = re.compile(r"(?P<gbps>[\d.]+) Gb/sec(?: \((?P<width>\d+X)\s*(?P<speed>\w+)?\))?")
NULL_GID = "0000:0000:0000:0000:0000:0000:0000:0000"
MAX_GIDS = 256  # the kernel's default GID table size for RoCE; IB tables are smaller


def read_text(path: Path) -> str | None:
    """A sysfs attribute, stripped; None when missing or unreadable (EINVAL on empty GID slots)."""
    try:
        return path.read_text(errors="replace").strip()
    except OSError:
        return None


def read_int(path: Path) -> int | None:
    text = read_text(path)
    try:
        return int(text, 0) if text is not None else None
    except ValueError:
        return None


def split_state(text: str | None) -> tuple[int | None, str | None]:
    """'4: ACTIVE' -> (4, 'ACTIVE'); the kernel prints "%d: %s"."""
    if not text:
        return None, None
    code, _, name = text.partition(":")
    try:
        return int(code), name.strip() or None
    except ValueError:
        return None, text


def parse_rate(text: str | None) -> dict[str, Any]:
    """'400 Gb/sec (4X NDR)' -> {'gbps': 400.0, 'width': '4X', 'speed': 'NDR'}."""
    m = RATE.match(text or "")
    if not m:
        return {"gbps": None, "width": None, "speed": None}
    return {"gbps": float(m["gbps"]), "width": m["width"], "speed": m["speed"]}


def gid_ipv4(gid: str) -> str | None:
    """The IPv4 address of an IPv4-mapped GID (::ffff:a.b.c.d), which RoCE v2 routes on."""
    try:
        mapped = ipaddress.IPv6Address(gid).ipv4_mapped
    except ValueError:
        return None
    return str(mapped) if mapped else None


def read_gids(port: Path) -> list[dict[str, Any]]:
    """Non-empty GID table entries with their RoCE type and net device."""
    gids_dir = port / "gids"
    if not gids_dir.is_dir():
        return []
    entries = []
    indices = sorted(int(n) for n in os.listdir(gids_dir) if n.isdigit())
    for index in indices[:MAX_GIDS]:
        gid = read_text(gids_dir / str(index))
        if not gid or gid == NULL_GID:
            continue
        entries.append({
            "index": index,
            "gid": gid,
            "type": read_text(port / "gid_attrs" / "types" / str(index)),
            "ndev": read_text(port / "gid_attrs" / "ndevs" / str(index)),
            "ipv4": gid_ipv4(gid),
        })
    return entries


def read_counters(directory: Path) -> dict[str, int]:
    if not directory.is_dir():
        return {}
    values = {}
    for name in sorted(os.listdir(directory)):
        value = read_int(directory / name)
        if value is not None:
            values[name] = value
    return values


def read_port(port: Path) -> dict[str, Any]:
    state_code, state = split_state(read_text(port / "state"))
    phys_code, phys = split_state(read_text(port / "phys_state"))
    raw_rate = read_text(port / "rate")
    rate = parse_rate(raw_rate)
    return {
        "state": state,
        "state_code": state_code,
        "phys_state": phys,
        "phys_state_code": phys_code,
        "rate": raw_rate,
        "rate_gbps": rate["gbps"],
        "width": rate["width"],
        "speed": rate["speed"],
        "link_layer": read_text(port / "link_layer"),
        "lid": read_text(port / "lid"),
        "sm_lid": read_text(port / "sm_lid"),
        "gids": read_gids(port),
        "counters": read_counters(port / "counters"),
        "hw_counters": read_counters(port / "hw_counters"),
    }


def pci_address(device_link: Path) -> str | None:
    """The PCI function behind an RDMA device (its `device` symlink), e.g. '0000:0c:00.0'."""
    try:
        name = Path(os.path.realpath(device_link)).name
    except OSError:
        return None
    return name if re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", name) else None


def read_device(dev: Path) -> dict[str, Any]:
    ports_dir = dev / "ports"
    ports = sorted(os.listdir(ports_dir), key=lambda p: int(p) if p.isdigit() else 0) if ports_dir.is_dir() else []
    return {
        "pci": pci_address(dev / "device"),
        "numa_node": read_int(dev / "device" / "numa_node"),
        "hca_type": read_text(dev / "hca_type"),
        "board_id": read_text(dev / "board_id"),
        "fw_ver": read_text(dev / "fw_ver"),
        "ports": {p: read_port(ports_dir / p) for p in ports},
    }


def read_dev_infiniband(root: str | os.PathLike[str]) -> dict[str, Any]:
    """Whether the verbs device nodes exist (missing in containers started without --device)."""
    directory = Path(root, "dev", "infiniband")
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return {"present": False, "uverbs": []}
    return {"present": True, "uverbs": [n for n in names if n.startswith("uverbs")]}


def read_ib_ports(root: str | os.PathLike[str] = "/") -> dict[str, Any]:
    """Every RDMA device and port under ROOT/sys/class/infiniband, plus ROOT/dev/infiniband."""
    base = Path(root, "sys", "class", "infiniband")
    try:
        names = sorted(os.listdir(base))
    except FileNotFoundError:
        names = []
    except OSError as exc:
        return {"unavailable": f"cannot list {base}: {exc.strerror}"}
    return {
        "sysfs": str(base),
        "devices": {name: read_device(base / name) for name in names},
        "dev_infiniband": read_dev_infiniband(root),
    }


def counter_snapshot(root: str | os.PathLike[str]) -> dict[str, dict[str, int]]:
    """{'mlx5_0/1': {counter: value}} for standard and driver counters of every port."""
    base = Path(root, "sys", "class", "infiniband")
    snapshot: dict[str, dict[str, int]] = {}
    for dev in sorted(os.listdir(base)) if base.is_dir() else []:
        ports_dir = base / dev / "ports"
        for port in sorted(os.listdir(ports_dir)) if ports_dir.is_dir() else []:
            snapshot[f"{dev}/{port}"] = {
                **read_counters(ports_dir / port / "counters"),
                **read_counters(ports_dir / port / "hw_counters"),
            }
    return snapshot


def sample_ib_counters(root: str | os.PathLike[str] = "/", seconds: float = 10.0,
                       sleep: Callable[[float], None] = time.sleep) -> dict[str, Any]:
    """Read every port counter twice, `seconds` apart; report the counters that grew.

    PMA counters saturate rather than wrap, so a counter that went down was reset in between
    (perfquery -R) and is reported as 0.
    """
    before = counter_snapshot(root)
    sleep(seconds)
    after = counter_snapshot(root)
    deltas = {}
    for port, values in after.items():
        grown = {name: value - before[port][name] for name, value in values.items()
                 if name in before.get(port, {}) and value > before[port][name]}
        if grown:
            deltas[port] = grown
    return {"seconds": seconds, "ports": sorted(after), "deltas": deltas}
