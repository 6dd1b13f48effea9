"""Timing on one rank: nccl-tests' BenchTime in torch.distributed terms, and the link test of a pair.

Honest timing, as nccl-tests does it: warm-up runs are not timed; every timed loop starts after a
barrier and ends with the device synchronised (ops on a GPU only queue work on a stream), then a
barrier again; the time is this rank's, and the judge combines all ranks' (their max by default).
The run that is checked is the first untimed one, on freshly filled buffers. Unlike nccl-tests, which
warms up only at the largest and smallest size, every size gets its warm-up: over TCP (Gloo, NCCL's
socket transport) the kernel's socket buffers grow with the message size, and a size timed straight
after a smaller one is measured before they have.
"""

from __future__ import annotations

import statistics
import time
from datetime import timedelta
from typing import Any

from ..collectives import Collective, Spec
from .options import DATATYPES

PINGS, PING_WARMUP = 20, 3  # small-message round trips per pair (latency), and untimed ones before
STREAMS = 5  # timed streams per direction; the best one counts (scheduling noise only ever slows one down)
SMALL_ELEMENTS = 2  # 8 bytes of float32: the latency message


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


# ------------------------------------------------------------------ a pair of the link matrix

class Pair:
    """Both ends run the same calls in the same order; `first` says which end speaks first."""

    def __init__(self, peer: int, first: bool, message_bytes: int, seconds: float, device: Any,
                 wait: timedelta) -> None:
        import torch

        self.peer, self.first, self.seconds, self.device, self.wait = peer, first, seconds, device, wait
        self.big = torch.ones(max(1, message_bytes // 4), dtype=torch.float32, device=device)
        self.small = torch.ones(SMALL_ELEMENTS, dtype=torch.float32, device=device)
        self.number = torch.zeros(1, dtype=torch.int64, device=device)

    def measure(self) -> dict:
        """Latency, then first -> second, then second -> first; each end reports what it sent."""
        latency = self.ping_pong()
        if self.first:
            sent = self.stream_out()
            self.stream_in()
        else:
            self.stream_in()
            sent = self.stream_out()
        return {"peer": self.peer, "latency_us": latency * 1e6, "send_Bps": sent, "bytes": self.big.numel() * 4}

    def _move(self, tensors: list, send: bool) -> None:
        import torch.distributed as dist

        works = [(dist.isend if send else dist.irecv)(t, self.peer) for t in tensors]
        for work in works:
            work.wait(self.wait)
        synchronize(self.device)

    def ping_pong(self) -> float:
        """Half the median round trip of a small message (both ends time their own turns)."""
        trips = []
        last = time.perf_counter()
        for _ in range(PING_WARMUP + PINGS):
            for send in ((True, False) if self.first else (False, True)):
                self._move([self.small], send)
            now = time.perf_counter()
            trips.append(now - last)
            last = now
        return statistics.median(trips[PING_WARMUP:]) / 2

    def stream_out(self) -> float:
        """Bytes per second this end sends to the peer: the best of STREAMS timed streams of k messages.

        k fills the time budget (at least one message per stream), so a fast link is measured over a
        window long enough to average out scheduling noise and a crawling one stays bounded. The time
        runs until the peer's small acknowledgement arrives, so it includes one latency."""
        started = time.perf_counter()
        self._move([self.big], True)  # one message first: warms the path and tells how long one takes
        self._move([self.small], False)
        one = time.perf_counter() - started
        k = max(1, int(self.seconds / (STREAMS * max(one, 1e-9))))
        self.number.fill_(k)
        self._move([self.number], True)
        best = 0.0
        for _ in range(STREAMS):
            started = time.perf_counter()
            self._move([self.big] * k, True)
            self._move([self.small], False)  # the peer has everything
            best = max(best, k * self.big.numel() * 4 / (time.perf_counter() - started))
        return best

    def stream_in(self) -> None:
        self._move([self.big], False)
        self._move([self.small], True)
        self._move([self.number], False)
        k = int(self.number.item())
        for _ in range(STREAMS):
            self._move([self.big] * k, False)
            self._move([self.small], True)
