"""Lint rules about this host: /dev/shm, locked memory with IB, open files, conflicting NCCL installations."""

from __future__ import annotations

from collections.abc import Iterator

from ..model import Evidence, Finding, Severity
from .lint_context import Context
from .nccl_parse import strtoll
from ..roads import emits

GIB = 1024**3
MIB = 1024**2


def _size(n: float) -> str:
    return f"{n / GIB:.1f} GiB" if n >= GIB else f"{n / MIB:.0f} MiB"


@emits("shm-too-small")
def shm_size(ctx: Context) -> Iterator[Finding]:
    """/dev/shm below what NCCL's shared-memory transport needs for the ranks of this node."""
    shm = (ctx.section("limits") or {}).get("shm") or {}
    ranks = ctx.local_world_size or ctx.visible_gpus
    if "free_bytes" not in shm or not ranks or ranks < 2 or ctx.visible_gpus == 0:
        return  # one rank, or no GPU here: no NCCL shared-memory transport
    disabled = ctx.get("NCCL_SHM_DISABLE")
    if disabled and strtoll(disabled.value).value:
        return
    rule = ctx.limits["shm"]
    need = ranks * rule["segments_per_local_rank"] * rule["segment_bytes"]
    free, total = shm["free_bytes"], shm["total_bytes"]
    if free >= need:
        return
    severity = Severity.ERROR if free < need * rule["error_fraction"] else Severity.WARNING
    container = ctx.in_container
    yield Finding("shm-too-small", severity,
                  f"/dev/shm has {_size(free)} free of {_size(total)}; NCCL's shared-memory transport needs about "
                  f"{_size(need)} for {ranks} local ranks ({rule['segment_bytes']} bytes per connection and channel)",
                  confidence=(0.8 if severity == Severity.ERROR else 0.5) if ctx.visible_gpus else 0.4,
                  evidence=[Evidence("probe:limits", f"/dev/shm total {total} free {free} bytes")],
                  fix=["Restart the container with `--shm-size=16g` or `--ipc=host`" if container else
                       "Remount it larger: `mount -o remount,size=16G /dev/shm`"])


@emits("ulimit-memlock")
def memlock(ctx: Context) -> Iterator[Finding]:
    """Locked-memory limit (ulimit -l) too small on a host with InfiniBand/RoCE: ibv_reg_mr fails."""
    if not ctx.active_ib_ports:
        return
    limit = ((ctx.section("limits") or {}).get("memlock") or {})
    soft = limit.get("soft")
    if soft in (None, "unlimited"):
        return
    error = soft < ctx.limits["memlock"]["error_below_bytes"]
    fix = "`ulimit -l unlimited` in the job script" if limit.get("hard") == "unlimited" else \
        "Raise the hard limit: Docker `--ulimit memlock=-1`, or `* - memlock unlimited` in /etc/security/limits.conf"
    yield Finding("ulimit-memlock", Severity.ERROR if error else Severity.WARNING,
                  f"locked memory is limited to {_size(soft)} (ulimit -l {soft // 1024}) on a host with RDMA ports: "
                  f"NCCL's ibv_reg_mr needs it unlimited", confidence=0.8 if error else 0.5,
                  evidence=[Evidence("probe:limits", f"RLIMIT_MEMLOCK soft {soft} hard {limit.get('hard')}")],
                  fix=[fix])


@emits("ulimit-nofile")
def nofile(ctx: Context) -> Iterator[Finding]:
    """Open-files limit (ulimit -n) too small for the job's size (Gloo connects every pair of ranks)."""
    limit = ((ctx.section("limits") or {}).get("nofile") or {})
    soft = limit.get("soft")
    if soft in (None, "unlimited"):
        return
    rule = ctx.limits["nofile"]
    need = max(rule["floor"], rule["per_rank"] * (ctx.world_size or 0))
    if soft >= need:
        return
    hard = limit.get("hard")
    fix = f"`ulimit -n {hard}` in the job script (the hard limit allows it)" \
        if hard == "unlimited" or (isinstance(hard, int) and hard >= need) else \
        "Raise the hard limit: Docker `--ulimit nofile=1048576:1048576`, systemd/SLURM `LimitNOFILE=1048576`"
    size = f" for {ctx.world_size} ranks" if ctx.world_size else ""
    yield Finding("ulimit-nofile", Severity.WARNING,
                  f"open files are limited to {soft} (ulimit -n); about {need} are needed{size}",
                  confidence=0.6, evidence=[Evidence("probe:limits", f"RLIMIT_NOFILE soft {soft} hard {hard}")],
                  fix=[fix])


@emits("conflicting-nccl-packages")
def conflicting_nccl(ctx: Context) -> Iterator[Finding]:
    """Several NCCL installations: nvidia-nccl-cu11 and -cu12 wheels side by side, or libnccl.so of different
    versions on the loader's path, so which one a process loads depends on the environment."""
    software = ctx.section("software") or {}
    wheels = software.get("nccl_wheels") or []
    if len({w["name"] for w in wheels}) > 1:
        listing = ", ".join(f"{w['name']} {w['version']}" for w in wheels)
        torch_cuda = str((software.get("torch") or {}).get("cuda") or "")
        keep = f"nvidia-nccl-cu{torch_cuda.split('.')[0]}" if torch_cuda else "the one matching torch's CUDA"
        extra = [w["name"] for w in wheels if w["name"] != keep]
        yield Finding("conflicting-nccl-packages", Severity.ERROR, f"several NCCL wheels are installed: {listing}",
                      evidence=[Evidence("pip", f"{w['name']}=={w['version']}") for w in wheels],
                      fix=[f"Keep {keep}: `pip uninstall {' '.join(extra)}`"])
    nccl = software.get("nccl") or {}
    libs = [lib for lib in nccl.get("libraries", ()) if lib.get("version")
            and any(not via.startswith("system") for via in lib.get("found_via", ()))]
    versions = sorted({lib["version"] for lib in libs})
    if len(versions) > 1:
        loaded = nccl.get("loaded_from")
        detail = f"; torch loads {loaded} ({nccl.get('loaded_version')})" if loaded else ""
        yield Finding("conflicting-nccl-packages", Severity.WARNING,
                      f"libnccl of {len(versions)} versions ({', '.join(versions)}) are on the loader's path{detail}",
                      confidence=0.7,
                      evidence=[Evidence(lib["path"], f"NCCL {lib['version']} via {', '.join(lib['found_via'])}")
                                for lib in libs],
                      fix=["Remove the NCCL directories you do not mean to use from LD_LIBRARY_PATH (torch brings "
                           "its own NCCL through the nvidia-nccl wheel)."])
    built = (software.get("torch") or {}).get("nccl_built_with")
    loaded_version = nccl.get("loaded_version")
    if built and loaded_version and built.split(".")[:2] != loaded_version.split(".")[:2]:
        yield Finding("conflicting-nccl-packages", Severity.WARNING,
                      f"torch was built with NCCL {built} but loads NCCL {loaded_version} from {nccl.get('loaded_from')}"
                      f" ({nccl.get('loaded_how')})", confidence=0.6,
                      evidence=[Evidence(str(nccl.get("loaded_from")), f"NCCL {loaded_version}")],
                      fix=["Make every node load the same NCCL: unset LD_LIBRARY_PATH/LD_PRELOAD entries that point "
                           "at another libnccl, or install the nvidia-nccl wheel version torch pins."])
