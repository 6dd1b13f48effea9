"""`nccl-doctor topo`: GPU/NIC topology and hardware health of this host, judged.

Options -> facts (probe/hardware) -> findings (rules/hardware) -> Report -> render (render/topo)."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import click

from ..model import InputError, Report
from ..probe.hardware import hardware_facts
from ..probe.topology import parse_smi_topo
from ..render import emit
from ..render.topo import render_topo
from ..rules.hardware import judge


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
        render_topo(facts, sys.stdout)
    return emit(report, as_json=as_json)
