"""The job nccl-doctor runs inside: who this rank is, the store to talk over, the process group to watch.

Everything comes from the job itself when it exists (the default process group and its store), else from
the launcher (torchrun's agent store, which every rank reaches as a client), else from a store rank 0
hosts for the occasion on NCCL_DOCTOR_PORT (default MASTER_PORT + 1, so the job's own port stays free).
Our keys live under `nccl-doctor/` in the root TCPStore, where `nccl-doctor watch --store HOST:PORT`
finds them; every connection of ours is a separate client with a short timeout.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Mapping

from ..cluster.launch import World, WorldError, detect_world
from ..cluster.rank import KEY_ROOT
from ..cluster.store import connect, prefixed, serve
from ..model import InputError

STORE_TIMEOUT = 5.0  # seconds any store call of ours may take: the job never waits on it, we just give up
PORT_ENV = "NCCL_DOCTOR_PORT"


@dataclass(frozen=True)
class Identity:
    rank: int
    world_size: int
    host: str
    run_id: str  # namespaces our keys: a torchrun restart or a new SLURM step starts afresh
    world: World | None  # the launcher's view, when a launcher started us
    alone: bool = False  # no process group and no launcher: a plain `python train.py`, a world of one


def identity(group: Any = None, env: Mapping[str, str] | None = None) -> Identity:
    """Rank and size from the process group when there is one, else from the launcher's variables, else a
    world of one (`alone`)."""
    env = os.environ if env is None else env
    try:
        world = detect_world(env)
    except WorldError as exc:
        raise InputError(f"the launcher's environment is inconsistent: {exc}") from None
    dist = _dist_if_initialized()
    if dist is not None:
        rank, size = dist.get_rank(group), dist.get_world_size(group)
    elif world is not None:
        rank, size = world.rank, world.world_size
    else:
        return Identity(0, 1, socket.gethostname(), "job", None, alone=True)
    run_id = world.run_id if world and world.launcher in ("torchrun", "slurm") else "job"
    return Identity(rank, size, socket.gethostname(), run_id, world)


def _dist_if_initialized() -> Any:
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    return dist if dist.is_available() and dist.is_initialized() else None


def root_store(store: Any) -> Any:
    """The TCPStore under PrefixStores: the default group's store is prefixed by torch and torchrun."""
    while hasattr(store, "underlying_store"):
        store = store.underlying_store
    return store


def job_store(store: Any = None) -> Any | None:
    """The store the job already has: the one given, or the default process group's; None before init."""
    if store is not None:
        return root_store(store)
    if _dist_if_initialized() is None:
        return None
    from torch.distributed import distributed_c10d as c10d

    try:
        return root_store(c10d._get_default_store())
    except (RuntimeError, ValueError, AttributeError):
        return None


def own_connection(store: Any, timeout: float = STORE_TIMEOUT) -> Any:
    """A new client of the same store for our thread, with a short timeout; the store itself if it cannot clone."""
    try:
        conn = store.clone()
    except (RuntimeError, NotImplementedError, AttributeError):
        return store
    conn.set_timeout(timedelta(seconds=timeout))
    return conn


def agent_store(world: World | None, deadline: float) -> Any | None:
    """torchrun's agent store (every rank is a client of it); None under other launchers."""
    if world is None or not world.agent_store:
        return None
    return connect(world.master_addr, world.master_port, deadline)


def side_port(world: World, env: Mapping[str, str]) -> int:
    value = env.get(PORT_ENV, "")
    if value:
        if not value.isdigit() or not 0 < int(value) < 65536:
            raise InputError(f"{PORT_ENV}={value!r} is not a port in 1..65535")
        return int(value)
    return world.master_port + 1 if world.master_port < 65535 else world.master_port - 1


def side_store(ident: Identity, timeout: float, env: Mapping[str, str] | None = None) -> Any:
    """A store for nccl-doctor alone, hosted by rank 0 on NCCL_DOCTOR_PORT (default MASTER_PORT + 1)."""
    env = os.environ if env is None else env
    if ident.world is None:
        raise InputError("no store to talk over: pass store=..., or call after init_process_group")
    port = side_port(ident.world, env)
    if ident.rank == 0:
        return serve(port, timeout)
    return connect(ident.world.master_addr, port, time.monotonic() + timeout)


def keys(store: Any, *parts: str) -> Any:
    """Our namespace in the root store: nccl-doctor/PART/..."""
    return prefixed(store, "/".join([KEY_ROOT, *parts]) + "/")


def default_group_state(group: Any = None) -> tuple[Any, str | None, float | None]:
    """(process group, backend, timeout in seconds) of the group to watch; (None, None, None) before init."""
    dist = _dist_if_initialized()
    if dist is None:
        return None, None, None
    from torch.distributed import distributed_c10d as c10d

    try:
        pg = group if group is not None else c10d._get_default_group()
        backend = str(dist.get_backend(pg))
    except (RuntimeError, ValueError):
        return None, None, None
    return pg, backend, _timeout_of(pg)


def _timeout_of(pg: Any) -> float | None:
    for device in getattr(pg, "_device_types", []):
        try:
            return pg._get_backend(device).options._timeout.total_seconds()
        except (RuntimeError, AttributeError):
            continue
    return None


def sequence_number(pg: Any) -> int | None:
    """How many collectives this rank has entered on `pg` (PyTorch counts them on entry, per group)."""
    try:
        return int(pg._get_sequence_number_for_group())
    except (RuntimeError, AttributeError):
        return None
