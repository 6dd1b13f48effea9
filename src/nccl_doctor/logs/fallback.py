"""When the signatures alone do not decide: known NCCL defects by version, and errors nobody recognises.

rule_known_bugs: some messages are what a range of NCCL releases prints by mistake (a signature's
`fixed_in`). With an older NCCL in the logs the cause becomes nccl-known-bug; with no version visible the
signature's own cause stays first and the defect is kept as the alternative under it.

rule_fallback: an NCCL WARN, a `file:line -> N` error chain or a distributed exception that no signature
explains must not end in a silent "ok". It becomes a low-confidence finding, worded as a fallback: the cause
usual for the NCCL source file that warned, else for the ncclResult code the chain propagated, else the
generic one (catalog/signatures.toml [fallback]). It is an error when the job visibly failed (an exception,
or a WARN followed by an error chain), a warning otherwise.
"""

from __future__ import annotations

from collections import Counter

from ..catalog import cause as lookup_cause
from ..model import Severity
from .candidates import Candidate, Context
from .collect import Event
from .signatures import Fallback, fallback, version_tuple

RESULT_NAMES = {1: "ncclUnhandledCudaError", 2: "ncclSystemError", 3: "ncclInternalError",
                4: "ncclInvalidArgument", 5: "ncclInvalidUsage", 6: "ncclRemoteError", 7: "ncclInProgress"}


def _dotted(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))


def rule_known_bugs(ctx: Context, cands: dict[str, Candidate]) -> None:
    """Messages of a known NCCL defect: decided by the NCCL version the logs show."""
    versions = sorted({version_tuple(e.caps["version"]) for _, e in ctx.facts("nccl_version")})
    shown = ", ".join(map(_dotted, versions))
    for cand in list(cands.values()):
        flagged = [e for e in cand.events if e.sig.fixed_in]
        if not flagged:
            continue
        fixed_in = max(e.sig.fixed_in for e in flagged)  # type: ignore[type-var]
        fixed = _dotted(fixed_in)
        older = [v for v in versions if v < fixed_in]
        if cand.cause == "nccl-known-bug":
            seen_here = f" (the logs show {shown})" if versions else ""
            cand.fix.insert(0, f"Upgrade NCCL to {fixed} or newer{seen_here}.")
            if versions and not older:
                cand.message += f" - NCCL {shown} already has the {fixed} fix: this GPU needs a newer release still"
            elif older:
                cand.confidence = max(cand.confidence, 0.9)
                cand.message = f"NCCL {shown} is older than {fixed}, which fixed this defect: {cand.message}"
        elif older:
            cands["nccl-known-bug"] = Candidate(
                cause="nccl-known-bug", weight=cand.weight + 5, confidence=0.85, role="rule",
                message=f"NCCL {shown} is older than {fixed}, which fixed the defect behind this message: "
                        f"{cand.message}",
                events=cand.events, ranks=set(cand.ranks), hosts=set(cand.hosts),
                explains={cand.cause} | cand.explains, fix=[f"Upgrade NCCL to {fixed} or newer."])
        elif not versions:
            cand.explains.add("nccl-known-bug")
            cands.setdefault("nccl-known-bug", Candidate(
                cause="nccl-known-bug", weight=max(cand.weight - 30, 20), confidence=0.35, role="rule",
                message=(f"alternative: NCCL releases before {fixed} print this even when the setup is right (a "
                         "known defect); the logs do not show the NCCL version"),
                events=flagged[:1], ranks=set(cand.ranks), hosts=set(cand.hosts),
                fix=[f"Check the NCCL version (`NCCL_DEBUG=VERSION`); below {fixed}, upgrade first."]))


def rule_fallback(ctx: Context, cands: dict[str, Candidate]) -> None:
    """An NCCL WARN, error chain or distributed exception that no signature explains: say so, with a best guess."""
    if any(c.severity == Severity.ERROR for c in cands.values()):
        return
    warns = [e for e in ctx.hint("nccl_warn") if e.caps.get("file") or e.caps.get("nccl")]  # not any "WARN"
    dist = ctx.hint("dist_error")
    chain = [e for e in ctx.hint("nccl_backtrace") if e.caps.get("rc", "0") != "0"]
    if not (warns or dist or chain):
        return
    fb = fallback()
    cause, why = _best_guess(fb, warns, chain, dist)
    failed = bool(dist or (warns and chain))
    first = (warns or dist or chain)[0]
    title = lookup_cause(cause).title.rstrip(".")
    cands.setdefault(cause, Candidate(
        cause=cause, weight=20, confidence=fb.confidence, role="rule",
        severity=Severity.ERROR if failed else Severity.WARNING,
        message=(f"fallback, no known signature matched: {first.message[:140]!r} ({why}). Usual cause of "
                 f"that: {title}"),
        events=warns[:3] + chain[:2] + dist[:3],
        fix=["Search the NCCL and PyTorch issue trackers for the exact line shown; rerun with `NCCL_DEBUG=INFO` "
             "and give `nccl-doctor logs` every rank's output for a firmer diagnosis."]))


def _best_guess(fb: Fallback, warns: list[Event], chain: list[Event], dist: list[Event]) -> tuple[str, str]:
    """The cause for the source file that warned, else for the propagated ncclResult, else the generic one."""
    for w in warns:
        path = w.caps.get("file") or ""
        cause = fb.cause_for_source(path) if path else None
        if cause:
            return cause, f"an NCCL WARN from {path}"
    codes = Counter(int(e.caps["rc"]) for e in chain if e.caps.get("rc", "").isdigit())
    for code, _ in codes.most_common():
        if code in fb.by_result:
            return fb.by_result[code], f"{RESULT_NAMES.get(code, 'ncclResult')} (-> {code}) propagated up the stack"
    if dist and not warns and all("ncclCommWatchdog" in e.text for e in dist):
        return fb.watchdog, "the NCCL watchdog aborted the process"
    return fb.generic, "nothing more specific in the log"
