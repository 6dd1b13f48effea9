"""`nccl-doctor topo` as text: the GPU/NIC topology matrix, the RDMA ports and the GPUs' health; the GPU
health table is also `env`'s hardware summary."""

from __future__ import annotations

from typing import Any, TextIO

from . import literal
from rich.table import Table

from .text import console_for

CELL_STYLE = {"X": "dim", "PIX": "green", "PXB": "green", "PHB": "yellow", "NODE": "yellow", "SYS": "red"}


def shown(value: Any) -> str:
    return "" if value is None else str(value)


def pcie_text(link: dict) -> str:
    return f"Gen{link.get('gen')}/{link.get('max_gen')} x{link.get('width')}/{link.get('max_width')}"


GPU_COLUMNS = {
    "GPU": lambda g: g["index"],
    "name": lambda g: g.get("name") or "",
    "bus id": lambda g: g.get("bus_id") or "",
    "temp": lambda g: f"{g.get('temperature_c')} C",
    "PCIe": lambda g: pcie_text(g.get("pcie") or {}),
    "NVLinks up": lambda g: f"{sum(link['active'] for link in g.get('nvlink') or [])}/{len(g.get('nvlink') or [])}",
    "ECC uncorr.": lambda g: (g.get("ecc") or {}).get("volatile_uncorrected"),
    "throttle": lambda g: ", ".join(g.get("throttle", [])) or "-",
}


def gpu_health_rows(gpus: list[dict], columns: tuple[str, ...]) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    """The GPU health table (NVML facts), in the columns asked for: (headers, rows of text)."""
    return columns, [tuple(shown(GPU_COLUMNS[c](g)) for c in columns) for g in gpus]


def matrix_table(topo: dict[str, Any]) -> Table:
    labels = topo["gpus"] + list(topo["nics"])
    table = Table(title=f"GPU/NIC topology ({literal.markup(str(topo.get('source')))})", title_justify="left", box=None,
                  padding=(0, 1, 0, 0), header_style="bold")
    table.add_column("")
    for label in labels:
        table.add_column(literal.markup(label), justify="center")
    table.add_column("CPU affinity")
    table.add_column("NUMA")
    for row in labels:
        cells = [topo["matrix"].get(row, {}).get(col, "X" if col == row else "?") for col in labels]
        styled = [f"[{'bold green' if c.startswith('NV') else CELL_STYLE.get(c, '')}]{literal.markup(c)}[/]" if c != "?" else "?"
                  for c in cells]
        affinity = topo.get("affinity", {}).get(row, {})
        table.add_row(literal.markup(row), *styled, literal.markup(shown(affinity.get("cpu"))), literal.markup(shown(affinity.get("numa"))))
    return table


def ports_table(ib: dict[str, Any]) -> Table:
    table = Table(title="RDMA ports", title_justify="left", show_edge=False, pad_edge=False)
    for column in ("port", "state", "physical", "rate", "link layer", "PCI", "NUMA"):
        table.add_column(column)
    for dev in ib["devices"]:
        for p in dev["ports"]:
            table.add_row(*(literal.markup(str(x)) for x in (
                f"{dev['name']}/{p['port']}", p.get("state") or "?", p.get("phys_state") or "?", p.get("rate") or "?",
                p.get("link_layer") or "?", shown(dev.get("pci")), shown(dev.get("numa_node")))))
    return table


def gpus_table(gpus: list[dict[str, Any]]) -> Table:
    table = Table(title="GPUs (NVML)", title_justify="left", show_edge=False, pad_edge=False)
    headers, rows = gpu_health_rows(gpus, ("GPU", "name", "bus id", "temp", "PCIe", "NVLinks up", "throttle"))
    for column in headers:
        table.add_column(column)
    for row in rows:
        table.add_row(*(literal.markup(cell) for cell in row))
    return table


def render_topo(facts: dict[str, Any], out: TextIO) -> None:
    """The readings of `topo` (the findings follow, as every report's)."""
    console = console_for(out)
    topo = facts["topology"]
    if "unavailable" in topo:
        console.print(f"[dim]topology: {literal.markup(topo['unavailable'])}[/dim]")
    else:
        console.print(matrix_table(topo), width=10_000)  # wide like nvidia-smi's own, never squeezed
        if topo.get("incomplete"):
            console.print(f"[yellow]rows missing or cut short in the input: {literal.markup(', '.join(topo['incomplete']))}"
                          f"[/yellow]")
        if any(name != label for label, name in topo["nics"].items()):
            console.print("NICs: " + literal.markup(", ".join(f"{label}={name}" for label, name in topo["nics"].items())))
    for key, table in (("gpu_health", lambda v: gpus_table(v["gpus"])), ("ib_ports", lambda v: ports_table(v))):
        value = facts.get(key, {})
        if "unavailable" in value:
            console.print(f"[dim]{key.replace('_', ' ')}: {literal.markup(value['unavailable'])}[/dim]")
        elif value.get("gpus") or value.get("devices"):
            console.print()
            console.print(table(value))
    console.print()
