"""Stage 7: a quick bandwidth sample between neighbouring hosts (full sweeps belong to `bench`).

The first rank of each host exchanges a buffer with the first rank of the next host, one pair at a
time (so pairs do not share the wire); a host slow on both its links is flagged, as is a single
slow link. With one host, ranks 0 and 1 give a local figure for the report.
"""

from __future__ import annotations

import time
from datetime import timedelta

from ...rules.consistency import bandwidth_findings
from ..judge import MARGIN, JudgeContext, Outcome, Stage
from ..watchdog import error_findings, missing_findings

BYTES = {"cpu": 4 << 20, "cuda": 64 << 20}
ROUNDS = 3


def links(hosts: dict[str, list[int]]) -> list[tuple[int, int]]:
    """Pairs of ranks to measure: host leaders in a ring, or ranks 0 and 1 on a single host."""
    leaders = [ranks[0] for _, ranks in sorted(hosts.items())]
    if len(leaders) == 1:
        only = next(iter(hosts.values()))
        return [(only[0], only[1])] if len(only) > 1 else []
    if len(leaders) == 2:
        return [(leaders[0], leaders[1])]
    return [(leaders[i], leaders[(i + 1) % len(leaders)]) for i in range(len(leaders))]


def on_rank(ctx) -> None:
    import torch
    import torch.distributed as dist

    device = torch.device("cuda", ctx.state["device"]) if ctx.plan["backend"] == "nccl" else torch.device("cpu")
    buf = torch.ones(BYTES[device.type] // 4, dtype=torch.float32, device=device)
    wait = timedelta(seconds=ctx.options.timeout + MARGIN)
    measured, error = {}, None
    try:
        for index, (a, b) in enumerate(links(ctx.plan["hosts"])):
            if ctx.rank in (a, b):
                seconds = _ping_pong(buf, b if ctx.rank == a else a, ctx.rank == a, wait, device)
                if ctx.rank == a:
                    measured[index] = seconds
            dist.barrier(async_op=True).wait(wait)
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    ctx.publish("bandwidth", {"seconds": measured, "bytes": buf.numel() * 4, "error": error})


def _ping_pong(buf, peer: int, first: bool, wait: timedelta, device) -> float:
    """Send the buffer there and back ROUNDS times (after one warm-up); the initiator's wall time."""
    import torch
    import torch.distributed as dist

    def once() -> None:
        for sending in ((True, False) if first else (False, True)):
            (dist.isend if sending else dist.irecv)(buf, peer).wait(wait)
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    once()
    started = time.perf_counter()
    for _ in range(ROUNDS):
        once()
    return time.perf_counter() - started


def on_judge(ctx: JudgeContext) -> Outcome:
    got = ctx.gather("bandwidth")
    errors = {r: p["error"] for r, p in got.results.items() if p.get("error")}
    findings = missing_findings(ctx, "the bandwidth sample", got.missing) + \
        error_findings(ctx, "the bandwidth sample", errors, fallback="collective-timeout")
    sample = []
    for index, (a, b) in enumerate(links(ctx.plan["hosts"])):
        result = got.results.get(a, {})
        seconds = result.get("seconds", {}).get(str(index))
        if seconds:
            gbps = 2 * ROUNDS * result["bytes"] * 8 / seconds / 1e9
            sample.append({"a": ctx.host(a), "b": ctx.host(b), "ranks": [a, b], "gbps": round(gbps, 3)})
    findings += bandwidth_findings(sample)
    ctx.facts["bandwidth"] = sample
    shown = ", ".join(f"{_link_name(s)} {s['gbps']:.1f} Gbit/s" for s in sample[:4])
    return Outcome.judged(findings, shown + (" ..." if len(sample) > 4 else ""))


def _link_name(sample: dict) -> str:
    a, b = sample["ranks"]
    if sample["a"] == sample["b"]:
        return f"{sample['a']} rank {a}<->{b}"
    return f"{sample['a']}<->{sample['b']}"


def skip(ctx: JudgeContext) -> str | None:
    if ctx.options.quick:
        return "--quick"
    if ctx.world_size < 2:
        return "one rank: nothing to measure"
    return None


STAGE = Stage("bandwidth", "Bandwidth sample", on_rank, on_judge, skip=skip)
