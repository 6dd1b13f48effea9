"""Clues about processes that died: fatal signals inside NCCL, bus errors on shared memory, the rank torchrun
names as the first failure, logs that hold only the echoes of a death, and bare system errors."""

from __future__ import annotations

import re
from collections.abc import Iterator

from ...catalog import cause as lookup_cause
from ...model import Evidence
from ..records import Event
from ..evidence import Clue, LogView, clip, hosts_in, ranks_of
from ...catalog.env_vars import version_tuple
from . import rule

RAS = re.compile(r"\bRAS\b|\bras[A-Z]\w+")  # NCCL's RAS subsystem: its log lines and functions
CRASH_NEAR_NCCL = 3  # lines between a process's last NCCL line and a crash banner that still tie the two
BUS_ERROR = re.compile(r"Bus error|SIGBUS|signal 7\b", re.IGNORECASE)
# Host names that containers get by default: docker's 12 hex digits, Kubernetes pod names.
CONTAINER_HOST = re.compile(r"^(?:[0-9a-f]{12}|[a-z0-9-]+-[a-z0-9]{5,10}-[a-z0-9]{5})$")
STRAY_CONNECTION_FIXED = (2, 27, 3)  # NCCL release that stopped failing on a stray bootstrap connection


def specific_errors(view: LogView) -> list[Event]:
    """Root errors that name a specific cause: when there are any, a crash or bare code is their consequence."""
    return [e for e in view.events if e.sig.role == "root" and not lookup_cause(e.cause).symptom]


@rule("bus-error-in-nccl", "crash-in-nccl-frames", "crash-after-nccl-output", "crash-loading-nccl")
def rule_nccl_crash(view: LogView) -> Iterator[Clue]:
    """A fatal signal inside NCCL: SIGBUS there is shared memory running out; other signals with frames in
    libnccl (strong) or right after the process's NCCL output (weak) are a crash inside NCCL."""
    crashes = view.events_of("segfault")
    if not crashes or specific_errors(view):
        return  # no crash, or an error that explains it (OOM, EFA fork, ...)
    loads = [e for e in view.hint("library_load") if any(c.source == e.source and 0 < c.line - e.line <= CRASH_NEAR_NCCL
                                                          for c in crashes)]
    if loads:
        yield Clue("crash-loading-nccl", f"the process died ({clip(crashes[0].message.strip(), 60)!r}) right after loading "
                   f"{loads[0].caps.get('path') or 'the NCCL library'}: a truncated or corrupt library file is mapped "
                   "(SIGBUS), or it is a build for another CUDA/driver", events=tuple(loads[:1] + crashes[:1]),
                   fix=("Delete the library and let it be installed again (`pip install --force-reinstall "
                        "nvidia-nccl-cu12`, or remove vLLM's cached copy under ~/.config/vllm/nccl), then check it "
                        "loads: `python -c \"import torch; print(torch.cuda.nccl.version())\"`.",))
        return
    frames = view.hint("nccl_frame") + view.hint("nccl_stack")
    before = [] if frames else nccl_lines_before(view, crashes)
    if not (frames or before):
        return
    bus = [e for e in crashes if BUS_ERROR.search(e.text)]
    where = (f"its backtrace runs through NCCL ({clip(frames[0].message.strip(), 90)!r})" if frames else
             f"it hit right after the process's NCCL output ({clip(before[0][2], 90)!r}) with no error reported")
    evidence = tuple(Evidence(s, t, n) for s, n, t in before[:1])
    if bus:
        containers = sorted({h for h in view.col.hosts_seen() | hosts_in(bus) if CONTAINER_HOST.match(h)})
        inside = f" on {', '.join(containers[:2])}, a container host name" if containers else ""
        yield Clue("bus-error-in-nccl", f"the process died of SIGBUS ({clip(bus[0].message.strip(), 90)!r}) and {where}"
                   f"{inside}: NCCL's shared-memory buffers in /dev/shm ran out of space", events=tuple(bus[:2] + frames[:2]),
                   evidence=evidence, ranks=ranks_of(bus), hosts=hosts_in(bus))
        return
    versions = view.versions()
    release = f"NCCL {', '.join(versions)}" if versions else "NCCL (version not in the log)"
    context = " ".join([e.text for e in frames[:4]] + [t for _, _, t in before])
    fix = ["Upgrade NCCL to the newest release (a torch wheel that bundles it or `pip install -U nvidia-nccl-cu12`) "
           "and check the NCCL release notes and issues for a crash in the same function."]
    if RAS.search(context):
        fix.append("NCCL's RAS subsystem shows in the crash context: `NCCL_RAS_ENABLE=0` (NCCL >= 2.24) turns it off "
                   "as a workaround until the upgrade.")
    fix.append("Keep the backtrace (with `NCCL_DEBUG=INFO`, and a libnccl with symbols if possible) for the report.")
    yield Clue("crash-in-nccl-frames" if frames else "crash-after-nccl-output",
               f"the process crashed ({clip(crashes[0].message.strip(), 90)!r}) and {where}: a crash inside {release}",
               events=tuple(crashes[:2] + frames[:3]), evidence=evidence, fix=tuple(fix))


def nccl_lines_before(view: LogView, crashes: list[Event]) -> list[tuple[str, int, str]]:
    """Processes whose last output was an NCCL line just before a crash banner in the same file."""
    lines = [p.last_line for p in view.col.procs if p.last_line and "nccl" in p.last_line[2].lower()]
    return [ln for ln in lines for c in crashes if ln[0] == c.source and 0 < c.line - ln[1] <= CRASH_NEAR_NCCL]


@rule("killed-by-sigkill", "first-failure-named")
def rule_elastic_root(view: LogView) -> Iterator[Clue]:
    """torchrun's 'Root Cause (first observed failure)' names the rank that failed first, and how it ended."""
    for block in view.col.elastic_root:
        rank = re.match(r"(\d+)", block.get("rank", ""))
        if not rank:
            continue
        r = int(rank.group(1))
        exitcode = block.get("exitcode", "")
        shown = Evidence(block["source"], f"Root Cause: rank {r} exitcode {exitcode}", block["line"])
        own = sorted((e for e in specific_errors(view) if e.rank == r), key=lambda e: e.order)
        if own:
            yield Clue("first-failure-named", f"torchrun names rank {r} as the first failure, and its first error is: "
                       f"{clip(own[0].message)}", events=(own[0],), evidence=(shown,), cause=own[0].cause,
                       ranks=frozenset({r}))
        elif exitcode.startswith("-9"):
            host = block.get("host")
            yield Clue("killed-by-sigkill", f"rank {r} on {host or '?'} was killed (exit code -9, SIGKILL): usually "
                       "the host's OOM killer or the scheduler", evidence=(shown,), ranks=frozenset({r}),
                       hosts=frozenset({host}) if host else frozenset(),
                       fix=(f"On {host or 'that host'}: `dmesg -T | grep -i -E 'killed process|out of memory'`.",))


@rule("only-echoes", "stray-bootstrap-connection")
def rule_echo_only(view: LogView) -> Iterator[Clue]:
    """Only echoes of a failure elsewhere (lost connections, remote errors): a peer died first - or, during
    bootstrap on NCCL < 2.27.3 with no rank reporting an error, a stray connection to the bootstrap port."""
    if any(e.sig.role in ("root", "generic", "timeout") for e in view.events):
        return
    echoes = view.events_for("rank-died")
    if not echoes:
        return
    closed = [e for e in echoes if e.sig.id == "connection-closed-by-peer"]
    in_bootstrap = any("bootstrap" in e.caps.get("file", "") for e in view.hint("nccl_backtrace"))
    versions = [version_tuple(v) for v in view.versions()]
    old_enough = not versions or min(versions) < STRAY_CONNECTION_FIXED
    if in_bootstrap and closed and old_enough and not view.facts("killed") and len(ranks_of(echoes)) <= 1:
        yield Clue("stray-bootstrap-connection", "bootstrap failed on 'Connection closed by remote peer' and no rank "
                   f"reports an error of its own: {clip(closed[0].message, 120)}", events=tuple(echoes),
                   fix=("If a scanner, health check or another job can reach the bootstrap port, that connection is "
                        "the 'peer'; NCCL >= 2.27.3 ignores it.",))
        return
    peers = sorted({e.caps["peer"] for e in closed if e.caps.get("peer")})
    yield Clue("only-echoes", "only secondary errors are visible (lost connections, remote errors): a peer process "
               "exited first" + (f"; the closed connection came from {', '.join(peers[:3])}" if peers else "")
               + ". Its own log holds the root cause.", events=tuple(echoes), ranks=ranks_of(echoes),
               hosts=hosts_in(echoes))


@rule("system-error-one-host", "system-error-hosts-unknown")
def rule_single_host_system_error(view: LogView) -> Iterator[Clue]:
    """'unhandled system error' on one host with nothing more specific: /dev/shm is the usual culprit. Where the
    log names no host at all, the job may span hosts, and an interface the peers cannot reach is as likely."""
    system = view.events_of("system-error")
    if not system or view.multi_host() or specific_errors(view):
        return
    fix = "Check `df -h /dev/shm` inside the container; rerun with NCCL_DEBUG=WARN to see the failing call."
    if view.col.hosts_seen():
        yield Clue("system-error-one-host", "ncclSystemError on a single host without a more specific NCCL WARN: "
                   "between local GPUs the system calls that fail are usually /dev/shm allocations (containers "
                   "default to 64 MB)", events=tuple(system), ranks=ranks_of(system), fix=(fix,))
        return
    yield Clue("system-error-hosts-unknown", "ncclSystemError without a more specific NCCL WARN, and the log names "
               "no host: on one host the failing system call is usually a /dev/shm allocation; across hosts, a "
               "socket to an interface the peers cannot reach", events=tuple(system), ranks=ranks_of(system),
               fix=(fix, "If the job spans hosts, run `nccl-doctor env` on each and compare NCCL_SOCKET_IFNAME."))
