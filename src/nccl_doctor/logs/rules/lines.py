"""Clues from matched lines: each error signature seen, which error came first, known NCCL defects by
version, errors that no signature explains (the fallback), and logs that only resemble labelled failures.

Known defects: some messages are what a range of NCCL releases prints by mistake (a signature's `fixed_in`).
With an older NCCL in the logs the defect is strong evidence; with no version visible it is the weak
alternative. Fallback: an NCCL WARN, a `file:line -> N` error chain or a distributed exception that no
signature explains must not end in a silent "ok": it becomes a weak clue for the cause usual for the NCCL
source file that warned, else for the propagated ncclResult code, else the generic one
(catalog/signatures.toml [fallback]).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from ...catalog import cause as lookup_cause
from ...model import Severity
from ..records import Event
from ..evidence import Clue, LogView, clip, hosts_in, observation, ranks_of, who
from ...catalog.env_vars import version_tuple
from .. import resemblance
from ..signatures import Fallback, fallback, signatures
from . import rule

MAX_TOLD = 4  # lines shown for a guess from resemblance
RESULT_NAMES = {1: "ncclUnhandledCudaError", 2: "ncclSystemError", 3: "ncclInternalError",
                4: "ncclInvalidArgument", 5: "ncclInvalidUsage", 6: "ncclRemoteError", 7: "ncclInProgress",
                8: "ncclTimeout"}


@rule(*[s.id for s in signatures() if s.is_error])
def rule_signatures(view: LogView) -> Iterator[Clue]:
    """Each error signature seen: its lines, on every rank that printed them."""
    for sig_id, events in view.by_signature.items():
        yield Clue(sig_id, describe(events), events=tuple(events),
                   ranks=ranks_of(events) | named_ranks(events), hosts=hosts_in(events))


def describe(events: list[Event]) -> str:
    first = min(events, key=lambda e: e.order)
    more = f" ({len(events)} lines)" if len(events) > 1 else ""
    return f"{who(events)}{clip(first.message or first.text)}{more}"


def named_ranks(events: list[Event]) -> frozenset[int]:
    """Ranks a message itself names ('rank 1 and rank 0 both on CUDA device ...')."""
    return frozenset(int(v) for e in events for k, v in e.caps.items() if k.startswith("rank_") and v.isdigit())


@rule("first-error")
def rule_first_error(view: LogView) -> Iterator[Clue]:
    """The specific error that happened before every other one, where the logs order them (timestamps, or
    lines of one file): the first failure is usually the root cause, the later ones its consequences."""
    earliest: dict[str, Event] = {}
    for e in view.events:
        if e.sig.role != "root" or e.cause is None or lookup_cause(e.cause).symptom:
            continue
        if e.cause not in earliest or e.order < earliest[e.cause].order:
            earliest[e.cause] = e
    if len(earliest) < 2:
        return
    first = min(earliest.values(), key=lambda e: e.order)
    if all(before(first, other) for other in earliest.values() if other is not first):
        yield Clue("first-error", f"{who([first])}the first error in the logs: {clip(first.message)}",
                   events=(first,), cause=first.cause)


def before(a: Event, b: Event) -> bool:
    """a certainly happened before b (same timestamp kind, or earlier in the same file)."""
    if a.ts is not None and b.ts is not None and a.ts_kind == b.ts_kind:
        return a.ts < b.ts
    return a.source == b.source and a.line < b.line


@rule("fixed-in-later-release", "maybe-fixed-in-later-release", "fixed-release-still-fails")
def rule_known_bugs(view: LogView) -> Iterator[Clue]:
    """Messages of a known NCCL defect, judged by the NCCL version the logs show."""
    versions = sorted({version_tuple(v) for v in view.versions()})
    shown = ", ".join(map(dotted, versions))
    for sig_id, events in view.by_signature.items():
        sig = events[0].sig
        if not sig.fixed_in:
            continue
        fixed = dotted(sig.fixed_in)
        older = [v for v in versions if v < sig.fixed_in]
        common = dict(events=tuple(events[:3]), ranks=ranks_of(events), hosts=hosts_in(events))
        if older:
            yield Clue("fixed-in-later-release", f"NCCL {shown} is older than {fixed}, which fixed the defect "
                       f"behind this message: {describe(events)}", cause="nccl-known-bug",
                       explains=frozenset({sig.cause}) if sig.cause else frozenset(),
                       fix=(f"Upgrade NCCL to {fixed} or newer.",), **common)
        elif not versions:
            yield Clue("maybe-fixed-in-later-release", f"NCCL releases before {fixed} print this even when the "
                       "setup is right (a known defect); the logs do not show the NCCL version",
                       cause="nccl-known-bug",
                       fix=(f"Check the NCCL version (`NCCL_DEBUG=VERSION`); below {fixed}, upgrade first.",),
                       **common)
        elif sig.cause == "nccl-known-bug":
            yield Clue("fixed-release-still-fails", f"NCCL {shown} already has the {fixed} fix: this GPU or "
                       "setup needs a newer release still", cause="nccl-known-bug",
                       fix=("Upgrade to the newest NCCL release.",), **common)


def dotted(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))


@rule("template-fragment")
def rule_fragments(view: LogView) -> Iterator[Clue]:
    """Lines that hold most of a source template's words: the template's cause, weaker by the share missing."""
    by_template: dict[str, list[Event]] = {}
    for e in view.hint("template_fragment"):
        by_template.setdefault(e.sig.id, []).append(e)
    base = observation("template-fragment")
    for events in by_template.values():
        sig = events[0].sig
        if sig.cause is None:
            continue
        coverage = max(float(e.caps.get("coverage", 0)) for e in events)
        yield Clue("template-fragment", f"{who(events)}{clip(events[0].message)} - reads as "
                   f"{clip(events[0].caps.get('template', ''), 90)!r} ({coverage:.0%} of its words; "
                   f"{sig.note.split(' - ')[0]})", events=tuple(events),
                   cause=sig.cause, strength=round(base.causes[sig.cause] * sig.strength * coverage, 3),
                   ranks=ranks_of(events) | named_ranks(events), hosts=hosts_in(events))


@rule("unrecognised-error")
def rule_fallback(view: LogView) -> Iterator[Clue]:
    """An NCCL WARN, error chain or distributed exception that no signature explains: a weak best guess."""
    warns, chain, dist = fallback_inputs(view)
    if not (warns or dist or chain):
        return
    cause, why = best_guess(fallback(), warns, chain, dist)
    failed = bool(dist or (warns and chain))
    first = (warns or dist or chain)[0]
    title = lookup_cause(cause).title.rstrip(".")
    events = warns[:3] + chain[:2] + dist[:3]
    yield Clue("unrecognised-error", f"fallback, no known signature matched: {clip(first.message, 140)!r} "
               f"({why}). Usual cause of that: {title}", events=tuple(events), cause=cause,
               ranks=ranks_of(events), severity=Severity.ERROR if failed else Severity.WARNING,
               fix=("Search the NCCL and PyTorch issue trackers for the exact line shown; rerun with "
                    "`NCCL_DEBUG=INFO` and give `nccl-doctor logs` every rank's output for a firmer diagnosis.",))


def fallback_inputs(view: LogView) -> tuple[list[Event], list[Event], list[Event]]:
    """NCCL WARNs, failing error chains and distributed exceptions that no signature explains."""
    warns = [e for e in view.hint("nccl_warn") if e.caps.get("file") or e.caps.get("nccl")]  # not any "WARN"
    # Error chains and exceptions are the consequence of some error: unexplained only when none was recognised.
    dist = [] if view.failed else view.hint("dist_error")
    chain = [] if view.failed else [e for e in view.hint("nccl_backtrace") if e.caps.get("rc", "0") != "0"]
    return warns, chain, dist


def best_guess(fb: Fallback, warns: list[Event], chain: list[Event], dist: list[Event]) -> tuple[str, str]:
    """The cause for the source file that warned or where the error chain began, else for the propagated
    ncclResult, else the generic one."""
    # the first link of a chain printed is where the failure began
    found = by_source(fb, warns, "an NCCL WARN") or by_source(fb, sorted(chain, key=lambda e: e.order),
                                                              "an NCCL error chain")
    if found:
        return found
    codes = Counter(int(e.caps["rc"]) for e in chain if e.caps.get("rc", "").isdigit())
    for code, _ in codes.most_common():
        if code in fb.by_result:
            return fb.by_result[code], f"{RESULT_NAMES.get(code, 'ncclResult')} (-> {code}) propagated up the stack"
    if dist and not warns and all("ncclCommWatchdog" in e.text for e in dist):
        return fb.watchdog, "the NCCL watchdog aborted the process"
    return fb.generic, "nothing more specific in the log"


def by_source(fb: Fallback, events: list[Event], what: str) -> tuple[str, str] | None:
    """The cause for the first NCCL source file among the lines that has one, and why."""
    for e in events:
        path = e.caps.get("file") or ""
        cause = fb.cause_for_source(path) if path else None
        if cause:
            return cause, f"{what} from {path}"
    return None


RERUN_FOR_MORE = ("Rerun with `NCCL_DEBUG=INFO` (and `TORCH_DISTRIBUTED_DEBUG=DETAIL`) and give `nccl-doctor logs` "
                  "every rank's full output: a reading from the log's words rests on no known error line.")


@rule("resembles-labelled-cases", "resembles-other-cases")
def rule_resemblance(view: LogView) -> Iterator[Clue]:
    """The categories whose labelled real failures a failed log's words resemble most. With no error line
    recognised, the closest one is a weak guess; the next ones (all of them, when an error line was recognised)
    are alternatives for the differential of an unsure primary."""
    failed = view.failed or any(fallback_inputs(view))
    told = [] if failed else view.failure_lines()
    if not (failed or told):
        return  # a healthy log, or an application's own exception
    ranked = resemblance.table().ranked(view.words())[:resemblance.DIFFERENTIAL]
    for i, likeness in enumerate(ranked):
        words = f" ({', '.join(likeness.deciding)})" if likeness.deciding else ""
        cause = resemblance.usual_cause(likeness.category)
        if i == 0 and not failed:
            yield Clue("resembles-labelled-cases", f"no known error line; the log's words{words} are most like those "
                       f"of the {likeness.cases} labelled real failures of category {likeness.category}",
                       events=tuple(sorted(told, key=lambda e: e.order)[:MAX_TOLD]), ranks=ranks_of(told),
                       cause=cause, fix=(RERUN_FOR_MORE,))
        else:
            yield Clue("resembles-other-cases", f"the log's words{words} also resemble the {likeness.cases} labelled "
                       f"real failures of category {likeness.category}", cause=cause)


@rule("efa-context", "graph-file-set")
def rule_context(view: LogView) -> Iterator[Clue]:
    """Context that confirms what a signature suggests: EFA in use behind a fork-unsafe crash; NCCL_GRAPH_FILE or
    NCCL_TOPO_FILE set behind a topology error."""
    efa = view.hint("efa")
    if efa and view.events_for("efa-fork-unsafe"):
        yield Clue("efa-context", f"the job runs over EFA ({clip(efa[0].message, 80)!r})", events=tuple(efa[:1]))
    graph = view.hint("graph_file")
    if graph and view.events_for("nccl-graph-file"):
        names = " and ".join(sorted({e.caps["var"] for e in graph}))
        yield Clue("graph-file-set", f"{names} is set: NCCL reads the topology from a file instead of the machine",
                   events=tuple(graph[:2]),
                   fix=(f"Unset {names} (check /etc/nccl.conf and ~/.nccl.conf too).",))
