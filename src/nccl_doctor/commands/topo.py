"""`nccl-doctor topo`: GPU/NIC topology and hardware health of this host, judged."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path
from typing import Any

import click
from rich.table import Table
from rich.text import Text

from ..model import InputError, Report
from ..probe.hardware import hardware_facts
from ..probe.topology import parse_smi_topo
from ..render import emit, literal
from ..render.text import console_for
from ..rules.topology import judge


def shown(value: Any, style: str = "") -> Text:
    """A table cell from the input (a sysfs tree, an nvidia-smi file): shown literally."""
    return literal.text("" if value is None else value, style)


CELL_STYLE = {"X": "dim", "PIX": "green", "PXB": "green", "PHB": "yellow", "NODE": "yellow", "SYS": "red"}


def read_smi_file(path: str) -> str:
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(errors="replace")
    except OSError as exc:
        raise InputError(f"cannot read --smi-file {path}: {exc.strerror}; save `nvidia-smi topo -m > FILE` "
                         "and pass that file") from None
    try:
        parse_smi_topo(text)
    except ValueError as exc:
        raise InputError(f"--smi-file {path}: {exc}") from None
    return text


def matrix_table(topo: dict[str, Any]) -> Table:
    labels = topo["gpus"] + list(topo["nics"])
    table = Table(title=shown(f"GPU/NIC topology ({topo.get('source')})"), title_justify="left", box=None,
                  padding=(0, 1, 0, 0), header_style="bold")
    table.add_column("")
    for label in labels:
        table.add_column(shown(label), justify="center")
    table.add_column("CPU affinity")
    table.add_column("NUMA")
    for row in labels:
        cells = [topo["matrix"].get(row, {}).get(col, "X" if col == row else "?") for col in labels]
        styled = [shown(c, "bold green" if c.startswith("NV") else CELL_STYLE.get(c, "")) for c in cells]
        affinity = topo.get("affinity", {}).get(row, {})
        table.add_row(shown(row), *styled, shown(affinity.get("cpu")), shown(affinity.get("numa")))
    return table


def ports_table(ib: dict[str, Any]) -> Table:
    table = Table(title="RDMA ports", title_justify="left", show_edge=False, pad_edge=False)
    for column in ("port", "state", "physical", "rate", "link layer", "PCI", "NUMA"):
        table.add_column(column)
    for dev in ib["devices"]:
        for p in dev["ports"]:
            table.add_row(shown(f"{dev['name']}/{p['port']}"), shown(p.get("state") or "?"),
                          shown(p.get("phys_state") or "?"), shown(p.get("rate") or "?"),
                          shown(p.get("link_layer") or "?"), shown(dev.get("pci")), shown(dev.get("numa_node")))
    return table


def gpus_table(gpus: list[dict[str, Any]]) -> Table:
    table = Table(title="GPUs (NVML)", title_justify="left", show_edge=False, pad_edge=False)
    for column in ("GPU", "name", "bus id", "temp", "PCIe", "NVLinks up", "throttle"):
        table.add_column(column)
    for g in gpus:
        pcie = g.get("pcie") or {}
        links = g.get("nvlink") or []
        pcie_text = f"Gen{pcie.get('gen')}/{pcie.get('max_gen')} x{pcie.get('width')}/{pcie.get('max_width')}"
        table.add_row(*map(shown, (g["index"], g.get("name"), g.get("bus_id"), f"{g.get('temperature_c')} C",
                                   pcie_text, f"{sum(link['active'] for link in links)}/{len(links)}",
                                   ", ".join(g.get("throttle", [])))))
    return table


def print_readings(facts: dict[str, Any]) -> None:
    console = console_for(click.get_text_stream("stdout"))
    topo = facts["topology"]
    if "unavailable" in topo:
        console.print(f"[dim]topology: {literal.markup(topo['unavailable'])}[/dim]")
    else:
        console.print(matrix_table(topo), width=10_000)  # wide like nvidia-smi's own, never squeezed
        if topo.get("incomplete"):
            console.print(f"[yellow]rows missing or cut short in the input: "
                          f"{literal.markup(', '.join(topo['incomplete']))}[/yellow]")
        if any(name != label for label, name in topo["nics"].items()):
            console.print(literal.text("NICs: " + ", ".join(f"{label}={name}" for label, name in topo["nics"].items())))
    for key, table in (("gpu_health", lambda v: gpus_table(v["gpus"])), ("ib_ports", lambda v: ports_table(v))):
        value = facts.get(key, {})
        if "unavailable" in value:
            console.print(f"[dim]{key.replace('_', ' ')}: {literal.markup(value['unavailable'])}[/dim]")
        elif value.get("gpus") or value.get("devices"):
            console.print()
            console.print(table(value))
    console.print()


@click.command()
@click.option("--smi-file", metavar="FILE", help="Read a saved `nvidia-smi topo -m` output ('-' for stdin) "
                                                 "instead of running nvidia-smi.")
@click.option("--sysfs-root", default="/", show_default=True, metavar="DIR",
              help="Directory holding sys/, dev/, proc/ and var/log/ to read (a copied or fake tree); "
                   "anything but / skips NVML, nvidia-smi and dmesg.")
@click.option("--sample", type=click.FloatRange(0, 600), default=0, show_default=True, metavar="SECONDS",
              help="Read the InfiniBand error counters twice, SECONDS apart, and report those that rise.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def topo(smi_file: str | None, sysfs_root: str, sample: float, as_json: bool) -> int:
    """GPU/NIC topology, NVLink, InfiniBand ports and GPU health of this host, with findings."""
    if not os.path.isdir(sysfs_root):
        raise InputError(f"--sysfs-root {sysfs_root} is not a directory; give the root of a sysfs tree (default /)")
    smi_text = read_smi_file(smi_file) if smi_file else None
    facts = hardware_facts(sysfs_root, smi_text=smi_text, sample_seconds=sample)
    this_host = os.path.realpath(sysfs_root) == "/" and smi_file is None
    report = Report("topo", findings=judge(facts, os.environ, socket.gethostname() if this_host else None), facts=facts)
    if not as_json:
        print_readings(facts)
    return emit(report, as_json=as_json)
