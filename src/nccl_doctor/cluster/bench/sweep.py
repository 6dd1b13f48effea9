"""Stage `sweep`: every requested collective over nccl-tests' sizes, out of place and in place.

Ranks stream through the sizes without waiting for the judge: each measured size is one store step
(`sweep.OP.SIZE`), published as soon as it is done, so the judge follows, holding every size to the
deadline and naming who hangs or fails and where. The judge turns the ranks' times into nccl-tests'
row (time combined across ranks, max by default; algbw, busbw, #wrong) and hands each row on at once
(`Events.measured`), so the table is printed as it is measured, and an interrupted sweep keeps its rows.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from ...model import Evidence, Finding, ranges
from ..ops import COLLECTIVES, IN_PLACE, OUT_OF_PLACE, Spec, levels_for
from ..judge import MARGIN, JudgeContext, Outcome, Stage
from ..stages.collectives import judge_op
from .options import DATATYPES, ELEMENT_BYTES, BenchOptions, sizes
from ...roads import emits

LAYOUTS = (OUT_OF_PLACE, IN_PLACE)


@dataclass(frozen=True)
class Cell:
    """One measured size of one collective: what both sides agree on before anything runs."""

    collective: str
    requested: int  # the size nccl-tests' loop reached
    count: int  # elements of that size in the datatype
    size: int  # nccl-tests' size column: the larger of the send and receive buffers, bytes

    @property
    def step(self) -> str:
        return f"sweep.{self.collective}.{self.requested}"


def plan(options: BenchOptions, backend: str, nranks: int) -> list[Cell]:
    """The cells of the sweep, in order; sizes too small to give every rank an element are left out, and so
    are collectives that need more ranks than there are (sendrecv on one rank)."""
    elem = ELEMENT_BYTES[options.datatype]
    cells = []
    for name in options.collectives:
        entry = COLLECTIVES[name]
        if nranks < entry.min_ranks:
            continue
        for requested in sizes(options.minbytes, options.max_bytes(backend), options.stepfactor, options.stepbytes):
            count = requested // elem
            if entry.param_count(count, nranks) == 0:
                continue
            cells.append(Cell(name, requested, count, max(entry.counts(count, nranks)) * elem))
    return cells


def spec_of(options: BenchOptions, nranks: int) -> Spec:
    return Spec(options.op, options.root, levels_for(options.op, DATATYPES[options.datatype], nranks))


# ------------------------------------------------------------------ rank side

def on_rank(ctx: Any) -> None:
    import torch

    from .harness import device_of, dtype_of, time_op

    options: BenchOptions = ctx.options
    n, rank = ctx.world.world_size, ctx.rank
    wait = timedelta(seconds=options.timeout + MARGIN)
    like = torch.empty(0, dtype=dtype_of(options.datatype), device=device_of(ctx))
    spec = spec_of(options, n)
    for cell in plan(options, ctx.plan["backend"], n):
        entry = COLLECTIVES[cell.collective]
        ctx.faults.before("sweep", cell.step)
        ctx.mark(cell.step)
        try:
            result = {layout: time_op(entry, cell.count, rank, n, like, spec, in_place=layout == IN_PLACE,
                                      iters=options.iters, warmup=options.warmup_iters, check=options.check,
                                      wait=wait)
                      for layout in LAYOUTS if layout in entry.layouts}
        except Exception as exc:
            ctx.publish(cell.step, {"error": f"{type(exc).__name__}: {exc}"})
            return  # the judge ends the run; peers still inside the op are ended by their watchdogs
        ctx.publish(cell.step, result)


# ------------------------------------------------------------------ judge side

def on_judge(ctx: JudgeContext) -> Outcome:
    options: BenchOptions = ctx.options  # type: ignore[assignment]
    backend, n = ctx.plan["backend"], ctx.world_size
    cells = plan(options, backend, n)
    rows: list[dict] = []
    sweep = ctx.facts["sweep"] = {"settings": options.settings(backend), "backend": backend, "ranks": n,
                                  "collectives": list(options.collectives), "rows": rows, "avg_busbw": {}}
    ctx.events.measured("sweep.start", sweep)
    findings: list[Finding] = []
    for index, cell in enumerate(cells):
        got = ctx.gather(cell.step)
        if got.missing or any("error" in p for p in got.results.values()):
            findings = judge_op(ctx, f"{cell.collective} at {cell.size} B", cell.step, got.results, got.missing)
            break
        rows.append(row(cell, got.results, options, n))
        ctx.events.measured("sweep.row", rows[-1])
        if index + 1 == len(cells) or cells[index + 1].collective != cell.collective:
            sweep["avg_busbw"] = average_busbw(rows)
            ctx.events.measured("sweep.collective", {"collective": cell.collective,
                                                     "avg_busbw": sweep["avg_busbw"].get(cell.collective)})
    sweep["avg_busbw"] = average_busbw(rows)
    findings += wrong_findings(ctx, rows)
    return Outcome.judged(findings, _detail(rows, cells))


def combine(times: list[float], average: int) -> float:
    """nccl-tests -a: 0 rank 0's time, 1 the mean, 2 the min, 3 the max across ranks."""
    return {0: lambda t: t[0], 1: statistics.fmean, 2: min, 3: max}[average](times)


def algbw_of(size: int, us: float) -> float:
    """GB/s (1e9 bytes) of a message of `size` bytes taking `us` microseconds, as nccl-tests counts it."""
    return size / (us * 1e-6) / 1e9 if us > 0 else 0.0


def busbw_of(collective: str, size: int, us: float, nranks: int) -> float:
    return algbw_of(size, us) * COLLECTIVES[collective].bus_factor(nranks)


def row(cell: Cell, results: dict[int, dict], options: BenchOptions, n: int) -> dict:
    """nccl-tests' row for one size, with each rank's own time kept for the report."""
    entry = COLLECTIVES[cell.collective]
    out: dict[str, Any] = {"collective": cell.collective, "size": cell.size,
                           "count": entry.param_count(cell.count, n), "type": options.datatype,
                           "redop": options.op if entry.reduces else "none",
                           "root": options.root if entry.rooted else -1}
    for layout in LAYOUTS:
        per_rank = [results[r][layout] for r in sorted(results) if layout in results[r]]
        if not per_rank:
            out[layout] = None  # torch offers this collective only in the other form
            continue
        us = combine([p["us"] for p in per_rank], options.average)
        wrong = [p["wrong"] for p in per_rank]
        out[layout] = {"time_us": round(us, 3), "algbw": round(algbw_of(cell.size, us), 6),
                       "busbw": round(busbw_of(cell.collective, cell.size, us, n), 6),
                       "wrong": None if None in wrong else sum(wrong),
                       "rank_us": [round(p["us"], 3) for p in per_rank],
                       "wrong_detail": {str(r): results[r][layout]["detail"] for r in sorted(results)
                                        if layout in results[r] and results[r][layout].get("wrong")}}
    return out


def average_busbw(rows: list[dict]) -> dict[str, float]:
    """nccl-tests' footer, per collective: the mean of every busbw figure printed."""
    found: dict[str, list[float]] = {}
    for r in rows:
        for layout in LAYOUTS:
            if r.get(layout):
                found.setdefault(r["collective"], []).append(r[layout]["busbw"])
    return {name: round(statistics.fmean(values), 6) for name, values in found.items()}


@emits("collective-wrong-result")
def wrong_findings(ctx: JudgeContext, rows: list[dict]) -> list[Finding]:
    """One finding per collective that returned wrong data, naming the ranks and their hosts."""
    findings = []
    for name in dict.fromkeys(r["collective"] for r in rows):
        bad = [(r, layout) for r in rows if r["collective"] == name for layout in LAYOUTS
               if r.get(layout) and r[layout]["wrong"]]
        if not bad:
            continue
        ranks = sorted({int(rank) for r, layout in bad for rank in r[layout]["wrong_detail"]})
        evidence = [Evidence(f"rank {rank} {name} {r['size']} B {layout}", line)
                    for r, layout in bad for rank, lines in r[layout]["wrong_detail"].items() for line in lines]
        findings.append(Finding(
            "collective-wrong-result", "error",
            f"{name} returned wrong data at {len(bad)} size{'s' if len(bad) > 1 else ''} (from "
            f"{bad[0][0]['size']} B) on rank{'s' if len(ranks) > 1 else ''} {ranges(ranks)}",
            confidence=0.9, ranks=ranks, hosts=ctx.hosts_of(ranks), evidence=evidence[:8]))
    return findings


def _detail(rows: list[dict], cells: list[Cell]) -> str:
    avg = average_busbw(rows)
    shown = ", ".join(f"{name} {value:.3g} GB/s" for name, value in avg.items())
    return f"{len(rows)}/{len(cells)} sizes; avg busbw {shown}" if rows else f"0/{len(cells)} sizes"


def skip(ctx: JudgeContext) -> str | None:
    return None if ctx.options.collectives else "not asked for (name a collective, or all)"  # type: ignore[attr-defined]


STAGE = Stage("sweep", "Sweep (nccl-tests sizes)", on_rank, on_judge, skip=skip)
