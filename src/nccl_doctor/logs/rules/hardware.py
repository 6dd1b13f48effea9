"""Clues from the machine rather than the job: kernel-log Xid codes, `nvidia-smi topo -m` rows pasted into the
log, and the settings the user reports as making the failure go away."""

from __future__ import annotations

import re
from collections.abc import Iterator

from ...catalog import workarounds, xids
from ...model import Severity
from ..evidence import Clue, LogView, clip
from . import rule

PCIE_LINKS = {"PIX", "PXB", "PHB", "NODE", "SYS", "SOC"}


@rule("xid-decoded", "xid-benign")
def rule_xids(view: LogView) -> Iterator[Clue]:
    """Xid codes in a pasted kernel log, read with NVIDIA's catalogue: NVLink, ECC, fallen off the bus, GSP."""
    by_cause: dict[str, list] = {}
    for _, e in view.facts("xid"):
        row = xids().get(int(e.caps["xid"]), {})
        cause = row.get("cause", "gpu-xid")
        by_cause.setdefault((cause, row.get("severity") == "info"), []).append((e, row))  # type: ignore[arg-type]
    for (cause, benign), seen in by_cause.items():
        codes = sorted({int(e.caps["xid"]) for e, _ in seen})
        meanings = "; ".join(f"Xid {e.caps['xid']}: {row.get('meaning', 'see NVIDIA Xid catalog')}"
                             for e, row in {int(e.caps["xid"]): (e, row) for e, row in seen}.values())
        yield Clue("xid-benign" if benign else "xid-decoded", f"the kernel log shows {meanings}",
                   events=tuple(e for e, _ in seen[:3]), cause=cause,
                   severity=Severity.WARNING if benign else None,
                   fix=(f"On the host: `dmesg -T | grep -i xid` (codes {', '.join(map(str, codes))}) and `nvidia-smi -q`"
                        "; take the GPU out of service if errors recur.",))


@rule("pcie-only-topology-hang")
def rule_pcie_topology(view: LogView) -> Iterator[Clue]:
    """A pasted `nvidia-smi topo -m` in which GPUs reach each other over PCIe only, in a report of a hang: PCIe
    peer-to-peer between those GPUs is what ACS/IOMMU settings break."""
    rows = [e for _, e in view.facts("topo_row")]
    hang = view.hint("hang_reported")
    if not rows or not hang or view.failed:
        return
    links = {link for e in rows for link in e.caps["links"].split()} - {"X"}
    if links and links <= PCIE_LINKS:
        yield Clue("pcie-only-topology-hang", f"the pasted topology connects the GPUs over PCIe only "
                   f"({', '.join(sorted(links))}, no NVLink) and the report describes a hang "
                   f"({clip(hang[0].message.strip(), 80)!r})", events=tuple(rows[:2] + hang[:1]),
                   severity=Severity.WARNING,
                   fix=("Rerun with `NCCL_P2P_DISABLE=1`: if the hang goes away, disable ACS on the PCIe bridges or "
                        "set the IOMMU to passthrough (`iommu=pt`).",))


@rule("workaround-reported")
def rule_workarounds(view: LogView) -> Iterator[Clue]:
    """Settings the log reports as making the failure go away: evidence about the component at fault."""
    for e in view.hint("workaround"):
        var = e.caps.get("var") or e.caps.get("var2", "")
        value = e.caps.get("value") or e.caps.get("value2", "")
        for row in workarounds():
            if re.fullmatch(row["var"], var) and re.search(row.get("values", ""), value):
                for cause, strength in row["causes"].items():
                    yield Clue("workaround-reported", f"the log reports that {var}={value} makes it work: "
                               f"{clip(e.message.strip(), 100)!r}", events=(e,), cause=cause, strength=strength)
                break
