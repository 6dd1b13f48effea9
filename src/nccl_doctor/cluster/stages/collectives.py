"""Stage 6: barrier, then every collective of the table, each result checked element by element.

Each op runs under the watchdog: ranks record entering it, and publish its result on leaving; the
judge waits for every rank until the op's deadline, then names who never entered, who never
finished and who died, and everyone is torn down (the ranks' watch threads end stuck processes).
"""

from __future__ import annotations

import time
from datetime import timedelta

from ...model import Evidence, Finding, ranges
from ..ops import COLLECTIVES
from ..faults import die
from ..judge import MARGIN, JudgeContext, Outcome, Stage
from ..watchdog import error_findings, missing_findings
from ...roads import emits

ELEMENTS_PER_RANK = 1024  # small: this stage checks correctness; `bench` measures


def ops(world_size: int) -> list[str]:
    """Barrier, then the table; a single rank has no peer for the send/recv ring."""
    return ["barrier", *(name for name in COLLECTIVES if world_size > 1 or name != "sendrecv")]


def on_rank(ctx) -> None:
    for op in ops(ctx.world.world_size):
        step = f"op.{op}"
        ctx.faults.before("collectives", op)
        ctx.mark(step)
        ctx.publish(step, _run(ctx, op))
        if not ctx.verdict(step).get("go"):
            return


def _run(ctx, op: str) -> dict:
    import torch
    import torch.distributed as dist

    n, rank = ctx.world.world_size, ctx.rank
    device = torch.device("cuda", ctx.state["device"]) if ctx.plan["backend"] == "nccl" else torch.device("cpu")
    count = ELEMENTS_PER_RANK * n
    started = time.perf_counter()
    try:
        if op == "barrier":
            work, check = dist.barrier(async_op=True), (lambda: [])
        else:
            entry = COLLECTIVES[op]
            bufs = entry.buffers(rank, n, count, torch.empty(0, dtype=torch.float32, device=device))
            work = entry.launch(bufs, rank, n, True)
            check = lambda: entry.check(bufs, rank, n, count)  # noqa: E731
        if ctx.faults.dies_during("collectives", op):
            time.sleep(0.3)  # let the op get under way on the wire, then crash in the middle of it
            die()
        work.wait(timedelta(seconds=ctx.options.timeout + MARGIN))
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        wrong = check()
    except Exception as exc:
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}", "seconds": time.perf_counter() - started}
    return {"ok": not wrong, "wrong": wrong, "seconds": time.perf_counter() - started}


def on_judge(ctx: JudgeContext) -> Outcome:
    findings, timings = [], []
    planned = ops(ctx.world_size)
    for op in planned:
        step = f"op.{op}"
        got = ctx.gather(step)
        found = judge_op(ctx, op, step, got.results, got.missing)
        ok = not found
        timings.append({"op": op, "status": "passed" if ok else "failed",
                        "seconds": round(max((p["seconds"] for p in got.results.values()), default=0.0), 4)})
        ctx.exchange.decide(step, {"go": ok})
        findings += found
        if not ok:
            break
    ctx.facts["collectives"] = timings
    passed = sum(t["status"] == "passed" for t in timings)
    return Outcome.judged(findings, f"{passed}/{len(planned)} ops verified"
                                    + (f", {timings[-1]['op']} failed" if passed < len(timings) else ""))


@emits("collective-timeout", "collective-wrong-result")
def judge_op(ctx: JudgeContext, op: str, step: str, results: dict[int, dict], missing: list[int]) -> list[Finding]:
    """Findings for one verified op: ranks that never entered or finished first, their errors folded under."""
    errors = {r: p["error"] for r, p in results.items() if "error" in p}
    culprits = missing_findings(ctx, op, missing, enter_step=step)
    failures = error_findings(ctx, op, errors, fallback="collective-timeout") if errors else []
    if culprits:
        culprits[0].secondary.extend(failures)
        return culprits
    wrong = {r: p["wrong"] for r, p in results.items() if p.get("wrong")}
    if wrong:
        failures.append(Finding(
            "collective-wrong-result", "error",
            f"{op} returned wrong data on rank{'s' if len(wrong) > 1 else ''} {ranges(wrong)}",
            confidence=0.9, ranks=sorted(wrong), hosts=ctx.hosts_of(list(wrong)),
            evidence=[Evidence(ctx.who(r), line) for r, lines in sorted(wrong.items()) for line in lines][:8]))
    return failures


STAGE = Stage("collectives", "Collectives (verified results)", on_rank, on_judge)
