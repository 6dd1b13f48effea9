"""GPU/NIC topology: the `nvidia-smi topo -m` matrix (a saved file or a live run), or the same matrix
derived from the PCI tree in sysfs plus NVLink counts from NVML; and the PCIe facts around it (link
speed and width, ACS on switch ports, IOMMU mode).

probe/hardware.py gathers these with the GPU, NVLink and InfiniBand readings; rules/hardware.py
judges them.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from functools import cache
from os.path import commonprefix
from pathlib import Path
from typing import Any

from ..catalog import load_toml
from .sysfs import read_int, read_text

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
CELL = re.compile(r"^(X|SYS|SOC|NODE|PHB|PXB|PIX|NV\d+)$")
GPU_LABEL = re.compile(r"^GPU\d+$")
NIC_LEGEND = re.compile(r"^\s*(NIC\d+):\s*(\S+)")
AFFINITY_COLUMNS = {"CPU Affinity": "cpu", "NUMA Affinity": "numa", "GPU NUMA ID": "gpu_numa_id"}
BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
HOST_BRIDGE = re.compile(r"^pci[0-9a-f]{4}:[0-9a-f]{2}$")
SMI_TIMEOUT_S = 15.0


@cache
def knowledge() -> dict[str, Any]:
    """catalog/hardware.toml: distance order, PCIe generations, counters, Xids, throttle reasons."""
    return load_toml("hardware.toml")


def normalize_cell(cell: str) -> str:
    return knowledge()["distance"]["aliases"].get(cell, cell)


def distance_rank(cell: str) -> int:
    """Position in X < NV# < PIX < PXB < PHB < NODE < SYS (lower is closer)."""
    order = knowledge()["distance"]["order"]
    cell = normalize_cell(cell)
    return order.index("NV") if cell.startswith("NV") else order.index(cell)


# ---------------------------------------------------------------- nvidia-smi topo -m text

def split_labels(token: str) -> list[str]:
    """Header labels, also when a terminal copy lost the tabs between them ('GPU0GPU1mlx5_0')."""
    return re.findall(r"GPU\d+|.+?(?=GPU\d|$)", token)


def is_header(tokens: list[str]) -> bool:
    return bool(tokens) and tokens[0].startswith("GPU0") and (len(tokens) == 1 or not CELL.match(tokens[1]))


def header_columns(line: str) -> tuple[list[str], list[str]]:
    """(device labels, affinity column keys) of the header line, in order."""
    positions = sorted((line.find(name), key) for name, key in AFFINITY_COLUMNS.items() if name in line)
    end = positions[0][0] if positions else len(line)
    labels = [label for token in line[:end].split() for label in split_labels(token)]
    return labels, [key for _, key in positions]


def legend_style(text: str, cells: list[str]) -> str:
    if "SOC" in cells or re.search(r"^\s*SOC\s+=", text, re.M):
        return "old"
    if re.search(r"^\s*(NODE|SYS)\s+=", text, re.M):
        return "current"
    return "none"


def parse_smi_topo(text: str) -> dict[str, Any]:
    """Parse `nvidia-smi topo -m` output (current and pre-2018 layouts, tabs or spaces, ANSI or not).

    Returns {"legend", "gpus", "nics" (label -> RDMA device), "matrix" (row -> column -> class, SOC
    read as SYS), "affinity" (GPU -> cpu/numa/gpu_numa_id), "incomplete" (labels whose row is missing
    or cut short, as in pasted excerpts)}. Raises ValueError when there is no matrix header.
    """
    lines = ANSI.sub("", text).replace("\r", "").splitlines()
    start = next((i for i, line in enumerate(lines) if is_header(line.split())), None)
    if start is None:
        first = next((line.strip() for line in lines if line.strip()), "empty input")
        raise ValueError(f"no `nvidia-smi topo -m` matrix header (GPU0 GPU1 ... CPU Affinity) found; "
                         f"the text begins with: {first[:80]!r}")
    labels, affinity_keys = header_columns(lines[start])
    matrix: dict[str, dict[str, str]] = {}
    affinity: dict[str, dict[str, str | None]] = {}
    incomplete: list[str] = []
    raw_cells: list[str] = []
    for line in lines[start + 1:]:
        tokens = line.split()
        if tokens and tokens[0].startswith("Legend"):
            break
        if not tokens or tokens[0] not in labels or tokens[0] in matrix:
            continue
        row, cells = tokens[0], tokens[1:1 + len(labels)]
        if len(cells) < len(labels):
            cells = cells[:-1]  # a row cut short may end in a cut cell ('NV12' -> 'NV1')
        valid = [c for c in cells if CELL.match(c)]
        if len(valid) < len(labels):
            incomplete.append(row)
        raw_cells += valid
        matrix[row] = {col: normalize_cell(c) for col, c in zip(labels, cells) if col != row and CELL.match(c)}
        if GPU_LABEL.match(row) and len(valid) == len(labels):
            values = [None if v == "N/A" else v for v in tokens[1 + len(labels):]]
            affinity[row] = dict(zip(affinity_keys, values))
    incomplete += [label for label in labels if label not in matrix]
    fill_symmetric(matrix, labels)
    legend = dict(m.groups() for line in lines if (m := NIC_LEGEND.match(line)))
    return {
        "legend": legend_style(text, raw_cells),
        "gpus": [label for label in labels if GPU_LABEL.match(label)],
        "nics": {label: legend.get(label, label) for label in labels if not GPU_LABEL.match(label)},
        "matrix": matrix,
        "affinity": affinity,
        "incomplete": incomplete,
    }


def fill_symmetric(matrix: dict[str, dict[str, str]], labels: list[str]) -> None:
    """Distances are symmetric: fill cells of missing or cut rows from the other side."""
    for a in labels:
        for b in labels:
            if a != b and b not in matrix.get(a, {}) and a in matrix.get(b, {}):
                matrix.setdefault(a, {})[b] = matrix[b][a]


def capture_smi_topo(timeout: float = SMI_TIMEOUT_S) -> dict[str, Any]:
    """Run `nvidia-smi topo -m` (bounded) and parse it; {"unavailable": why} when that fails."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return {"unavailable": "nvidia-smi not found on PATH"}
    try:
        proc = subprocess.run([exe, "topo", "-m"], capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return {"unavailable": f"nvidia-smi topo -m did not finish within {timeout:g} s "
                               "(a GPU may be hung: check `dmesg | grep -i xid`)"}
    except OSError as exc:
        return {"unavailable": f"cannot run nvidia-smi: {exc.strerror}"}
    if proc.returncode != 0:
        said = (proc.stdout + proc.stderr).strip().splitlines()
        return {"unavailable": f"nvidia-smi topo -m exited {proc.returncode}: {said[0] if said else 'no output'}"}
    try:
        return {"source": "nvidia-smi topo -m", **parse_smi_topo(proc.stdout)}
    except ValueError as exc:
        return {"unavailable": f"nvidia-smi topo -m: {exc}"}


# ---------------------------------------------------------------- PCI tree in sysfs

@dataclass(frozen=True)
class PciNode:
    """Where a PCI function sits: its host bridge, the chain of bridges from the root port down to
    itself (bus addresses), and its NUMA node (None when the kernel does not say)."""

    bdf: str
    host: str
    chain: tuple[str, ...]
    numa: int | None


def pci_node(root: str | os.PathLike[str], bdf: str) -> PciNode | None:
    real = Path(os.path.realpath(Path(root, "sys", "bus", "pci", "devices", bdf)))
    parts = real.parts
    host = next((i for i, part in enumerate(parts) if HOST_BRIDGE.match(part)), None)
    if host is None:
        return None
    numa = read_int(real / "numa_node")
    return PciNode(bdf, parts[host], tuple(p for p in parts[host + 1:] if BDF.match(p)),
                   numa if numa is not None and numa >= 0 else None)


def pci_distance(a: PciNode, b: PciNode) -> str:
    """nvidia-smi's path class between two PCI functions, from their places in the tree.

    Different host bridges: NODE on one NUMA node, SYS across. Same host bridge: PHB when the paths
    split at the root complex, PIX when they meet below one switch, PXB when more bridges lie between.
    """
    if a.host != b.host:
        return "SYS" if a.numa is not None and b.numa is not None and a.numa != b.numa else "NODE"
    common = len(commonprefix([a.chain, b.chain]))
    if common == 0:
        return "PHB"
    return "PIX" if max(len(a.chain), len(b.chain)) - common <= 2 else "PXB"


def pcie_generation(speed: str | None) -> int | None:
    """'16.0 GT/s PCIe' -> 4."""
    m = re.match(r"([\d.]+) GT/s", speed or "")
    return knowledge()["pcie"]["gen_by_gts"].get(f"{float(m[1]):.1f}") if m else None


def link_status(device: Path) -> dict[str, Any]:
    speed = read_text(device / "current_link_speed")
    max_speed = read_text(device / "max_link_speed")
    return {
        "speed": speed, "gen": pcie_generation(speed),
        "max_speed": max_speed, "max_gen": pcie_generation(max_speed),
        "width": read_int(device / "current_link_width"),
        "max_width": read_int(device / "max_link_width"),
    }


def acs_control(config: bytes) -> int | None:
    """The ACS Control register from a function's config space (needs the extended space, which
    sysfs shows to root only); None when there is no ACS capability or it cannot be read."""
    offset, seen = 0x100, set()
    while 0x100 <= offset and offset + 8 <= len(config) and offset not in seen:
        seen.add(offset)
        header = int.from_bytes(config[offset:offset + 4], "little")
        if header in (0, 0xFFFFFFFF):
            return None
        if header & 0xFFFF == 0x000D:
            return int.from_bytes(config[offset + 6:offset + 8], "little")
        offset = (header >> 20) & 0xFFC
    return None


def acs_redirects(root: str | os.PathLike[str], bridge: str) -> list[str] | None:
    """Names of the ACS redirect bits set on a bridge; None when its config space is unreadable."""
    try:
        config = Path(root, "sys", "bus", "pci", "devices", bridge, "config").read_bytes()
    except OSError:
        return None
    if len(config) <= 0x100:
        return None
    control = acs_control(config) or 0
    return [name for name, bit in knowledge()["pcie"]["acs_redirect_bits"].items() if control >> bit & 1]


def iommu_group_type(device: Path) -> str | None:
    return read_text(device / "iommu_group" / "type")


def classify(vendor: str | None, pci_class: str | None) -> str | None:
    pcie = knowledge()["pcie"]
    if vendor != pcie["gpu_vendor"] or not pci_class:
        return None
    prefix = pci_class[:6]
    if prefix in pcie["gpu_classes"]:
        return "gpu"
    return "nvswitch" if prefix in pcie["nvswitch_classes"] else None


def describe_pci(root: str | os.PathLike[str], bdf: str, kind: str, **extra: Any) -> dict[str, Any] | None:
    node = pci_node(root, bdf)
    if node is None:
        return None
    device = Path(root, "sys", "bus", "pci", "devices", bdf)
    switch_ports = node.chain[1:-1]  # below the root port: where ACS redirects peer traffic
    acs = {b: flags for b in switch_ports if (flags := acs_redirects(root, b))}
    return {
        "kind": kind, **extra,
        "host": node.host, "chain": list(node.chain), "numa_node": node.numa,
        "local_cpulist": read_text(device / "local_cpulist"),
        "link": link_status(device),
        "iommu_group_type": iommu_group_type(device),
        "acs_redirect": acs,
        "acs_readable": all(acs_redirects(root, b) is not None for b in switch_ports),
    }


def read_pci(root: str | os.PathLike[str] = "/", ib: dict[str, Any] | None = None) -> dict[str, Any]:
    """NVIDIA GPUs and NVSwitches from ROOT/sys/bus/pci/devices, and the PCI functions of RDMA NICs."""
    base = Path(root, "sys", "bus", "pci", "devices")
    try:
        bdfs = sorted(os.listdir(base))
    except OSError as exc:
        return {"unavailable": f"cannot list {base}: {exc.strerror}"}
    devices: dict[str, Any] = {}
    for bdf in bdfs:
        kind = classify(read_text(base / bdf / "vendor"), read_text(base / bdf / "class"))
        if kind and (info := describe_pci(root, bdf, kind)):
            devices[bdf] = info
    for dev in (ib or {}).get("devices", []):
        if dev.get("pci") and dev["pci"] not in devices and (
                info := describe_pci(root, dev["pci"], "nic", rdma=dev["name"])):
            devices[dev["pci"]] = info
    return {"devices": devices}


def topology_from_pci(root: str | os.PathLike[str], pci: dict[str, Any],
                      nvlinks: dict[tuple[str, str], int] | None = None) -> dict[str, Any]:
    """The `nvidia-smi topo -m` matrix rebuilt from the PCI tree; `nvlinks` maps GPU label pairs
    to their NVLink counts (from NVML), which become NV# cells."""
    devices = pci.get("devices", {})
    gpu_bdfs = sorted(b for b, d in devices.items() if d["kind"] == "gpu")
    nic_bdfs = sorted((b for b, d in devices.items() if d["kind"] == "nic"), key=lambda b: devices[b]["rdma"])
    if not gpu_bdfs:
        return {"unavailable": f"no NVIDIA GPU under {Path(root, 'sys/bus/pci/devices')}"}
    labels = {b: f"GPU{i}" for i, b in enumerate(gpu_bdfs)} | {b: f"NIC{i}" for i, b in enumerate(nic_bdfs)}
    nodes = {b: pci_node(root, b) for b in labels}
    links = nvlinks or {}
    matrix: dict[str, dict[str, str]] = {}
    for a, la in labels.items():
        matrix[la] = {}
        for b, lb in labels.items():
            if a != b and nodes[a] and nodes[b]:
                count = links.get((la, lb))
                matrix[la][lb] = f"NV{count}" if count else pci_distance(nodes[a], nodes[b])
    return {
        "source": "sysfs PCI tree" + (" + NVML NVLink" if links else ""),
        "legend": "derived",
        "gpus": [labels[b] for b in gpu_bdfs],
        "nics": {labels[b]: devices[b]["rdma"] for b in nic_bdfs},
        "bus_ids": {labels[b]: b for b in labels},
        "matrix": matrix,
        "affinity": {labels[b]: {"cpu": devices[b]["local_cpulist"], "numa": devices[b]["numa_node"]}
                     for b in gpu_bdfs},
        "incomplete": [],
    }


def read_topology(root: str | os.PathLike[str], smi_text: str | None, pci: dict[str, Any],
                  nvlinks: dict[tuple[str, str], int] | None, run_smi: bool,
                  smi_timeout: float = SMI_TIMEOUT_S) -> dict[str, Any]:
    """The matrix from, in order of preference: the given text, nvidia-smi (when `run_smi`), the PCI tree."""
    if smi_text is not None:
        return {"source": "nvidia-smi topo -m (file)", **parse_smi_topo(smi_text)}
    if run_smi:
        captured = capture_smi_topo(smi_timeout)
        if "unavailable" not in captured:
            return captured
        derived = topology_from_pci(root, pci, nvlinks)
        if "unavailable" in derived:
            return {"unavailable": f"{captured['unavailable']}; {derived['unavailable']}"}
        return {**derived, "nvidia_smi": captured["unavailable"]}
    return topology_from_pci(root, pci, nvlinks)
