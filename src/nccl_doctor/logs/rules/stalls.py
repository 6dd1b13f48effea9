"""Clues about jobs that stalled without an error: NCCL set up and then silence, a setup that stops in NVLS,
ACS on the PCI bridges, and stack dumps (py-spy, gdb) of hung processes."""

from __future__ import annotations

import re
from collections.abc import Iterator

from ...model import Evidence, Severity
from ..evidence import Clue, LogView, as_evidence, clip
from . import rule

NVLS_LAST_LINES = 2  # an NVLS setup line this close to its source's end is where the process stopped
QUIET_AFTER_SETUP = 40  # lines after NCCL's last setup line that still fit "nothing happened after init"
# GPU models without NVLink between boards: peer-to-peer goes over PCIe, where ACS/IOMMU break it.
PCIE_ONLY_GPU = re.compile(r"GeForce|TITAN|Quadro|RTX A\d000|RTX \d000 Ada|RTX PRO|\bL4\b|\bL40S?\b|\bA10G?\b|\bT4\b|"
                           r"Instinct MI\d+|Radeon")
# NCCL's INFO lines while it sets up NVLink SHARP (transport/nvls.cc): multicast objects, their binding and mapping.
# (Not 'NVLS multicast support is available': every init on an NVSwitch system prints it before NVLS is set up.)
NVLS_SETUP = re.compile(r"NCCL INFO NVLS (?:Bind mem|comm |UC handle|MC handle|register)", re.IGNORECASE)
LAUNCH_FRAMES = re.compile(r"ncclLaunchKernel|ncclStrongStreamLaunch|LaunchKernelBefore|cudaLaunchKernel|"
                           r"cuLaunchKernel|ncclLaunchPrepare|hostStreamPlanTask")


def ended(view: LogView) -> bool:
    """The log shows the job finishing or failing rather than stalling."""
    return bool(view.facts("comm_end") or view.facts("coll_done") or view.hint("error_line")
                or view.hint("dist_error") or view.failed)


@rule("silent-after-init", "silent-after-init-ranks-elsewhere", "silent-after-init-complete",
      "stalled-at-zero-progress", "pcie-only-gpus")
def rule_hang_after_init(view: LogView) -> Iterator[Clue]:
    """NCCL set up on several GPUs of one host, then nothing: the classic peer-to-peer (ACS/IOMMU) hang. Weak
    evidence (a log can also just be cut short): it grows when init visibly completed, when a progress bar
    sits at 0, and on boards whose GPUs talk over PCIe only. When the communicator is larger than what the log
    shows of its host, the other ranks are elsewhere and the stall is as likely between hosts."""
    if ended(view) or view.multi_host() or view.events:
        return
    procs = view.col.procs
    framework = any(p.facts.get("framework_collective") for p in procs)  # TensorFlow's or Paddle's NCCL set-up
    started = framework or any(p.init_phases or p.transports or p.facts.get("nccl_version") or p.facts.get("bootstrap")
                               or p.facts.get("tests_header") for p in procs)
    hosts_ranks = view.facts("rank_host")
    if not started or output_after_setup(view):
        return
    gpus = sorted({e.caps["gpu"] for _, e in hosts_ranks if e.caps.get("gpu")})
    processes = {pid for p in procs for pid in p.pids}
    here = max(len({e.caps["rank"] for _, e in hosts_ranks}), len(processes), len({d for p in procs for d in p.devs}))
    size = view.world_size() or 0
    if size > max(here, 1):
        yield Clue("silent-after-init-ranks-elsewhere",
                   f"NCCL set up a communicator of {size} ranks; the log shows {here} of them, on one host, and then "
                   "no progress, no result and no error: the other ranks run on hosts this log does not hold, and a "
                   "setup that stops across hosts is most often a connection between them that cannot be made",
                   events=tuple(e for _, e in hosts_ranks[:2]), severity=Severity.WARNING,
                   fix=("Rerun with `NCCL_DEBUG=INFO` and read the logs of every host together "
                        "(`nccl-doctor logs host1.log host2.log ...`); `nccl-doctor check` across the hosts tests "
                        "that each can reach the others on the interface NCCL picks.",))
        return
    # a framework's NCCL all-reduce between local devices (TensorFlow's MirroredStrategy) runs on two or more
    count = max(size, here, 2 if framework else 0)
    if count < 2 and not view.hint("hang_reported"):
        return  # one process's setup lines alone: a log cut short as likely as a hang
    transports = sorted({t for p in procs for t in p.transports})
    completed = any("COMPLETE" in ph for p in procs for ph in p.init_phases.values())
    warn = Severity.WARNING
    yield Clue("silent-after-init",
               "NCCL " + ("communicators initialised" if completed else "started initialising") + " on "
               + (f"{count}x {gpus[0]}" if len(gpus) == 1 else f"{max(count, 1)} GPU(s)") + " of one host and the log then "
               "shows no progress, no result and no error"
               + (f"; intra-node transports: {', '.join(transports)}" if transports else "")
               + ". A hang right after init between local GPUs is the signature of PCIe ACS/IOMMU breaking "
               "peer-to-peer (if the log was merely cut short, ignore this)",
               events=tuple(e for _, e in hosts_ranks[:2]), severity=warn,
               fix=("Test quickly: rerun with `NCCL_P2P_DISABLE=1`; if it then works, disable ACS/IOMMU (BIOS, kernel "
                    "`intel_iommu=off` / `amd_iommu=off` or `iommu=pt`, or `setpci` per the NCCL troubleshooting "
                    "guide).",))
    if completed:
        yield Clue("silent-after-init-complete", "every communicator reported Init COMPLETE before the silence",
                   severity=warn)
    stuck = [ln for ln in (p.last_line for p in procs) if ln and re.search(r"\b0%\||\s0/\d+", ln[2])]
    if stuck:
        yield Clue("stalled-at-zero-progress", f"the last line is a progress bar at 0: {clip(stuck[0][2], 80)!r}",
                   evidence=tuple(Evidence(s, t, n) for s, n, t in stuck[:1]), severity=warn)
    pcie = [g for g in gpus if PCIE_ONLY_GPU.search(g)]
    if pcie:
        yield Clue("pcie-only-gpus", f"{pcie[0]} boards reach each other over PCIe, where ACS/IOMMU settings decide "
                   "whether peer-to-peer works", severity=warn)


def output_after_setup(view: LogView) -> bool:
    """Did the job print much after NCCL's last setup line (training went on, so no hang right after init)?"""
    last: dict[str, int] = {}
    for proc in view.col.procs:
        for events in proc.facts.values():
            for e in events:
                last[e.source] = max(last.get(e.source, 0), e.line)
    return any(lines_after(view, src, line) > QUIET_AFTER_SETUP for src, line in last.items())


def lines_after(view: LogView, source: str, line: int) -> int:
    """How many lines its source holds after this one."""
    return view.col.source_lines.get(source, 0) - line


@rule("stalled-in-nvls-setup")
def rule_stalled_in_nvls_setup(view: LogView) -> Iterator[Clue]:
    """A process whose log ends in NCCL's NVLS setup: binding or mapping multicast memory did not return (the
    fabric manager, the driver's multicast support or an NVLS defect); on more than two GPUs of an NVSwitch
    system NCCL uses NVLS by default, so the job hangs at init."""
    if ended(view) or view.events:
        return
    stuck = [p.last_line for p in view.col.procs if p.last_line and NVLS_SETUP.search(p.last_line[2])
             and lines_after(view, p.last_line[0], p.last_line[1]) <= NVLS_LAST_LINES]
    if not stuck:
        return
    yield Clue("stalled-in-nvls-setup", f"the log ends in NCCL's NVLS setup ({clip(stuck[0][2].strip(), 90)!r}): "
               "NVLink SHARP multicast memory was being set up when the job went silent",
               evidence=tuple(Evidence(s, f"(last line) {t}", n) for s, n, t in stuck[:2]), severity=Severity.WARNING,
               fix=("Rerun with `NCCL_NVLS_ENABLE=0`; if it then starts, check that nvidia-fabricmanager runs and "
                    "matches the driver, and that the container sees the IMEX/multicast devices.",))


@rule("acs-enabled", "acs-enabled-with-p2p")
def rule_acs_enabled(view: LogView) -> Iterator[Clue]:
    """`lspci -vvv` in the log shows ACS enabled on PCI bridges: peer-to-peer between local GPUs goes through
    the root complex, where it hangs or fails. Strongest with P2P channels set up."""
    acs = view.hint("acs_enabled")
    if not acs:
        return
    p2p = sorted({t for p in view.col.procs for t in p.transports if t.startswith("P2P")})
    seen = (f"lspci shows ACS enabled on {len(acs)} PCI bridge(s) ({clip(acs[0].message.strip(), 70)!r})"
            + (f" and NCCL set up {', '.join(p2p)} channels between local GPUs" if p2p else ""))
    yield Clue("acs-enabled-with-p2p" if p2p else "acs-enabled",
               f"{seen}. ACS redirects GPU peer-to-peer traffic through the root complex, where it is slow or lost",
               evidence=as_evidence(acs[:2]), severity=Severity.WARNING,
               fix=("Disable ACS on the bridges (`setpci` per the NCCL troubleshooting guide, or the BIOS) or the "
                    "IOMMU; to confirm first, rerun with `NCCL_P2P_DISABLE=1`.",))


@rule("hung-in-nccl-launch", "hung-in-collective-call")
def rule_hung_stacks(view: LogView) -> Iterator[Clue]:
    """Stack dumps (py-spy dump, gdb) of a process that hangs without an error: frames spinning in NCCL's kernel
    launch are a known class of NCCL deadlocks (CUDA graphs, CUDA_LAUNCH_BLOCKING); a Python stack waiting in a
    collective means this rank is in a collective its peers never entered."""
    if view.failed or view.events_of("segfault"):
        return
    nccl = view.hint("nccl_stack")
    launch = [e for e in nccl if LAUNCH_FRAMES.search(e.text)]
    if launch:
        yield Clue("hung-in-nccl-launch", f"a stack dump of the hung process sits in NCCL's kernel launch "
                   f"({clip(launch[0].message.strip(), 80)!r}): NCCL waits on work it has not enqueued yet - a known "
                   "deadlock of some NCCL releases with CUDA graphs or CUDA_LAUNCH_BLOCKING=1",
                   events=tuple(launch[:3]), severity=Severity.WARNING,
                   fix=("Unset CUDA_LAUNCH_BLOCKING, try the newest NCCL release, and if CUDA graphs capture NCCL "
                        "calls, run them eagerly (or with NCCL_GRAPH_MIXING_SUPPORT=0) to confirm.",))
        return
    python = view.hint("python_collective_frame")
    if python:
        yield Clue("hung-in-collective-call", f"a stack of the hung process waits in "
                   f"{clip(python[-1].message.strip(), 90)!r}: this rank entered a collective that some peers never "
                   "entered (they took another branch, or stopped earlier)", events=tuple(python[-2:]),
                   severity=Severity.WARNING,
                   fix=("Dump every rank's stack (`py-spy dump --pid PID` on each) and compare where they wait: the "
                        "rank(s) not in the same call diverged.",))


@rule("p2p-test-hangs")
def rule_p2p_test_hang(view: LogView) -> Iterator[Clue]:
    """CUDA's peer-to-peer samples (p2pBandwidthLatencyTest, simpleP2P) reported hanging: GPU peer-to-peer on the
    host is broken, with no NCCL involved."""
    tests, hang = view.hint("p2p_test"), view.hint("hang_reported")
    if tests and hang:
        yield Clue("p2p-test-hangs", f"a CUDA peer-to-peer test ({clip(tests[0].message.strip(), 60)!r}) hangs "
                   f"({clip(hang[0].message.strip(), 80)!r}): peer-to-peer between the GPUs fails below NCCL",
                   events=tuple(tests[:1] + hang[:1]),
                   fix=("Disable the IOMMU or set it to passthrough (`iommu=pt`, `intel_iommu=off` / `amd_iommu=off`) "
                        "and ACS on the PCIe bridges, then rerun the sample; `NCCL_P2P_DISABLE=1` works around it.",))


@rule("ended-while-preprocessing")
def rule_ended_preprocessing(view: LogView) -> Iterator[Clue]:
    """A log with no error whose last lines are dataset preprocessing (tokenising, map, index building): in a
    distributed job the other ranks wait meanwhile, and a long run outlasts the process-group timeout."""
    if view.events or ended(view):
        return
    work = view.hint("preprocessing")
    last = [p.last_line for p in view.col.procs if p.last_line]
    if work and last and any(ln[0] == work[-1].source and ln[1] - work[-1].line <= 3 for ln in last):
        yield Clue("ended-while-preprocessing", f"the log ends while preprocessing data ({clip(work[-1].message.strip(), 90)!r});"
                   " other ranks wait in the next collective meanwhile", events=(work[-1],), severity=Severity.WARNING,
                   fix=("Preprocess before launching the distributed job, or raise the process-group timeout above "
                        "the preprocessing time.",))


@rule("ended-in-store-barrier")
def rule_ended_in_store_barrier(view: LogView) -> Iterator[Clue]:
    """The log ends while c10d still waits for ranks to join a new process group (it says so every 10 s): the
    missing rank is busy elsewhere or never started. A job that waited and went on is no clue."""
    waiting = view.hint("store_barrier_waiting")
    if not waiting:
        return
    last = waiting[-1]
    if lines_after(view, last.source, last.line) > QUIET_AFTER_SETUP:
        return
    joined, world = last.caps.get("joined", "?"), last.caps.get("world", "?")
    yield Clue("ended-in-store-barrier", f"the log ends while c10d waits in a store-based barrier with {joined} of "
               f"{world} ranks joined ({clip(last.message.strip(), 90)!r}): the missing rank was busy elsewhere or "
               "never started", events=tuple(waiting[-2:]), severity=Severity.WARNING,
               fix=("Find the rank that has not joined (the ranks that print this line are the ones waiting) and what "
                    "it was doing: its own log, or `py-spy dump --pid PID` while it waits.",))


@rule("hang-without-error")
def rule_hang_reported(view: LogView) -> Iterator[Clue]:
    """The log says the job hangs and shows no error, no NCCL setup and no stack: most often the ranks stopped
    issuing the same collectives (a rank-dependent branch, a rank stuck elsewhere)."""
    hang = view.hint("hang_reported")
    setup = any(p.init_phases or p.transports or p.facts.get("bootstrap") for p in view.col.procs)
    if hang and not view.events and not setup and not view.hint("nccl_stack"):
        yield Clue("hang-without-error", f"the log reports a hang ({clip(hang[0].message.strip(), 90)!r}) with no error "
                   "and no NCCL setup shown", events=tuple(hang[:2]), severity=Severity.WARNING,
                   fix=("Dump every rank's stack while it hangs (`py-spy dump --pid PID`) and compare where they wait; "
                        "rerun with `TORCH_DISTRIBUTED_DEBUG=DETAIL NCCL_DEBUG=INFO` to see each rank's collectives.",))
