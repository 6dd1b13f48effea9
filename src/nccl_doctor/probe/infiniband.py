"""InfiniBand / RoCE devices and ports from ROOT/sys/class/infiniband (no libibverbs needed), and the ports
NCCL's IB transport would use for a given NCCL_IB_HCA.

This is the one reader of /sys/class/infiniband. It reads what every command needs (`env`, `lint` and `check`
through probe.collect(), `topo` through probe.hardware): devices, their PCI function and NUMA node, ports with
state, physical state, rate and link layer, and on RoCE ports the first GID slots (what NCCL_IB_GID_INDEX is
judged against). ib_health.py adds the per-port details only `topo` shows (whole GID tables, error counters,
LIDs, counter sampling) to these same dicts.

NCCL_IB_HCA follows NCCL (src/transport/net_ib/init.cc, parseStringList/matchIfList in src/misc/utils.cc): a
leading `^` excludes, then a leading `=` asks for exact device names (else each entry is a prefix: `mlx5_1` also
selects `mlx5_10`), entries are `device[:port]` separated by commas, at most MAX_IB_DEVS of them, and only
ACTIVE ports with an InfiniBand or Ethernet link layer are used.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .sysfs import names, numbered, read_int, read_text

SYSFS = Path("sys", "class", "infiniband")
MAX_IB_DEVS = 32  # NCCL's MAX_IB_DEVS: parseStringList stops after this many NCCL_IB_HCA entries
GID_SLOTS_BASIC = 16  # GID slots read per RoCE port for collect(); NCCL_IB_GID_INDEX is nearly always below
RATE = re.compile(r"\s*(?P<gbps>[\d.]+) Gb/sec(?: \((?P<width>\d+X)\s*(?P<speed>\w+)?\))?")
NULL_GID = "0000:0000:0000:0000:0000:0000:0000:0000"
USABLE_LINK_LAYERS = ("InfiniBand", "Ethernet")


def sysfs_dir(root: str | os.PathLike[str] = "/") -> Path:
    return Path(root, SYSFS)


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


def read_gids(port_dir: Path, slots: list[int]) -> list[dict[str, Any]]:
    """The non-empty entries among these GID slots, with their RoCE type, net device and IPv4 address."""
    entries = []
    for index in slots:
        gid = read_text(port_dir / "gids" / str(index))
        if not gid or gid == NULL_GID:
            continue
        entries.append({
            "index": index,
            "gid": gid,
            "type": read_text(port_dir / "gid_attrs" / "types" / str(index)),
            "ndev": read_text(port_dir / "gid_attrs" / "ndevs" / str(index)),
            "ipv4": gid_ipv4(gid),
        })
    return entries


def read_port(port_dir: Path) -> dict[str, Any]:
    """One port. RoCE ports also get their first GID slots: `gids`, `gids_read` of `gid_slots` slots."""
    state_code, state = split_state(read_text(port_dir / "state"))
    phys_code, phys = split_state(read_text(port_dir / "phys_state"))
    raw_rate = read_text(port_dir / "rate")
    rate = parse_rate(raw_rate)
    port: dict[str, Any] = {
        "port": int(port_dir.name),
        "state": state, "state_code": state_code,
        "phys_state": phys, "phys_state_code": phys_code,
        "rate": raw_rate, "rate_gbps": rate["gbps"], "width": rate["width"], "speed": rate["speed"],
        "link_layer": read_text(port_dir / "link_layer"),
    }
    if port["link_layer"] == "Ethernet":
        slots = numbered(port_dir / "gids")
        port |= {"gids": read_gids(port_dir, slots[:GID_SLOTS_BASIC]),
                 "gids_read": min(len(slots), GID_SLOTS_BASIC), "gid_slots": len(slots)}
    return port


def pci_address(device_link: Path) -> str | None:
    """The PCI function behind an RDMA device (its `device` symlink), e.g. '0000:0c:00.0'."""
    name = Path(os.path.realpath(device_link)).name
    return name if re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", name) else None


def read_device(dev_dir: Path) -> dict[str, Any]:
    numa = read_int(dev_dir / "device" / "numa_node")
    return {
        "name": dev_dir.name,
        "node_type": read_text(dev_dir / "node_type"),
        "hca_type": read_text(dev_dir / "hca_type"),
        "board_id": read_text(dev_dir / "board_id"),
        "fw_ver": read_text(dev_dir / "fw_ver"),
        "pci": pci_address(dev_dir / "device"),
        "numa_node": numa if numa is not None and numa >= 0 else None,
        "netdevs": names(dev_dir / "device" / "net"),
        "ports": [read_port(dev_dir / "ports" / str(n)) for n in numbered(dev_dir / "ports")],
    }


def read_dev_infiniband(root: str | os.PathLike[str] = "/") -> dict[str, Any]:
    """Whether the verbs device nodes exist (missing in containers started without --device)."""
    directory = Path(root, "dev", "infiniband")
    if not directory.is_dir():
        return {"present": False, "uverbs": []}
    return {"present": True, "uverbs": [n for n in names(directory) if n.startswith("uverbs")]}


def read_devices(root: str | os.PathLike[str] = "/") -> dict[str, Any]:
    """Every RDMA device under ROOT/sys/class/infiniband and ROOT/dev/infiniband. No such directory is a
    fact (no RDMA devices: `devices` is empty), not an error."""
    base = sysfs_dir(root)
    try:
        devices = sorted(os.listdir(base))
    except FileNotFoundError:
        devices = []
    except OSError as exc:
        return {"unavailable": f"cannot list {base}: {exc.strerror}"}
    return {"sysfs": str(base), "devices": [read_device(base / name) for name in devices],
            "dev_infiniband": read_dev_infiniband(root)}


def probe(env: Mapping[str, str], root: str | os.PathLike[str] = "/") -> dict[str, Any]:
    return read_devices(root)


# ---------------------------------------------------------------- NCCL_IB_HCA

@dataclass(frozen=True)
class HcaList:
    """NCCL_IB_HCA as NCCL reads it: `^` (exclude), `=` (exact names), and (name, port) entries; port -1 = any."""

    exclude: bool
    exact: bool
    entries: tuple[tuple[str, int], ...]

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.entries]


def atoi(text: str) -> int:
    """C's atoi: leading blanks, a sign, decimal digits; 0 when there are none."""
    m = re.match(r"[ \t\n\v\f\r]*([+-]?\d+)", text)
    return int(m[1]) if m else 0


def parse_hca(spec: str) -> HcaList:
    """parseStringList after init.cc strips `^` then `=`: comma-separated `name[:port]` entries; an empty name
    is skipped, the port is atoi() of what follows the first ':' (anything after a second ':' is ignored)."""
    exclude = spec.startswith("^")
    spec = spec[1:] if exclude else spec
    exact = spec.startswith("=")
    spec = spec[1:] if exact else spec
    entries = []
    for item in spec.split(","):
        name, colon, port = item.partition(":")
        if name:
            entries.append((name, atoi(port) if colon else -1))
    return HcaList(exclude, exact, tuple(entries[:MAX_IB_DEVS]))


def hca_matches(device: str, port: int | None, spec: str | None) -> bool:
    """Whether NCCL would consider DEVICE port PORT (None: any port) under NCCL_IB_HCA=spec (None: unset):
    matchIfList(device, port, list, exact) XOR the leading '^'. An empty list matches everything, so `^`
    alone excludes every device."""
    if spec is None:
        return True
    hca = parse_hca(spec)
    hit = not hca.entries or any(
        (device == name if hca.exact else device.startswith(name)) and (want == -1 or port is None or want == port)
        for name, want in hca.entries)
    return hit != hca.exclude


def port_usable(port: Mapping[str, Any]) -> bool:
    """NCCL only uses ACTIVE ports whose link layer is InfiniBand or Ethernet (RoCE)."""
    active = port.get("state_code") == 4 or port.get("state") == "ACTIVE"
    return active and port.get("link_layer") in USABLE_LINK_LAYERS


def ib_select_ports(spec: str | None, devices: list[dict]) -> list[dict[str, Any]]:
    """The (device, port) pairs NCCL would use: matching NCCL_IB_HCA, ACTIVE, IB or Ethernet link layer."""
    return [{"device": dev["name"], **port} for dev in devices for port in dev.get("ports", ())
            if hca_matches(dev["name"], port.get("port"), spec) and port_usable(port)]
