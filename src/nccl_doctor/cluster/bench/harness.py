"""Timing on one rank: nccl-tests' BenchTime in torch.distributed terms.

Honest timing, as nccl-tests does it: warm-up runs are not timed; every timed loop starts after a
barrier and ends with the device synchronised (ops on a GPU only queue work on a stream), then a
barrier again; the time is this rank's, and the judge combines all ranks' (their max by default).
The run that is checked is the first untimed one, on freshly filled buffers. Unlike nccl-tests, which
warms up only at the largest and smallest size, every size gets its warm-up: over TCP (Gloo, NCCL's
socket transport) the kernel's socket buffers grow with the message size, and a size timed straight
after a smaller one is measured before they have.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from ..ops import Collective, Spec
from .options import DATATYPES

def device_of(ctx: Any) -> Any:
    import torch

    if ctx.plan.get("backend") == "nccl":
        return torch.device("cuda", ctx.state.get("device", ctx.world.local_rank))
    return torch.device("cpu")


def dtype_of(name: str) -> Any:
    import torch

    return getattr(torch, DATATYPES[name])


def synchronize(device: Any) -> None:
    if device.type == "cuda":
        import torch

        torch.cuda.synchronize(device)


def barrier(device: Any, wait: timedelta) -> None:
    import torch.distributed as dist

    dist.barrier(async_op=True).wait(wait)
    synchronize(device)


def time_op(entry: Collective, count: int, rank: int, n: int, like: Any, spec: Spec, *, in_place: bool,
            iters: int, warmup: int, check: bool, wait: timedelta) -> dict:
    """One cell of the sweep on this rank: {"us": per iteration, "wrong": elements or None, "detail"}."""
    bufs = entry.buffers(rank, n, count, like, spec, in_place)
    entry.launch(bufs, rank, n, False)  # untimed, and its result is the one checked
    synchronize(like.device)
    wrong, detail = entry.verify(bufs, rank, n, count) if check else (None, [])
    for _ in range(warmup - 1):
        entry.launch(bufs, rank, n, False)
    synchronize(like.device)
    barrier(like.device, wait)
    started = time.perf_counter()
    for _ in range(iters):
        entry.launch(bufs, rank, n, False)
    synchronize(like.device)
    elapsed = time.perf_counter() - started
    barrier(like.device, wait)
    return {"us": elapsed / max(1, iters) * 1e6, "wrong": wrong, "detail": detail[:1]}
