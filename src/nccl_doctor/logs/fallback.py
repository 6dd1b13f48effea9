"""When the signatures alone do not decide: known NCCL defects by version, and errors nobody recognises.

rule_known_bugs: some messages are what a range of NCCL releases prints by mistake (a signature's
`fixed_in`). With an older NCCL in the logs the cause becomes nccl-known-bug; with no version visible the
signature's own cause stays first and the defect is kept as the alternative under it.

rule_fallback: an NCCL WARN, a `file:line -> N` error chain or a distributed exception that no signature
explains must not end in a silent "ok". It becomes a low-confidence finding, worded as a fallback: the cause
usual for the NCCL source file that warned, else for the ncclResult code the chain propagated, else the
generic one (catalog/signatures.toml [fallback]). It is an error when the job visibly failed (an exception,
or a WARN followed by an error chain), a warning otherwise.

rule_nccl_crash: a fatal signal (segfault banner) whose backtrace runs through libnccl, or that hit right
after the process's own NCCL output with no error of its own, is a crash inside NCCL: a defect to upgrade
away, not a peer that died.
"""

from __future__ import annotations

import re
from collections import Counter

from ..catalog import cause as lookup_cause
from ..model import Evidence, Severity
from .candidates import Candidate, Context
from .collect import Event
from .signatures import Fallback, fallback, version_tuple

RAS = re.compile(r"\bRAS\b|\bras[A-Z]\w+")  # NCCL's RAS subsystem: its log lines and functions
CRASH_NEAR_NCCL = 3  # lines between a process's last NCCL line and a crash banner that still tie the two
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


def rule_nccl_crash(ctx: Context, cands: dict[str, Candidate]) -> None:
    """A segfault/fatal signal inside NCCL: frames in libnccl (strong) or NCCL's output just before it (weak)."""
    crashes = ctx.events_of("segfault")
    specific = [c for c in cands.values() if c.role != "echo" and c.weight >= 50]
    if not crashes or specific:
        return  # no crash, or an error that explains it (OOM, EFA fork, ...)
    frames = ctx.hint("nccl_frame")
    before = [] if frames else _nccl_lines_before(ctx, crashes)
    if not (frames or before):
        return
    versions = sorted({e.caps["version"] for _, e in ctx.facts("nccl_version")})
    release = f"NCCL {', '.join(versions)}" if versions else "NCCL (version not in the log)"
    where = (f"its backtrace runs through libnccl ({frames[0].message.strip()[:90]!r})" if frames else
             f"it hit right after the process's NCCL output ({before[0][2][:90]!r}) with no error reported")
    context = " ".join([e.text for e in frames[:4]] + [t for _, _, t in before])
    fix = ["Upgrade NCCL to the newest release (a torch wheel that bundles it or `pip install -U nvidia-nccl-cu12`) "
           "and check the NCCL release notes and issues for a crash in the same function."]
    if RAS.search(context):
        fix.append("NCCL's RAS subsystem shows in the crash context: `NCCL_RAS_ENABLE=0` (NCCL >= 2.24) turns it "
                   "off as a workaround until the upgrade.")
    fix.append("Keep the backtrace (with `NCCL_DEBUG=INFO`, and a libnccl with symbols if possible) for the report.")
    cands["nccl-known-bug"] = Candidate(
        cause="nccl-known-bug", weight=70 if frames else 45, confidence=0.7 if frames else 0.45, role="rule",
        message=f"the process crashed ({crashes[0].message.strip()[:90]!r}) and {where}: a crash inside {release}",
        events=crashes[:2] + frames[:3], extra_evidence=[Evidence(s, t, n) for s, n, t in before[:1]],
        explains={"rank-died"}, fix=fix)


def _nccl_lines_before(ctx: Context, crashes: list[Event]) -> list[tuple[str, int, str]]:
    """Processes whose last output was an NCCL line just before a crash banner in the same file."""
    lines = [p.last_line for p in ctx.col.procs if p.last_line and "NCCL" in p.last_line[2]]
    return [ln for ln in lines for c in crashes if ln[0] == c.source and 0 < c.line - ln[1] <= CRASH_NEAR_NCCL]


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
