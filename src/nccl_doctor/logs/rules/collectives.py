"""Clues about what the ranks called: NCCL COLL calls and PyTorch's DETAIL fingerprints compared across ranks,
and communicators created before each rank chose its GPU."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator

from ...model import Evidence
from ...model import ranges
from ..records import Event, Proc
from ..evidence import MAX_EVIDENCE, Clue, LogView, ranks_of
from . import rule


@rule("coll-calls-diverge")
def rule_coll_calls(view: LogView) -> Iterator[Clue]:
    """NCCL_DEBUG_SUBSYS=COLL: at the same opCount some processes issue a different collective, or the same
    collective with another element count or datatype."""
    by_count: dict[tuple[int, int], dict[str, list[tuple[Proc, Event]]]] = defaultdict(lambda: defaultdict(list))
    for proc in view.col.procs:
        for opcount, op, count, _comm, event in proc.colls:
            call = f"{op}(count {count}, datatype {event.caps.get('dtype', '?')})"
            by_count[(int(event.caps.get("nranks", 0)), opcount)][call].append((proc, event))
    for (_nranks, opcount), ops in sorted(by_count.items(), key=lambda kv: kv[0][1]):
        if len(ops) < 2:
            continue
        majority = max(ops, key=lambda op: len({id(p) for p, _ in ops[op]}))
        minority = {id(p): (p, e) for op, items in ops.items() if op != majority for p, e in items}.values()
        diverged = ", ".join(proc_name(p, e) for p, e in minority)
        listing = "; ".join(f"{op} on {len({id(p) for p, _ in items})} process(es)" for op, items in sorted(ops.items()))
        evidence = [Evidence(e.source, e.text, e.line) for op in sorted(ops) for _, e in ops[op][:2]]
        yield Clue("coll-calls-diverge", f"at opCount {opcount:x} processes issue different collectives ({listing}): "
                   f"{diverged} diverged", evidence=tuple(evidence[:MAX_EVIDENCE]),
                   ranks=frozenset(r for p, _ in minority for r in p.ranks),
                   hosts=frozenset(h for p, _ in minority for h in p.hosts),
                   fix=(f"Make {diverged} issue the same collective sequence as the others (a rank-dependent branch "
                        "or a different stream/communicator there).",))
        return


def proc_name(proc: Proc, event: Event) -> str:
    if proc.ranks and proc.rank_inferred:
        return (f"{event.host or '?'} pid {event.pid} (GPU {ranges(proc.devs, most=8)}, likely rank "
                f"{ranges(proc.ranks, most=8)})")
    if proc.ranks:
        return "rank " + ranges(proc.ranks, most=8)
    dev = re.match(r"\S+:\d+:\d+ \[(\d+)\]", event.text)
    host = event.host or (min(proc.hosts) if proc.hosts else "?")
    return f"{host} pid {event.pid}" + (f" (GPU {dev.group(1)})" if dev else "")


@rule("fingerprints-diverge")
def rule_fingerprints(view: LogView) -> Iterator[Clue]:
    """TORCH_DISTRIBUTED_DEBUG=DETAIL fingerprints: once collectives failed, the rank whose last one differs."""
    latest: dict[int, Event] = {}
    for proc, e in view.facts("fingerprint"):
        rank = e.rank if e.rank is not None else (min(proc.ranks) if len(proc.ranks) == 1 else None)
        if rank is not None and (rank not in latest or e.order > latest[rank].order):
            latest[rank] = e
    failed = view.events_for("collective-mismatch") or view.events_for("collective-timeout")
    if len(latest) < 2 or not failed:
        return  # without a failure, fingerprints taken at different moments differ for no reason
    groups: dict[tuple[str, ...], set[int]] = defaultdict(set)
    for rank, e in latest.items():
        groups[tuple(e.caps.get(k, "") for k in ("seq", "op", "shape", "dtype"))].add(rank)
    if len(groups) < 2:
        return
    sizes = sorted((len(g) for g in groups.values()), reverse=True)
    majority = max(groups.values(), key=len) if sizes[0] > sizes[1] else set()
    diverged = set(latest) - majority
    listing = "; ".join(f"ranks {ranges(g, most=8)}: {fingerprint(latest[min(g)])}" for g in groups.values())
    ordered = sorted(latest.values(), key=lambda e: e.order)
    yield Clue("fingerprints-diverge",
               (f"rank {ranges(diverged, most=8)} ran a different collective than the others" if majority
                else "ranks ran different collectives") + f" ({listing})",
               evidence=tuple(Evidence(e.source, e.text, e.line) for e in ordered[:4]), ranks=frozenset(diverged))


def fingerprint(e: Event) -> str:
    caps = e.caps
    return " ".join(filter(None, (caps.get("op"), f"#{caps['seq']}" if caps.get("seq") else "",
                                  caps.get("shape"), caps.get("dtype"))))


@rule("invalid-usage-before-set-device")
def rule_invalid_usage(view: LogView) -> Iterator[Clue]:
    """ncclInvalidUsage raised from a barrier or after PyTorch guessed the device: set_device came too late."""
    usage = view.events_of("invalid-usage")
    barrier, guess = view.hint("barrier"), view.hint("device_guess")
    if usage and (barrier or guess):
        yield Clue("invalid-usage-before-set-device",
                   "ncclInvalidUsage while creating the communicator for "
                   + ("a barrier" if barrier else "a collective on a guessed device")
                   + ": ranks were bound to GPUs by rank number, not the GPUs the job selected",
                   events=tuple((barrier + guess)[:2] + usage), ranks=ranks_of(usage))


@rule("device-guessed")
def rule_device_guessed(view: LogView) -> Iterator[Clue]:
    """The job failed after PyTorch guessed the GPUs by rank number: the guess may be wrong."""
    guess = view.hint("device_guess")
    failed = view.failed or view.failure_lines()  # healthy jobs print the guess too
    if guess and failed and not view.events_of("invalid-usage"):  # with ncclInvalidUsage: rule_invalid_usage
        yield Clue("device-guessed", "the process group did not know each rank's GPU and guessed it from the rank "
                   "number: a wrong guess puts two ranks on one GPU or hangs the first collective",
                   events=tuple(guess[:3]), ranks=ranks_of(guess),
                   fix=("Call `torch.cuda.set_device(local_rank)` before `init_process_group`, or pass "
                        "`device_id=torch.device('cuda', local_rank)` to it.",))


FORCED = ("NCCL_PROTO", "NCCL_ALGO")


@rule("wrong-results-with-forced-protocol")
def rule_wrong_results(view: LogView) -> Iterator[Clue]:
    """Collectives returned wrong data while NCCL_PROTO or NCCL_ALGO forces a choice: the forced protocol does not
    fit the path (LL128 over sockets or a PCIe/NIC path that does not keep its ordering guarantees)."""
    wrong = view.events_for("collective-wrong-result")
    forced = [(e.caps["var"], e.caps["value"], e) for name in ("nccl_env_cmd", "nccl_env") for _, e in view.facts(name)
              if e.caps.get("var") in FORCED]
    if wrong and forced:
        var, value, e = forced[0]
        yield Clue("wrong-results-with-forced-protocol", f"the results were wrong while {var}={value} forced NCCL's "
                   "choice: the forced protocol or algorithm does not fit this path", events=(e, wrong[0]),
                   fix=(f"Unset {var} and rerun the test: NCCL picks protocols per path (LL128 only where the hardware "
                        "keeps its ordering guarantees).",))
