"""Lint rules about the rendezvous: RANK / WORLD_SIZE / LOCAL_RANK, the GPUs they map to, MASTER_ADDR, MASTER_PORT."""

from __future__ import annotations

from collections.abc import Iterator

from ..model import Evidence, Finding, Severity
from ..redact import redact
from .lint_context import Context
from ..roads import emits

TORCHRUN_WORKER = ("TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE", "GROUP_RANK")


@emits("rank-config-invalid")
def rank_world_size(ctx: Context) -> Iterator[Finding]:
    """RANK >= WORLD_SIZE, LOCAL_RANK >= LOCAL_WORLD_SIZE, more local ranks than ranks, GROUP_RANK >= nodes, and
    a worker environment (RANK, WORLD_SIZE) without MASTER_ADDR/MASTER_PORT for env:// rendezvous."""
    pairs = [("RANK", "WORLD_SIZE"), ("LOCAL_RANK", "LOCAL_WORLD_SIZE"), ("GROUP_RANK", "GROUP_WORLD_SIZE"),
             ("LOCAL_WORLD_SIZE", "WORLD_SIZE")]
    for low, high in pairs:
        a, b = ctx.int_value(low), ctx.int_value(high)
        if a is None or b is None:
            continue
        too_big = a > b if low == "LOCAL_WORLD_SIZE" else a >= b
        if too_big or a < 0:
            bound = f"at most {high}" if low == "LOCAL_WORLD_SIZE" else f"in 0..{high}-1"
            yield Finding("rank-config-invalid", Severity.ERROR,
                          f"{low}={a} with {high}={b}: {low} must be {bound}",
                          evidence=[ctx.get(low).evidence(), ctx.get(high).evidence()])
    world = ctx.int_value("WORLD_SIZE")
    if ctx.get("RANK") and world and world > 1:
        missing = [n for n in ("MASTER_ADDR", "MASTER_PORT") if not ctx.value(n)]
        if missing and not ctx.get("TORCHELASTIC_USE_AGENT_STORE"):
            yield Finding("rank-config-invalid", Severity.WARNING,
                          f"RANK and WORLD_SIZE={world} are set but {' and '.join(missing)} "
                          f"{'is' if len(missing) == 1 else 'are'} not: env:// rendezvous fails with "
                          f"'environment variable {missing[0]} expected, but not set'",
                          evidence=[ctx.get("RANK").evidence(), ctx.get("WORLD_SIZE").evidence()],
                          fix=[f"`export {missing[0]}=...` (rank 0's address and a free port), or launch with torchrun."])


@emits("more-ranks-than-gpus")
def local_rank_gpus(ctx: Context) -> Iterator[Finding]:
    """LOCAL_RANK or LOCAL_WORLD_SIZE beyond the GPUs this process can see (CUDA_VISIBLE_DEVICES applied), or a
    CUDA_VISIBLE_DEVICES that hides GPUs the host has."""
    visible, physical = ctx.visible_gpus, ctx.physical_gpus
    if visible is None:
        return
    mask = ctx.get("CUDA_VISIBLE_DEVICES")
    seen = f"{visible} visible GPU{'s' if visible != 1 else ''}" + (f" ({mask.shown})" if mask else "")
    evidence = [mask.evidence()] if mask else [Evidence("probe:gpus", f"{physical} GPUs (NVML)")]
    if mask and physical:
        listed = [e for e in mask.value.split(",") if e.strip()]
        if visible == 0:
            yield Finding("more-ranks-than-gpus", Severity.ERROR,
                          f"{mask.shown} hides all {physical} GPUs of this host: CUDA sees no device",
                          evidence=[mask.evidence()], fix=["`unset CUDA_VISIBLE_DEVICES`, or list the GPUs to use."])
            return
        if visible < len(listed):
            yield Finding("more-ranks-than-gpus", Severity.WARNING,
                          f"{mask.shown} lists devices this host does not have ({physical} GPUs): CUDA ignores "
                          f"everything from the first invalid entry, leaving {visible}", evidence=[mask.evidence()],
                          fix=[f"List indices 0..{physical - 1} or GPU UUIDs from `nvidia-smi -L`."])
    if visible == 0:
        return
    local_rank, local_world = ctx.int_value("LOCAL_RANK"), ctx.local_world_size
    if local_world is not None and local_world > visible:
        yield Finding("more-ranks-than-gpus", Severity.ERROR,
                      f"{local_world} ranks on this node but {seen}: ranks would share GPUs or fail "
                      f"('Duplicate GPU detected', 'invalid device ordinal')", evidence=evidence,
                      fix=[f"`torchrun --nproc-per-node={visible} ...` (one process per GPU)."])
    elif local_rank is not None and local_rank >= visible:
        yield Finding("more-ranks-than-gpus", Severity.ERROR,
                      f"LOCAL_RANK={local_rank} but this process has {seen}: torch.cuda.set_device(LOCAL_RANK) fails "
                      f"with 'invalid device ordinal'", evidence=[ctx.get("LOCAL_RANK").evidence(), *evidence],
                      fix=[f"Start at most {visible} processes per node (`--nproc-per-node={visible}`), or fix "
                           f"CUDA_VISIBLE_DEVICES."])


@emits("master-addr-unresolvable", "master-unreachable")
def master_addr(ctx: Context) -> Iterator[Finding]:
    """MASTER_ADDR that does not resolve, has no route, or is a loopback address in a multi-node job."""
    s, route = ctx.get("MASTER_ADDR"), ctx.master_route
    if s is None or route is None:
        return
    error = route.get("error")
    if error in ("unresolvable", "timeout"):
        yield Finding("master-addr-unresolvable", Severity.ERROR if error == "unresolvable" else Severity.WARNING,
                      f"{s.shown}: {route.get('unavailable')}", evidence=[s.evidence()],
                      fix=[f"`getent hosts {redact(s.name, s.value)}` must print rank 0's routable address on every "
                           f"node; otherwise set MASTER_ADDR to that IP address."])
    elif error == "no-route":
        yield Finding("master-unreachable", Severity.ERROR, f"{s.shown}: {route.get('unavailable')}",
                      evidence=[s.evidence()], fix=["Use an address of rank 0 on a network this node is attached to "
                                                    "(`ip route get <addr>` must succeed)."])
    elif route.get("loopback") and ctx.multi_node:
        yield Finding("master-addr-unresolvable", Severity.ERROR,
                      f"{s.shown} resolves to {route.get('address')} (loopback) but the job spans {ctx.nodes} nodes: "
                      f"the other nodes cannot reach it", evidence=[s.evidence()],
                      fix=["Set MASTER_ADDR to rank 0's routable IP address, the same on every node."])


@emits("master-port-invalid", "port-in-use")
def master_port(ctx: Context) -> Iterator[Finding]:
    """MASTER_PORT that is not a port number, is privileged without root, or is already bound on this host
    (when this host is the master and no launcher store is expected on it)."""
    s = ctx.get("MASTER_PORT")
    if s is None:
        return
    try:
        port = int(s.value)
    except ValueError:
        port = -1
    if not 0 < port < 65536:
        yield Finding("master-port-invalid", Severity.ERROR, f"{s.shown} is not a port number in 1..65535",
                      evidence=[s.evidence()])
        return
    route = ctx.master_route or {}
    host = ctx.section("host") or {}
    if port < 1024 and route.get("local") and host.get("uid", 0) != 0:
        yield Finding("master-port-invalid", Severity.WARNING,
                      f"{s.shown} is a privileged port: binding it needs root, so the store on this host fails",
                      evidence=[s.evidence()], fix=["Use a port above 1024, e.g. `export MASTER_PORT=29500`."])
    listeners = ((ctx.section("network") or {}).get("master") or {}).get("listeners")
    if not isinstance(listeners, list) or not listeners or any(ctx.get(n) for n in TORCHRUN_WORKER):
        return
    if route.get("local") or route.get("loopback"):
        holders = ", ".join(f"{l.get('process') or 'pid'} {l.get('pid') or '?'} on {l.get('address')}"
                            for l in listeners)
        yield Finding("port-in-use", Severity.ERROR,
                      f"{s.shown} is already bound on this host, the master ({holders}): the TCPStore cannot start "
                      f"('address already in use')", evidence=[s.evidence(), *(
                          Evidence("probe:network", f"LISTEN {l.get('address')}:{port} pid {l.get('pid')}")
                          for l in listeners)],
                      fix=[f"`ss -ltnp | grep :{port}` and stop the holder, or choose another port "
                           f"(`--master-port`, `export MASTER_PORT=...`)."])
