"""Whose fault a collective timeout is.

The ranks that report a timeout are the ones that waited; the culprit is a rank that did not. The evidence,
strongest first:

1. ranks that time out in different collectives at the same SeqNum: mismatched collectives;
2. a rank that lags (desync report, flight-recorder dump, lower SeqNum, never enqueued the collective, silent
   in per-rank logs, NCCL COLL calls behind): it hung or straggled - unless the log shows one-rank work;
3. one-rank work (timeout_rank0_only_work): the log shows checkpointing, evaluation, preprocessing or
   'on rank 0' work around the timeout (strong); or the waiting ranks sit in a synchronisation point - a
   barrier, a one-element all-reduce, a broadcast - and rank 0 is not among them (weak: a rank that stopped
   issuing collectives looks the same, so that reading is kept as the alternative);
4. CUDA-graph captured collectives (vLLM) with nobody lagging;
5. otherwise a timeout whose culprit the logs do not show.

If rank 0 itself reports the timeout it was waiting too, so the work was not on rank 0 alone.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field

from ...model import ranges
from ..records import Event
from ..evidence import Clue, LogView, who
from . import rule

TIMEOUT_SIGS = ("watchdog-timeout", "watchdog-timeout-detail", "watchdog-timeout-at-work", "blocking-wait-timeout",
                "gloo-timeout", "nonblocking-init-timeout", "watchdog-timeout-stack")
# Context hints: what the one-rank work was (the latest one seen names the sub-cause).
CONTEXT = (("checkpoint", "checkpoint save/load", "checkpoint-io"),
           ("evaluation", "evaluation/prediction", "rank0-evaluation"),
           ("preprocessing", "data preprocessing", "rank0-preprocessing"))
RECENT_LINES = 2000  # context further back than this in the timed-out file is an earlier phase of the job
EARLY_SEQ = 3  # a collective this early runs before training: setup barriers after preprocessing/loading
KNOWN_MISMATCH = 0.8  # a mismatch error this strong already says why the ranks waited


@dataclass
class Seen:
    """What the timeout lines say."""

    events: list[Event]  # every timeout line, with or without details
    store_waits: list[Event]
    detailed: list[Event] = field(init=False)  # the ones that name the collective
    timed_out: set[int] = field(init=False)
    seqs: dict[int, int] = field(init=False)
    timeout_ms: int = field(init=False)

    def __post_init__(self) -> None:
        self.detailed = [e for e in self.events if e.caps.get("op")]
        self.timed_out = {e.rank for e in self.events if e.rank is not None}
        self.seqs = {e.rank: int(e.caps["seq"]) for e in self.detailed if e.rank is not None and e.caps.get("seq")}
        self.timeout_ms = max((int(e.caps.get("timeout_ms") or e.caps.get("ms") or e.caps.get("wait_ms") or 0)
                               for e in self.events + self.store_waits), default=0)

    @property
    def all(self) -> tuple[Event, ...]:
        return tuple(self.events + self.store_waits)


@rule("timeout-summary", "timeout-mismatched-ops", "timeout-lagging-rank", "timeout-lagging-rank-in-evaluation",
      "timeout-during-evaluation", "timeout-cudagraph", "one-rank-context", "one-rank-said", "one-rank-sync-point",
      "one-rank-store-wait", "one-rank-progress", "one-rank-or-stopped", "store-key-never-set")
def rule_timeouts(view: LogView) -> Iterator[Clue]:
    """Whose fault is a collective timeout: lagging ranks, mismatched collectives, rank-0-only work."""
    seen = Seen(view.events_of(*TIMEOUT_SIGS), view.events_of("store-wait-timeout"))
    if not seen.all:
        return
    summary = _summary(seen)
    if any(e.sig.strength >= KNOWN_MISMATCH for e in view.events_for("collective-mismatch")):
        yield Clue("timeout-summary", summary, events=seen.all, ranks=frozenset(seen.timed_out))
        return
    mismatch = _mismatched_at_same_seq(seen.detailed)
    if mismatch:
        guilty, text = mismatch
        yield Clue("timeout-mismatched-ops", text, events=seen.all, ranks=frozenset(guilty),
                   hosts=view.hosts_of(guilty),
                   fix=(f"Compare what ranks {ranges(guilty, most=8)} run at that step with the others "
                        "(TORCH_DISTRIBUTED_DEBUG=DETAIL reports the mismatching call).",))
        return
    lagging, lag_text = _lagging_ranks(view, seen)
    work = list(_one_rank_work(view, seen, lagging, summary))
    if work:
        yield from work
        return
    if _recent(view, "cuda_graphs", seen) and not view.hint("eager") and not lagging:
        yield Clue("timeout-cudagraph", f"{summary}, in a job that captures NCCL collectives in CUDA graphs (no rank "
                   "lags behind)", events=tuple(view.hint("cuda_graphs")[:2]) + seen.all,
                   ranks=frozenset(seen.timed_out), hosts=view.hosts_of(seen.timed_out))
        return
    evaluation = _recent(view, "evaluation", seen)
    if lagging:
        yield Clue("timeout-lagging-rank-in-evaluation" if evaluation else "timeout-lagging-rank",
                   f"{view.culprits(lagging)}: {lag_text} - {summary}", events=seen.all, ranks=frozenset(lagging),
                   hosts=view.hosts_of(lagging), evidence=view.last_lines(lagging),
                   fix=(f"Look at what rank(s) {ranges(lagging, most=8)} were doing when the others timed out (their "
                        "log just before the timeout, `py-spy dump`).",))
        return
    if evaluation and 0 in seen.timed_out:
        yield Clue("timeout-during-evaluation", f"{summary} during evaluation/generation: some ranks took longer "
                   "than the timeout", events=tuple(evaluation[-2:]) + seen.all, ranks=frozenset(seen.timed_out))
        return
    never_completed = [p for p in view.col.procs for s in p.facts.get("pg_status", [])
                       if int(s.caps.get("completed") or s.caps.get("completed_old") or 0) < 0]
    detail = (" - nothing ever completed on this process group, which points at setup/connectivity rather than a "
              "slow rank") if never_completed else ""
    yield Clue("timeout-summary", f"{summary}{detail}", events=seen.all, ranks=frozenset(seen.timed_out),
               hosts=view.hosts_of(seen.timed_out), fix=_timeout_fix(view, seen))


# ---------------------------------------------------------------------------- one-rank work

@dataclass
class Reasons:
    """Evidence that one rank (usually rank 0) worked alone while the others waited."""

    given: list[tuple[str, str, tuple[Event, ...]]] = field(default_factory=list)  # (observation, why, lines)
    cause: str | None = None  # the sub-cause the latest context line names
    strong: bool = False  # the log says what the work was, or that it runs on rank 0
    early: bool = False  # a synchronisation point among the job's first collectives


def _one_rank_work(view: LogView, seen: Seen, lagging: set[int], summary: str) -> Iterator[Clue]:
    """Clues that one rank worked alone while the others waited, when the evidence points there."""
    if 0 in seen.timed_out and not (lagging and 0 not in lagging):
        return  # rank 0 itself waited: the work was not on rank 0 alone
    reasons = _one_rank_reasons(view, seen)
    if not reasons.given or (lagging and not reasons.strong):
        return  # nothing, or only circumstantial evidence against a named lagging rank
    store_only = bool(seen.store_waits and not seen.events)
    cause = reasons.cause or ("store-wait-timeout" if store_only else "rank0-preprocessing" if reasons.early
                              else "rank0-only-work")
    busy = view.culprits(lagging) if lagging else "rank 0"
    ranks = frozenset(lagging or ({0} if 0 not in seen.timed_out else set()))
    hosts = view.hosts_of(lagging)
    why = "; ".join(text for _, text, _ in reasons.given)
    for i, (obs, text, lines) in enumerate(reasons.given):
        message = (f"{busy} was {'' if reasons.strong else 'probably '}busy elsewhere while the others waited: "
                   f"{why} - {summary}") if i == 0 else text
        yield Clue(obs, message, events=lines + (seen.all if i == 0 else ()), cause=cause, ranks=ranks, hosts=hosts,
                   fix=_rank0_fix(seen) if i == 0 else ())
    if not reasons.strong and store_only:  # a key never set: its setter was busy, or never arrived at all
        yield Clue("store-key-never-set", f"alternative: {busy} never reached the store (it crashed or never "
                   "started, or was launched with another MASTER_ADDR, world size or node count) instead of working "
                   "alone - a store wait that ran out cannot tell the two apart", events=tuple(seen.store_waits[:2]),
                   ranks=ranks)
    elif not reasons.strong:  # the other reading of the same lines, kept as the alternative
        yield Clue("one-rank-or-stopped", f"alternative: {busy} had stopped issuing collectives (fewer batches than "
                   "the others, a hang, a crash) instead of working alone - the timeout lines alone cannot tell the "
                   "two apart", events=seen.all[:2], ranks=ranks)


def _one_rank_reasons(view: LogView, seen: Seen) -> Reasons:
    reasons = Reasons()
    latest: list[tuple[Event, str]] = []
    for name, label, cause in CONTEXT:
        recent = _recent(view, name, seen)
        if recent:
            reasons.given.append(("one-rank-context", f"{label} in the log ({recent[-1].message[:80]!r})",
                                  (recent[-1],)))
            latest.append((recent[-1], cause))
    said = _recent(view, "rank0_context", seen)
    shown = {(e.source, e.line) for _, _, lines in reasons.given for e in lines}
    if said and (said[-1].source, said[-1].line) in shown:
        obs, text, lines = reasons.given[-1]
        reasons.given[-1] = (obs, text + " - on rank 0 alone, it says", lines)
    elif said:
        reasons.given.append(("one-rank-said", f"the log says work runs on rank 0 alone ({said[-1].message[:80]!r})",
                              (said[-1],)))
    reasons.strong = bool(latest or said)
    reasons.cause = max(latest, key=lambda ec: ec[0].order)[1] if latest else None
    sync = _sync_point(seen)
    reasons.early = bool(sync and seen.seqs and max(seen.seqs.values()) <= EARLY_SEQ)
    if sync:
        first = ", at one of the first collectives" if reasons.early else ""
        waited = f"rank(s) {ranges(seen.timed_out, most=8)}" if seen.timed_out else "the ranks that reported it"
        reasons.given.append(("one-rank-sync-point", f"{waited} timed out waiting in {sync} and rank 0 did not report "
                              f"the timeout{first}", ()))
    if seen.store_waits and not seen.events:
        reasons.given.append(("one-rank-store-wait", "a TCPStore wait ran out after the full timeout", ()))
    progress = _recent(view, "progress_bar", seen)
    if progress and reasons.given:  # alone it is as likely the training loop's own bar
        reasons.given.append(("one-rank-progress", "a progress bar was running when the timeout hit",
                              tuple(progress[-1:])))
    return reasons


def _sync_point(seen: Seen) -> str | None:
    """How the timed-out collective waits on one rank, when every detailed timeout line agrees."""
    kinds = {_sync_kind(e) for e in seen.detailed}
    if 0 in seen.timed_out or len(kinds) != 1:  # no rank named at all: who waited is unknown, not rank 0
        return None
    return kinds.pop()


def _sync_kind(e: Event) -> str | None:
    op = e.caps.get("op", "").upper().lstrip("_")
    numel = e.caps.get("numel_in")
    if op == "BARRIER":
        return "a barrier"
    if op.startswith("BROADCAST"):
        return "a broadcast (the receivers wait for its source, usually rank 0)"
    if numel is not None and int(numel) <= 1 and op.startswith(("ALLREDUCE", "ALLGATHER", "REDUCE", "GATHER")):
        return f"a one-element {op} (how barrier() and flags or object sizes are exchanged)"
    return None


def _recent(view: LogView, hint: str, seen: Seen) -> list[Event]:
    """Context lines that can be the work in progress when the timeout hit (not an earlier phase of the job)."""
    first_line: dict[str, int] = {}
    for e in seen.all:
        first_line[e.source] = min(first_line.get(e.source, e.line), e.line)
    stamped = [e for e in seen.all if e.ts is not None]
    window = 1.5 * seen.timeout_ms / 1000 + 600 if seen.timeout_ms else None

    def fresh(h: Event) -> bool:
        if h.source in first_line and h.line < first_line[h.source] - RECENT_LINES:
            return False
        ref = min((e.ts for e in stamped if e.ts_kind == h.ts_kind), default=None)  # type: ignore[type-var]
        return not (window and h.ts is not None and ref is not None and h.ts < ref - window)

    return sorted((h for h in view.hint(hint) if fresh(h)), key=lambda e: e.order)


def _rank0_fix(seen: Seen) -> tuple[str, ...]:
    if not seen.timeout_ms:
        return ()
    return (f"The process-group timeout here is {seen.timeout_ms / 60000:g} min: measure how long the one-rank "
            "work takes, then move it off the critical path or set the timeout above it.",)


def _timeout_fix(view: LogView, seen: Seen) -> tuple[str, ...]:
    if len(seen.timed_out) <= 1 and len(view.col.procs) <= 1:
        return ("Only one rank's log was given: collect every rank's log and rerun `nccl-doctor logs DIR`.",)
    return ()


# ---------------------------------------------------------------------------- summaries and lag

def _summary(seen: Seen) -> str:
    if not seen.events:
        e = seen.store_waits[0]
        return f"{who(seen.store_waits)}store wait timed out ({e.message[:160]})"
    minutes = seen.timeout_ms / 60000
    when = f" after the {minutes:g} min timeout" if minutes else ""
    if not seen.detailed:
        return (f"{who(seen.events)}a collective timed out{when} (only the watchdog's checkTimeout stack was "
                "captured, not which collective)")
    by_key = Counter((e.caps.get("op", "?"), e.caps.get("seq"), e.caps.get("numel_in")) for e in seen.detailed)
    parts = [op + (f" SeqNum={seq}" if seq else "") + (f" NumelIn={numel}" if numel else "")
             for (op, seq, numel), _ in by_key.most_common(3)]
    return f"{who(seen.events)}collective timed out{when} ({'; '.join(parts)})"


def _mismatched_at_same_seq(timeouts: list[Event]) -> tuple[set[int], str] | None:
    by_seq: dict[str, dict[str, set[int]]] = defaultdict(lambda: defaultdict(set))
    for e in timeouts:
        if e.caps.get("seq") and e.rank is not None:
            by_seq[e.caps["seq"]][e.caps.get("op", "?")].add(e.rank)
    for seq, ops in by_seq.items():
        if len(ops) > 1:
            majority = max(ops, key=lambda op: len(ops[op]))
            guilty = {r for op, ranks in ops.items() if op != majority for r in ranks}
            listing = ", ".join(f"{op} on ranks {ranges(r, most=8)}" for op, r in sorted(ops.items()))
            return guilty, f"ranks timed out in different collectives at the same SeqNum {seq}: {listing}"
    return None


def _lagging_ranks(view: LogView, seen: Seen) -> tuple[set[int], str]:
    """Ranks that never reached the collective the others timed out in, with the reason we think so."""
    named: set[int] = set()
    for e in view.col.global_facts.get("desync", []):
        named |= {int(x) for x in re.findall(r"\d+", e.caps.get("ranks", ""))}
    if named:
        return named, "PyTorch's desync report names it as the lagging rank"
    fr_lag = _flight_recorder_lag(view)
    if fr_lag:
        return fr_lag
    seqs = seen.seqs
    ops = {e.caps.get("op") for e in seen.detailed if e.caps.get("seq")}
    if len(set(seqs.values())) > 1 and len(ops) == 1 and max(seqs.values()) - min(seqs.values()) <= 8:
        # Within one process group the ranks that time out sit at (nearly) the same SeqNum; far-apart
        # numbers or different collectives come from different groups and do not compare.
        top = max(seqs.values())
        behind = {r for r, s in seqs.items() if s < top}
        if len(behind) < len(seqs):
            listing = ", ".join(f"rank {r} at {s}" for r, s in sorted(seqs.items()) if r in behind)
            return behind, f"it is behind ({listing}; the others reached SeqNum {top})"
    status = {}
    for proc in view.col.procs:
        for e in proc.facts.get("pg_status", []):
            enq = e.caps.get("enqueued") or e.caps.get("enqueued_old")
            if enq is not None and proc.ranks:
                status[min(proc.ranks)] = int(enq)
    if seqs and status:
        target = max(seqs.values())
        behind = {r for r, enq in status.items() if enq < target}
        if behind:
            return behind, f"it never enqueued collective #{target}"
    silent = {r for p in view.col.procs for r in p.ranks if p.last_line and r not in seen.timed_out}
    if seen.timed_out and silent and _per_rank_logs(view):
        return silent, "it left output but never reported the timeout, so it was not inside the collective"
    colls = _coll_lag(view)
    if colls:
        return colls
    return set(), ""


def _per_rank_logs(view: LogView) -> bool:
    ranked = [p for p in view.col.procs if p.ranks]
    return len(ranked) > 1 and all(len(p.sources) == 1 for p in ranked) and \
        len({s for p in ranked for s in p.sources}) == len(ranked)


def _flight_recorder_lag(view: LogView) -> tuple[set[int], str] | None:
    dumps = {min(p.ranks): p.fr for p in view.col.procs if p.fr is not None and p.ranks}
    if len(dumps) < 2:
        return None
    last_seq: dict[int, int] = {}
    for rank, dump in dumps.items():
        seqs = [c.seq for c in dump.last.values() if not c.p2p]
        last_seq[rank] = max(seqs) if seqs else -1
    top = max(last_seq.values())
    behind = {r for r, s in last_seq.items() if s < top}
    if behind and len(behind) < len(last_seq):
        listing = ", ".join(f"rank {r} last #{last_seq[r]}" for r in sorted(behind))
        return behind, f"its flight-recorder dump stops earlier ({listing}; the others reached #{top})"
    return None


def _coll_lag(view: LogView) -> tuple[set[int], str] | None:
    last = {}
    for proc in view.col.procs:
        if proc.colls and proc.ranks:
            last[min(proc.ranks)] = max(c[0] for c in proc.colls)
    if len(last) < 2 or len(set(last.values())) < 2:
        return None
    top = max(last.values())
    behind = {r for r, v in last.items() if v < top}
    return behind, "its NCCL COLL calls stop at an earlier opCount than the others'"



@rule("waited-in-main-process-first")
def rule_waited_for_main_process(view: LogView) -> Iterator[Clue]:
    """Tracebacks that enter Hugging Face's `main_process_first()`: the ranks that raised there waited in its
    barrier while the main process preprocessed the data alone (on the way out, the main process itself)."""
    roles = {e.sig.role for e in view.events}
    if roles & {"root", "generic"} and "timeout" not in roles:
        return  # the barrier raised an error at once: waiting explains a timeout or a silent exit, not that
    entered = {(e.source, e.line) for e in view.hint("context_enter")}
    waiting = [e for e in view.hint("main_process_first") if (e.source, e.line + 1) in entered]
    if waiting:
        yield Clue("waited-in-main-process-first", "ranks raised while waiting in `main_process_first()`'s barrier "
                   f"({waiting[0].message.strip()[:80]!r}): the main process was preprocessing alone",
                   events=tuple(waiting[:2]), cause="rank0-preprocessing")
