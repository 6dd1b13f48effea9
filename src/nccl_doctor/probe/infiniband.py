"""InfiniBand / RoCE devices and ports from /sys/class/infiniband (no libibverbs needed).

Also `ib_select_ports`: the ports NCCL's IB transport would use given NCCL_IB_HCA, following
src/transport/net_ib/init.cc: a leading `^` excludes, then a leading `=` means exact device names (else
prefixes: `mlx5_1` also selects `mlx5_10`), entries are `device[:port]`, and only ACTIVE ports with an
InfiniBand or Ethernet link layer are used.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

SYSFS = "/sys/class/infiniband"
MAX_IB_DEVS = 32


def _read(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace").strip()
    except OSError:
        return None


def _rate_gbps(rate: str | None) -> float | None:
    m = re.match(r"\s*([\d.]+)\s*Gb/sec", rate or "")
    return float(m.group(1)) if m else None


def _state(text: str | None) -> tuple[int | None, str | None]:
    """'4: ACTIVE' -> (4, 'ACTIVE')."""
    if not text:
        return None, None
    code, _, word = text.partition(":")
    return (int(code) if code.strip().isdigit() else None), (word.strip() or text)


def port_facts(port_dir: Path) -> dict[str, Any]:
    state_code, state = _state(_read(port_dir / "state"))
    phys_code, phys = _state(_read(port_dir / "phys_state"))
    rate = _read(port_dir / "rate")
    return {
        "port": int(port_dir.name) if port_dir.name.isdigit() else port_dir.name,
        "state": state, "state_code": state_code,
        "phys_state": phys, "phys_state_code": phys_code,
        "rate": rate, "rate_gbps": _rate_gbps(rate),
        "link_layer": _read(port_dir / "link_layer"),
    }


def device_facts(dev_dir: Path) -> dict[str, Any]:
    ports_dir = dev_dir / "ports"
    ports = sorted(ports_dir.iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else 0) \
        if ports_dir.is_dir() else []
    net_dir = dev_dir / "device" / "net"
    return {
        "name": dev_dir.name,
        "node_type": _read(dev_dir / "node_type"),
        "fw_ver": _read(dev_dir / "fw_ver"),
        "board_id": _read(dev_dir / "board_id"),
        "netdevs": sorted(os.listdir(net_dir)) if net_dir.is_dir() else [],
        "ports": [port_facts(p) for p in ports],
    }


def probe(env: Mapping[str, str], sysfs: str = SYSFS) -> dict[str, Any]:
    root = Path(sysfs)
    if not root.is_dir():
        return {"unavailable": f"no {sysfs}: no RDMA devices, or the driver (or the container) does not expose them"}
    devices = [device_facts(d) for d in sorted(root.iterdir(), key=lambda d: d.name)]
    return {"devices": devices, "dev_infiniband": os.path.isdir("/dev/infiniband")}


def _hca_list(spec: str) -> tuple[bool, bool, list[tuple[str, int | None]]]:
    exclude = spec.startswith("^")
    spec = spec[1:] if exclude else spec
    exact = spec.startswith("=")
    spec = spec[1:] if exact else spec
    entries = []
    for entry in spec.split(","):
        name, _, port = entry.partition(":")
        if name:
            entries.append((name[:63], int(port.split(":")[0]) if port.split(":")[0].isdigit() else None))
    return exclude, exact, entries[:MAX_IB_DEVS]


def hca_matches(device: str, port: int, spec: str | None) -> bool:
    """NCCL's matchIfList(device, port, NCCL_IB_HCA list, exact) XOR the leading '^'."""
    if not spec:
        return True
    exclude, exact, entries = _hca_list(spec)
    hit = not entries or any((device == name if exact else device.startswith(name)) and (p is None or p == port)
                             for name, p in entries)
    return hit != exclude


def ib_select_ports(spec: str | None, devices: list[dict]) -> list[dict[str, Any]]:
    """The (device, port) pairs NCCL would use: matching NCCL_IB_HCA, ACTIVE, IB or Ethernet link layer."""
    selected = []
    for dev in devices:
        for port in dev.get("ports", ()):
            if not hca_matches(dev["name"], port.get("port"), spec):
                continue
            if port.get("state_code") != 4 and port.get("state") != "ACTIVE":
                continue
            if port.get("link_layer") not in ("InfiniBand", "Ethernet"):
                continue
            selected.append({"device": dev["name"], **port})
    return selected
