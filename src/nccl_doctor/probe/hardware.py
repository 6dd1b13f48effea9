"""Every hardware reading of this host in one dict: topology, GPU health, NVSwitch/fabric manager,
InfiniBand ports, PCI links, Xid events. `topo` shows all of it; probe.collect() carries a lighter copy
under facts["hardware"] (see `probe`); rules.hardware.judge() turns either into findings.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

from . import gpu_health, ib_health, infiniband, nvlink, topology


def is_live_root(root: str | os.PathLike[str]) -> bool:
    return os.path.realpath(root) == "/"


class Budget:
    """What is left of a time limit (None: no limit): every bounded reader gets at most that, so that no
    subprocess outlives the caller's deadline."""

    def __init__(self, seconds: float | None) -> None:
        self.end = None if seconds is None else time.monotonic() + seconds

    def left(self, cap: float) -> float:
        return cap if self.end is None else max(0.05, min(cap, self.end - time.monotonic()))


def hardware_facts(root: str | os.PathLike[str] = "/", smi_text: str | None = None,
                   sample_seconds: float = 0.0, nvml: Any = None, *, ib: dict[str, Any] | None = None,
                   detail: bool = True, timeout: float | None = None) -> dict[str, Any]:
    """Read the hardware under `root` (default this host).

    `smi_text` is a saved `nvidia-smi topo -m` output to use instead of running it. `sample_seconds`
    > 0 reads the IB counters twice that far apart. A `root` other than "/" is a copied or fake tree:
    NVML, nvidia-smi, dmesg and the process list describe the running host, so they are skipped then
    (unless an `nvml` object is injected, as tests do).

    `ib` is infiniband.read_devices(root) when the caller already has it. `detail=False` is the light
    reading of probe.collect(): the matrix is derived from the PCI tree and NVML instead of running
    nvidia-smi, and IB ports keep only what infiniband.py reads (no full GID tables, no counters).
    `timeout` bounds the whole reading: NVML, nvidia-smi, dmesg and systemctl get what is left of it.
    """
    budget = Budget(timeout)
    live = is_live_root(root)
    gpus = gpu_health.read_gpu_health(nvml, budget.left(gpu_health.NVML_TIMEOUT_S)) if (live or nvml is not None) \
        else {"unavailable": f"NVML not read: {root} is not this host's root"}
    ib = infiniband.read_devices(root) if ib is None else ib
    ib = ib_health.read_ib_ports(root, ib) if detail else ib
    pci = topology.read_pci(root, ib)
    nvlinks = nvlink.nvlink_pairs(gpus.get("gpus", []))
    facts: dict[str, Any] = {
        "topology": topology.read_topology(root, smi_text, pci, nvlinks, run_smi=live and detail,
                                           smi_timeout=budget.left(topology.SMI_TIMEOUT_S)),
        "gpu_health": gpus,
        "fabric": nvlink.read_fabric(root, pci, gpus, live, timeout=budget.left(nvlink.SYSTEMCTL_TIMEOUT_S)),
        "ib_ports": ib,
        "pci": pci,
        "xid": gpu_health.read_xid_events(root, live, budget.left(gpu_health.DMESG_TIMEOUT_S)),
    }
    if sample_seconds > 0 and ib.get("devices"):
        facts["ib_counter_deltas"] = ib_health.sample_ib_counters(root, sample_seconds)
    return facts


def probe(env: Mapping[str, str], ib: dict[str, Any], seconds: float) -> dict[str, Any]:
    """The `hardware` section of probe.collect(): the light reading of this host within `seconds`, given
    the `infiniband` section (which holds the IB ports, so they are not repeated here)."""
    facts = hardware_facts(ib=ib, detail=False, timeout=seconds)
    del facts["ib_ports"]
    return facts
