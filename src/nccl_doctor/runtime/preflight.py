"""`nccl_doctor.preflight()`: the fast stages of `check`, in-process, at the start of a training script.

Every rank calls it (like a collective). It runs `check`'s own stages, on the job's store:
rendezvous (every rank arrived, no rank claimed twice), fingerprints (versions and settings compared
across ranks, lint), device binding (the GPU each rank really uses) and one small all_reduce whose
result is verified element by element, on the job's own process group when there is one (else on a
temporary one that leaves no trace). Rank 0 judges in a thread, as in `check`; every rank gets the
same report and, when it holds an error, raises (or warns, or logs) with it.
"""

from __future__ import annotations

import itertools
import logging
import os
import sys
import threading
import time
import uuid
import warnings
from datetime import timedelta
from typing import Any, TextIO

from ..cluster.faults import Faults
from ..cluster.judge import MARGIN, Judge, JudgeContext, Outcome, Stage
from ..cluster.launch import World
from ..cluster.options import Options
from ..cluster.rank import INTERNAL_PREFIX, RankContext
from ..cluster.stages import devices, fingerprints, rendezvous
from ..cluster.stages.collectives import judge_op
from ..cluster.store import Exchange
from ..cluster.watchdog import Liveness
from ..model import Finding, InputError, Report, Severity
from .job import Identity, agent_store, default_group_state, identity, job_store, keys, own_connection, side_store

log = logging.getLogger("nccl_doctor")
ON_FAILURE = ("raise", "warn", "log")
ELEMENTS_PER_RANK = 1024
_calls = itertools.count(1)  # every rank calls preflight the same number of times: a fresh namespace each


class PreflightFailed(RuntimeError):
    """The preflight found an error; `report` holds every finding."""

    def __init__(self, report: Report) -> None:
        first = report.ordered()[0]
        super().__init__(f"nccl-doctor preflight failed: [{first.cause}] {first.message}")
        self.report = report


def preflight(*, store: Any = None, group: Any = None, timeout: float = 30.0, on_failure: str = "raise",
              all_reduce: bool = True, out: TextIO | None = None) -> Report:
    """Run the fast stages of `check` across all ranks of this job; returns the report.

    store: the job's store (default: the default process group's, torchrun's agent store, or a store
        rank 0 hosts on NCCL_DOCTOR_PORT, default MASTER_PORT + 1; without a launcher, a world of one
        in this process).
    group: the process group to verify (default: the default group; before init_process_group a
        temporary one).
    timeout: deadline in seconds of each stage (a rank that never calls preflight is reported after it).
    on_failure: "raise" PreflightFailed, "warn" (warnings.warn) or "log" (logging) when there is an error.
    out: where rank 0 prints the report (default stderr).
    """
    if on_failure not in ON_FAILURE:
        raise ValueError(f"on_failure={on_failure!r}: expected one of {', '.join(ON_FAILURE)}")
    from ..cluster.run import quiet_torch

    quiet_torch()
    started = time.monotonic()
    ident = identity(group)
    pg, backend, _ = default_group_state(group)
    options = Options(backend=_backend_name(backend), timeout=timeout, quick=True)
    call = f"{ident.run_id}/{next(_calls)}"
    mine, judges, hosted = _connections(ident, store, timeout)  # `hosted` must live until every rank is done
    exchange = Exchange(keys(mine, "preflight", call))
    ctx = RankContext(_world(ident), ident.host, exchange, _user_env(), Faults(ident.rank), options, ("", 0),
                      state={"group": pg, "store": mine, "prefix": call})
    stages = _stages(all_reduce)
    judge = _start_judge(Exchange(keys(judges, "preflight", call)), ident, options, stages) if judges else None
    _follow(ctx, stages)
    report = _read_report(exchange, timeout)
    exchange.bye()
    if judge:
        judge.join(timeout + MARGIN)
    if hosted is not None and ident.rank == 0:
        exchange.wait_for_byes(ident.world_size)
    del hosted
    report.facts["preflight_seconds"] = round(time.monotonic() - started, 3)
    return _conclude(report, ident, on_failure, out)


# ------------------------------------------------------------------ where we talk

def _connections(ident: Identity, store: Any, timeout: float) -> tuple[Any, Any | None, Any | None]:
    """(this rank's connection, the judge's on rank 0, the store we host for the occasion, if any)."""
    base = job_store(store)
    hosted = None
    if base is None and ident.alone:  # a plain `python train.py`: a world of one, talking to itself
        from torch.distributed import HashStore

        base = hosted = HashStore()
    if base is None:
        base = agent_store(ident.world, time.monotonic() + timeout)
    if base is None:
        base = hosted = side_store(ident, timeout)
    mine = own_connection(base, timeout + MARGIN)
    return mine, (own_connection(base, timeout + MARGIN) if ident.rank == 0 else None), hosted


def _world(ident: Identity) -> World:
    w = ident.world
    local = int(os.environ.get("LOCAL_RANK", "0") or 0) if w is None else w.local_rank
    return World(rank=ident.rank, world_size=ident.world_size, local_rank=local,
                 local_world_size=w.local_world_size if w else 1, master_addr=w.master_addr if w else "?",
                 master_port=w.master_port if w else 0, launcher=w.launcher if w else "in-process",
                 agent_store=bool(w and w.agent_store), run_id=ident.run_id)


def _user_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(INTERNAL_PREFIX)}


def _backend_name(backend: str | None) -> str:
    """The job's backend as `check` names it; 'auto' before init_process_group."""
    if backend is None:
        return "auto"
    return "nccl" if "nccl" in backend else "gloo"


# ------------------------------------------------------------------ the stages: check's, with two in-process rank sides

def _binding_on_rank(ctx: RankContext) -> None:
    """The GPU this process really uses (not the one LOCAL_RANK suggests), without touching CUDA's state."""
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    local = ctx.world.local_rank
    pg = ctx.state.get("group")
    bound = getattr(pg, "bound_device_id", None) if pg is not None else None
    if bound is not None:
        device = bound.index
    elif torch.cuda.is_initialized():
        device = torch.cuda.current_device()
    else:
        device = local if local < count else None  # what a correct script will select
    binding = {"local_rank": local, "count": count, "visible": ctx.env.get("CUDA_VISIBLE_DEVICES", "<unset>"),
               "device": device}
    if device is not None:
        props = torch.cuda.get_device_properties(device)
        binding.update(uuid=str(getattr(props, "uuid", "")) or f"index {device}", name=props.name)
        ctx.state["device"] = device
    ctx.publish("devices", binding)


def _all_reduce_on_rank(ctx: RankContext) -> None:
    """One small all_reduce on the job's group (or a temporary one), its result checked element by element."""
    step = "op.all_reduce"
    ctx.mark(step)
    ctx.publish(step, _verified_all_reduce(ctx))
    ctx.verdict(step)


def _verified_all_reduce(ctx: RankContext) -> dict:
    import torch
    import torch.distributed as dist

    from ..cluster.ops import COLLECTIVES

    entry, n = COLLECTIVES["all_reduce"], ctx.world.world_size
    backend = ctx.plan.get("backend", "gloo")
    device = torch.device("cuda", ctx.state["device"]) if backend == "nccl" else torch.device("cpu")
    count = ELEMENTS_PER_RANK * n
    started = time.perf_counter()
    temporary = None
    try:
        bufs = entry.buffers(ctx.rank, n, count, torch.empty(0, dtype=torch.float32, device=device))
        bufs.recv.copy_(bufs.send)
        if ctx.state.get("group") is not None:
            work = dist.all_reduce(bufs.recv, group=ctx.state["group"], async_op=True)
        else:
            temporary = _temporary_group(ctx, backend, device)
            work = temporary.allreduce([bufs.recv])
        work.wait(timedelta(seconds=ctx.options.timeout))
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        wrong = entry.check(bufs, ctx.rank, n, count)
    except Exception as exc:
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}", "seconds": time.perf_counter() - started}
    finally:
        if temporary is not None and hasattr(temporary, "shutdown"):
            temporary.shutdown()
    return {"ok": not wrong, "wrong": wrong, "seconds": time.perf_counter() - started}


def _temporary_group(ctx: RankContext, backend: str, device: Any) -> Any:
    """A process group of our own that is never registered as the default: init_process_group stays free."""
    import torch.distributed as dist

    store = dist.PrefixStore(f"nccl-doctor/preflight/{ctx.state['prefix']}/pg/", ctx.state["store"])
    size, timeout = ctx.world.world_size, timedelta(seconds=ctx.options.timeout + MARGIN)
    if backend == "nccl":
        import torch

        torch.cuda.set_device(device)
        options = dist.ProcessGroupNCCL.Options()
        options._timeout = timeout
        return dist.ProcessGroupNCCL(store, ctx.rank, size, options)
    return dist.ProcessGroupGloo(store, ctx.rank, size, timeout)


def _all_reduce_on_judge(ctx: JudgeContext) -> Outcome:
    step = "op.all_reduce"
    got = ctx.gather(step)
    findings = judge_op(ctx, "all_reduce", step, got.results, got.missing)
    ctx.exchange.decide(step, {"go": not findings})
    seconds = max((p["seconds"] for p in got.results.values()), default=0.0)
    ctx.facts["collectives"] = [{"op": "all_reduce", "status": "failed" if findings else "passed",
                                 "seconds": round(seconds, 4)}]
    return Outcome.judged(findings, f"{ctx.plan.get('backend')} all_reduce of {len(got.results)} ranks "
                                    f"{'failed' if findings else 'verified'} in {seconds:.2f} s")


def _stages(all_reduce: bool) -> list[Stage]:
    binding = Stage("devices", devices.STAGE.title, _binding_on_rank, devices.STAGE.on_judge,
                    runs_after_failure=True, skip=devices.STAGE.skip)
    stages = [rendezvous.STAGE, fingerprints.STAGE, binding]
    if all_reduce:
        stages.append(Stage("all_reduce", "Verified all_reduce", _all_reduce_on_rank, _all_reduce_on_judge))
    return stages


# ------------------------------------------------------------------ both sides, in lockstep as in `check`

def _follow(ctx: RankContext, stages: list[Stage]) -> None:
    """Run the stages the judge calls for; a failure here is the judge's to report."""
    by_name = {s.name: s for s in stages}
    name: str | None = stages[0].name
    try:
        while name:
            by_name[name].on_rank(ctx)
            name = ctx.verdict(name).get("next")
    except SystemExit:  # rendezvous: another process holds this rank; the report says which
        pass
    except Exception as exc:
        log.debug("nccl-doctor preflight: rank %d: %s", ctx.rank, exc)


def _start_judge(exchange: Exchange, ident: Identity, options: Options, stages: list[Stage]) -> threading.Thread:
    ctx = JudgeContext(exchange, ident.world_size, options, ident.world.launcher if ident.world else "in-process",
                       Liveness(exchange), run_token=uuid.uuid4().hex[:12])

    def judge() -> None:
        try:
            report = Judge(ctx, stages).run()
        except Exception as exc:  # a bug must still release the ranks
            exchange.put("report", {"error": f"{type(exc).__name__}: {exc}"})
            return
        exchange.put("report", {"findings": [f.to_wire() for f in report.findings], "facts": report.facts})

    thread = threading.Thread(target=judge, name="nccl-doctor-preflight-judge", daemon=True)
    thread.start()
    return thread


def _read_report(exchange: Exchange, timeout: float) -> Report:
    """The judge's report: every stage is bounded, so it comes within a few stage deadlines."""
    try:
        got = exchange.get("report", 4 * (timeout + MARGIN))
    except Exception as exc:
        raise InputError(f"preflight: no report from rank 0 ({exc}); is rank 0 running preflight() too?") from None
    if "error" in got:
        raise RuntimeError(f"nccl-doctor preflight: internal error on rank 0: {got['error']}")
    return Report("preflight", [Finding.from_wire(f) for f in got["findings"]], got["facts"], order=None)


# ------------------------------------------------------------------ the verdict, on every rank

def _conclude(report: Report, ident: Identity, on_failure: str, out: TextIO | None) -> Report:
    if ident.rank == 0:
        _show(report, out or sys.stderr)
    if report.verdict != "error":
        return report
    if on_failure == "raise":
        raise PreflightFailed(report)
    first = report.ordered()[0]
    message = f"nccl-doctor preflight found an error on rank(s) {first.ranks or '?'}: [{first.cause}] {first.message}"
    if on_failure == "warn":
        warnings.warn(message, RuntimeWarning, stacklevel=3)
    else:
        log.error(message)
    return report


def _show(report: Report, out: TextIO) -> None:
    """Rank 0: one line when all is well, the whole report when something is not."""
    stages = report.facts.get("stages", [])
    passed = ", ".join(f"{s['name']} {s['status']}" for s in stages)
    worth = [f for f in report.findings if f.severity != Severity.INFO]
    if not worth:
        print(f"nccl-doctor preflight: ok in {report.facts.get('preflight_seconds', 0):.1f} s ({passed})",
              file=out, flush=True)
        return
    from ..render.text import render_text

    render_text(report, out)
