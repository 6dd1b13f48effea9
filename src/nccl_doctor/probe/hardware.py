"""Every hardware reading of this host in one dict: topology, GPU health, NVSwitch/fabric manager,
InfiniBand ports, PCI links, Xid events. Used by `topo`, and by `env`/`check` under facts["hardware"];
rules.topology.judge() turns it into findings.
"""

from __future__ import annotations

import os
from typing import Any

from . import gpu_health, ib_health, nvlink, topology


def is_live_root(root: str | os.PathLike[str]) -> bool:
    return os.path.realpath(root) == "/"


def hardware_facts(root: str | os.PathLike[str] = "/", smi_text: str | None = None,
                   sample_seconds: float = 0.0, nvml: Any = None) -> dict[str, Any]:
    """Read the hardware under `root` (default this host).

    `smi_text` is a saved `nvidia-smi topo -m` output to use instead of running it. `sample_seconds`
    > 0 reads the IB counters twice that far apart. A `root` other than "/" is a copied or fake tree:
    NVML, nvidia-smi, dmesg and the process list describe the running host, so they are skipped then
    (unless an `nvml` object is injected, as tests do).
    """
    live = is_live_root(root)
    gpus = gpu_health.read_gpu_health(nvml) if (live or nvml is not None) else {
        "unavailable": f"NVML not read: {root} is not this host's root"}
    ib = ib_health.read_ib_ports(root)
    pci = topology.read_pci(root, ib)
    nvlinks = nvlink.nvlink_pairs(gpus.get("gpus", []))
    facts: dict[str, Any] = {
        "topology": topology.read_topology(root, smi_text, pci, nvlinks, live),
        "gpu_health": gpus,
        "fabric": nvlink.read_fabric(root, pci, gpus, live),
        "ib_ports": ib,
        "pci": pci,
        "xid": gpu_health.read_xid_events(root, live),
    }
    if sample_seconds > 0 and ib.get("devices"):
        facts["ib_counter_deltas"] = ib_health.sample_ib_counters(root, sample_seconds)
    return facts
