"""The hardware part of `lint`: the judgement of `nccl-doctor topo` (rules/hardware.py) over the hardware and
infiniband sections of probe.collect(), with the settings as NCCL will see them (config files included)."""

from __future__ import annotations

from collections.abc import Iterator

from ..model import Finding
from .lint_context import Context
from .hardware import judge


def hardware(ctx: Context) -> Iterator[Finding]:
    """The hardware judgement of `nccl-doctor topo` on this host: NCCL_IB_HCA against the RDMA devices and ports
    (NCCL's matching: prefixes, `=` exact, `^` excludes, `:port`; mlx5_1 also selects mlx5_10), ports that are
    down or trained slow, RDMA devices without /dev/infiniband (containers), NCCL_IB_GID_INDEX on RoCE, GPUs whose
    nearest NIC is SYS, NVLink, the NVSwitch fabric manager, ECC, Xid, throttling, PCIe links, ACS/IOMMU."""
    facts = {**(ctx.section("hardware") or {}), "ib_ports": ctx.facts.get("infiniband"), "host": ctx.section("host")}
    yield from judge(facts, ctx.effective_env)
