"""Stage 5: init_process_group with a deadline; a failure is classified by the `logs` signature catalog."""

from __future__ import annotations

import inspect
import time
from datetime import timedelta

from ..judge import MARGIN, JudgeContext, Outcome, Stage
from ..watchdog import error_findings, missing_findings
from ...roads import emits


def on_rank(ctx) -> None:
    import torch
    import torch.distributed as dist

    backend = ctx.plan["backend"]
    options = {"backend": backend, "store": ctx.new_store_connection("pg/"), "rank": ctx.rank,
               "world_size": ctx.world.world_size, "timeout": timedelta(seconds=ctx.options.timeout + MARGIN)}
    if backend == "nccl" and "device_id" in inspect.signature(dist.init_process_group).parameters:  # torch >= 2.3
        options["device_id"] = torch.device("cuda", ctx.state.get("device", ctx.world.local_rank))  # eager init
    ctx.mark("backend")
    started = time.monotonic()
    try:
        dist.init_process_group(**options)
        result = {"ok": True}
    except Exception as exc:
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    ctx.publish("backend", {**result, "seconds": time.monotonic() - started})


@emits("backend-init-failed")
def on_judge(ctx: JudgeContext) -> Outcome:
    """Stage 5 on the judge: every rank's init_process_group result; failures that no more specific cause explains
    are backend-init-failed."""
    got = ctx.gather("backend")
    errors = {r: p["error"] for r, p in got.results.items() if not p["ok"]}
    culprits = missing_findings(ctx, "init_process_group", got.missing, enter_step="backend")
    failures = error_findings(ctx, "init_process_group", errors, fallback="backend-init-failed")
    if culprits:  # errors on the others (timeouts, lost peers) are echoes of the missing ranks
        culprits[0].secondary.extend(failures)
        failures = []
    slowest = max((p["seconds"] for p in got.results.values()), default=0.0)
    ctx.facts.setdefault("world", {})["backend_init_seconds"] = round(slowest, 3)
    return Outcome.judged(culprits + failures, f"{ctx.plan['backend']} process group of {len(got.results)} "
                                               f"ranks in {slowest:.1f} s")


STAGE = Stage("backend", "Backend init (init_process_group)", on_rank, on_judge)
