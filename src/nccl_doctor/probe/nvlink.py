"""NVLink pairs between GPUs, NVSwitch presence and the NVIDIA fabric manager.

The per-link NVML reading lives in gpu_health (one NVML session); this module works on those facts
and on what the host shows: NVSwitch PCI functions and device nodes, the nv-fabricmanager process
and the nvidia-fabricmanager service.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import psutil

from .sysfs import names
from .topology import knowledge

SYSTEMCTL_TIMEOUT_S = 5.0
SERVICE_STATES = {"active", "inactive", "failed", "activating", "deactivating", "reloading"}


def nvlink_pairs(gpus: list[dict[str, Any]]) -> dict[tuple[str, str], int]:
    """Active NVLink count between GPU labels ('GPU0', 'GPU1') from NVML's per-link facts.

    Links to another GPU count for that pair. Links to NVSwitches join every GPU that has some:
    nvidia-smi shows such a pair as NV<the smaller of the two GPUs' switch link counts>.
    """
    label = {g["bus_id"]: f"GPU{g['index']}" for g in gpus if g.get("bus_id")}
    pairs: dict[tuple[str, str], int] = {}
    to_switch: dict[str, int] = {}
    for gpu in gpus:
        me = f"GPU{gpu['index']}"
        for link in gpu.get("nvlink") or []:
            if not link["active"]:
                continue
            if link["remote_type"] == "switch":
                to_switch[me] = to_switch.get(me, 0) + 1
            elif (peer := label.get(link["remote_bus_id"])) and peer != me:
                pairs[(me, peer)] = pairs.get((me, peer), 0) + 1
    for a, na in to_switch.items():
        for b, nb in to_switch.items():
            if a != b:
                pairs[(a, b)] = pairs.get((a, b), 0) + min(na, nb)
    return pairs


def find_nvswitches(root: str | os.PathLike[str], pci: dict[str, Any]) -> dict[str, Any]:
    """NVSwitch PCI functions, /dev/nvidia-nvswitch* nodes and the driver's nvswitch device list."""
    dev_nodes = [n for n in names(Path(root, "dev")) if n.startswith("nvidia-nvswitch")]
    proc_devices = names(Path(root, "proc", "driver", "nvidia-nvswitch", "devices"))
    pci_switches = sorted(b for b, d in pci.get("devices", {}).items() if d["kind"] == "nvswitch")
    return {
        "present": bool(pci_switches or proc_devices or any(n != "nvidia-nvswitchctl" for n in dev_nodes)),
        "pci": pci_switches,
        "dev_nodes": dev_nodes,
        "driver_devices": proc_devices,
    }


def fabric_manager_process(process_names: Iterable[str] | None = None) -> bool:
    wanted = set(knowledge()["fabric"]["process_names"])
    if process_names is None:
        process_names = (p.info.get("name") or "" for p in psutil.process_iter(["name"]))
    return any(name in wanted for name in process_names)


def fabric_manager_service(timeout: float = SYSTEMCTL_TIMEOUT_S) -> str | None:
    """`systemctl is-active nvidia-fabricmanager`, or None where systemd cannot say (containers)."""
    exe = shutil.which("systemctl")
    if not exe:
        return None
    try:
        proc = subprocess.run([exe, "is-active", knowledge()["fabric"]["service"]], capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    state = proc.stdout.strip()
    return state if state in SERVICE_STATES else None


def read_fabric(root: str | os.PathLike[str], pci: dict[str, Any], gpu_facts: dict[str, Any],
                live: bool, process_names: Iterable[str] | None = None,
                timeout: float = SYSTEMCTL_TIMEOUT_S) -> dict[str, Any]:
    """NVSwitch presence, NVML's fabric state per GPU, and, where either exists, the fabric manager's
    process and service (a node without NVSwitches has no use for it, and the process list is not free)."""
    gpus = gpu_facts.get("gpus", [])
    states = {f"GPU{g['index']}": g["fabric"] for g in gpus if g.get("fabric")}
    facts: dict[str, Any] = {
        "nvswitch": find_nvswitches(root, pci),
        "gpu_fabric_state": states,
        "fabric_manager_process": None,
        "fabric_manager_service": None,
    }
    if not (states or facts["nvswitch"]["present"]):
        return facts
    if live or process_names is not None:
        facts["fabric_manager_process"] = fabric_manager_process(process_names)
        facts["fabric_manager_service"] = fabric_manager_service(timeout) if live else None
    return facts
