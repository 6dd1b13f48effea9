"""Lint rules about settings that cost performance or hide errors, each reported with its trade-off."""

from __future__ import annotations

from collections.abc import Iterator

from ..catalog.env_vars import lookup
from ..model import Finding, Severity
from .lint_context import Context, Setting
from .nccl_parse import parse_algo_proto, stoi, strtoll, torch_bool
from ..roads import emits


def _on(s: Setting | None) -> bool:
    return s is not None and strtoll(s.value).value != 0


@emits("perf-setting")
def _perf(s: Setting, cost: str, keep_if: str) -> Finding:
    """A setting that costs performance, and when it is worth keeping."""
    return Finding("perf-setting", Severity.WARNING, f"{s.shown}: {cost}", confidence=0.7, evidence=[s.evidence()],
                   fix=[f"`unset {s.name}` unless {keep_if}."])


def perf_settings(ctx: Context) -> Iterator[Finding]:
    """Debugging workarounds left in place: P2P or SHM transport off, only the Simple protocol, GPUDirect RDMA
    off, tiny buffers, a single channel."""
    p2p = ctx.get("NCCL_P2P_DISABLE")
    if p2p and strtoll(p2p.value).value == 1:  # NCCL acts only on exactly 1
        yield _perf(p2p, "GPU peer-to-peer (NVLink / PCIe P2P) is off, intra-node traffic is staged through host "
                         "memory at a fraction of the bandwidth", "P2P hangs or fails on this machine (ACS/IOMMU, VMs)")
    shm = ctx.get("NCCL_SHM_DISABLE")
    if _on(shm):
        yield _perf(shm, "the shared-memory transport is off, GPUs without P2P talk through the network transport",
                    "/dev/shm cannot be enlarged")
    proto = ctx.get("NCCL_PROTO")
    if proto and lookup("NCCL_PROTO"):
        enabled = parse_algo_proto(proto.value, lookup("NCCL_PROTO").values).enabled.values()
        if all(chosen == {"Simple"} for chosen in enabled):
            yield _perf(proto, "LL and LL128 are off, so small and medium messages become latency-bound "
                               "(often 2-10x slower below 1 MiB)", "it works around a protocol bug on this system")
    gdr = ctx.get("NCCL_NET_GDR_LEVEL")
    if gdr and gdr.value in ("LOC", "0"):
        yield _perf(gdr, "GPUDirect RDMA is off, network traffic is staged through host memory",
                    "GPUDirect RDMA is broken on this system (no nvidia-peermem / ACS)")
    buffsize = ctx.get("NCCL_BUFFSIZE")
    minimum = ctx.limits["perf"]["min_buffsize_bytes"]
    if buffsize and strtoll(buffsize.value).complete and 0 < strtoll(buffsize.value).value < minimum:
        yield _perf(buffsize, f"a buffer below {minimum // 1024} KiB (default 4 MiB) leaves the Simple protocol little "
                              f"room to pipeline", "memory is that tight")
    for name in ("NCCL_MAX_NCHANNELS", "NCCL_MAX_CTAS", "NCCL_MAX_NRINGS"):
        s = ctx.get(name)
        if s and strtoll(s.value).value == 1:
            yield _perf(s, "one channel uses one SM and one NIC path: bandwidth drops to a fraction",
                        "it limits interference with compute on purpose")


@emits("algo-proto-override")
def algo_override(ctx: Context) -> Iterator[Finding]:
    """NCCL_ALGO forcing a subset of algorithms (info: it overrides NCCL's tuning on every topology)."""
    s = ctx.get("NCCL_ALGO")
    var = lookup("NCCL_ALGO")
    if s is None or var is None or not s.value:
        return
    parsed = parse_algo_proto(s.value, var.values)
    if parsed.errors or parsed.unknown or parsed.unknown_functions or not all(parsed.enabled.values()):
        return  # invalid_values reports these
    yield Finding("algo-proto-override", Severity.INFO,
                  f"{s.shown} overrides NCCL's algorithm choice for every message size and topology",
                  confidence=0.5, evidence=[s.evidence()])


def _torch_setting(ctx: Context, name: str) -> Setting | None:
    """The setting PyTorch uses: TORCH_NCCL_X, else its legacy NCCL_X alias."""
    return ctx.get(name) or ctx.get(name.replace("TORCH_NCCL_", "NCCL_", 1))


@emits("error-handling-off")
def error_handling(ctx: Context) -> Iterator[Finding]:
    """Settings that hide failures or detect them late: async error handling off (peers hang), the watchdog
    monitor off, a huge heartbeat timeout, the Flight Recorder off."""
    aeh = _torch_setting(ctx, "TORCH_NCCL_ASYNC_ERROR_HANDLING")
    if aeh and stoi(aeh.value) == 0:
        blocking = _torch_setting(ctx, "TORCH_NCCL_BLOCKING_WAIT")
        nothing = "" if blocking and torch_bool(blocking.value) else \
            " and blocking wait is off, so nothing raises: the job hangs until it is killed"
        yield Finding("error-handling-off", Severity.WARNING,
                      f"{aeh.shown}: a failed or timed-out collective no longer aborts the communicators{nothing}",
                      evidence=[aeh.evidence()] + ([blocking.evidence()] if blocking else []),
                      fix=[f"`unset {aeh.name}` (PyTorch's default 3, torchrun's 1 both abort on failure)."])
    monitor = ctx.get("TORCH_NCCL_ENABLE_MONITORING")
    if monitor and torch_bool(monitor.value) is False:
        yield Finding("error-handling-off", Severity.WARNING,
                      f"{monitor.shown}: a stuck watchdog (a hung CUDA call, a dead NIC) is never detected",
                      evidence=[monitor.evidence()], fix=["`unset TORCH_NCCL_ENABLE_MONITORING`"])
    heartbeat = ctx.get("TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC")
    longest = ctx.limits["torch"]["max_heartbeat_timeout_sec"]
    if heartbeat and (stoi(heartbeat.value) or 0) > longest:
        yield Finding("error-handling-off", Severity.WARNING,
                      f"{heartbeat.shown}: a stuck watchdog is noticed only after "
                      f"{(stoi(heartbeat.value) or 0) / 3600:.1f} h", evidence=[heartbeat.evidence()],
                      fix=[f"Keep it at most {longest} s (default 480)."])
    for name in ("TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_DUMP_ON_TIMEOUT",
                 "TORCH_FR_DUMP_ON_TIMEOUT"):
        s = ctx.get(name)
        off = s is not None and (stoi(s.value) == 0 if "BUFFER" in name else torch_bool(s.value) is False)
        if off:
            yield Finding("error-handling-off", Severity.INFO,
                          f"{s.shown}: no Flight Recorder dump on a timeout, so the per-rank history of collectives "
                          f"that shows who is behind is lost", confidence=0.6, evidence=[s.evidence()],
                          fix=[f"`unset {name}` (the default records the last 2000 collectives)."])


@emits("debug-logging-off")
def debug_logging(ctx: Context) -> Iterator[Finding]:
    """NCCL_DEBUG unset while diagnosing, or NCCL_DEBUG_FILE that every rank would overwrite."""
    debug = ctx.get("NCCL_DEBUG")
    if debug is None:
        yield Finding("debug-logging-off", Severity.INFO,
                      "NCCL_DEBUG is unset: NCCL prints nothing before an error (no version, interfaces or transports "
                      "in the logs)", confidence=0.5)
    log_file = ctx.get("NCCL_DEBUG_FILE")
    if log_file and "%h" not in log_file.value and "%p" not in log_file.value \
            and not log_file.value.startswith("/dev/std"):
        yield Finding("debug-logging-off", Severity.WARNING,
                      f"{log_file.shown} has no %h or %p: every rank of the host opens the same file and they "
                      f"overwrite each other's log", evidence=[log_file.evidence()],
                      fix=[f"`export NCCL_DEBUG_FILE={log_file.value}.%h.%p`"])
