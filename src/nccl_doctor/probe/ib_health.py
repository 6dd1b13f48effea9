"""InfiniBand/RoCE port details for `topo`: the whole GID table, error counters, LIDs, and counter sampling.

Builds on probe/infiniband.py, the one reader of /sys/class/infiniband: `read_ib_ports` takes its device and
port dicts and adds these details to each port (reading only the files infiniband.py did not). Kept out of
probe.collect() because a RoCE GID table has up to 256 slots and every port dozens of counters. Facts only:
judging happens in rules/hardware.py.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Callable

from . import infiniband
from .sysfs import names, numbered, read_int, read_text

MAX_GIDS = 256  # the kernel's default GID table size for RoCE; IB tables are smaller


def read_counters(directory: Path) -> dict[str, int]:
    values = {}
    for name in names(directory):
        value = read_int(directory / name)
        if value is not None:
            values[name] = value
    return values


def port_details(port_dir: Path, port: dict[str, Any]) -> dict[str, Any]:
    """LIDs, the GID slots infiniband.read_port did not read, and the standard and driver error counters."""
    slots = numbered(port_dir / "gids")
    read = slots[:MAX_GIDS]
    done = port.get("gids_read", 0)
    return {
        "lid": read_text(port_dir / "lid"),
        "sm_lid": read_text(port_dir / "sm_lid"),
        "gids": port.get("gids", []) + infiniband.read_gids(port_dir, read[done:]),
        "gids_read": len(read),
        "gid_slots": len(slots),
        "counters": read_counters(port_dir / "counters"),
        "hw_counters": read_counters(port_dir / "hw_counters"),
    }


def read_ib_ports(root: str | os.PathLike[str] = "/", ib: dict[str, Any] | None = None) -> dict[str, Any]:
    """infiniband.read_devices(root) (or the `ib` already read from it) with every port's details added."""
    ib = infiniband.read_devices(root) if ib is None else ib
    if "unavailable" in ib:
        return ib
    base = infiniband.sysfs_dir(root)
    devices = [{**dev, "ports": [{**port, **port_details(base / dev["name"] / "ports" / str(port["port"]), port)}
                                 for port in dev["ports"]]}
               for dev in ib["devices"]]
    return {**ib, "devices": devices}


def counter_snapshot(root: str | os.PathLike[str]) -> dict[str, dict[str, int]]:
    """{'mlx5_0/1': {counter: value}} for standard and driver counters of every port."""
    base = infiniband.sysfs_dir(root)
    snapshot: dict[str, dict[str, int]] = {}
    for dev in names(base):
        for port in numbered(base / dev / "ports"):
            port_dir = base / dev / "ports" / str(port)
            snapshot[f"{dev}/{port}"] = {**read_counters(port_dir / "counters"),
                                         **read_counters(port_dir / "hw_counters")}
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
