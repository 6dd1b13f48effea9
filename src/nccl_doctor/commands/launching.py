"""What every command that runs ranks shares: torch must be there, then either this process is one rank
of a launcher's job (torchrun, srun, mpirun) or it starts `--local N` ranks on this host and judges them."""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import Any, Callable

from ..model import Evidence, Finding, InputError, Report


def require_torch(command: str) -> None:
    """One clear line instead of an import error deep inside, when torch is not installed."""
    if importlib.util.find_spec("torch") is None:
        raise InputError(f"{command} needs torch.distributed: install PyTorch "
                         "(`pip install 'nccl-doctor[torch]'`)")


def run_job(command: str, options: Any, *, local: int | None, deliver: Callable[[Report], int], as_json: bool,
            rank_args: list[str], master_addr: str, master_port: int, stages: list | None = None,
            check_world: Callable[[int], None] = lambda world_size: None,
            rank_env: Callable[[int], dict[int, dict[str, str]]] = lambda count: {}) -> int:
    """Run `command`'s stages as one rank of the launcher's job, or on `--local` ranks; deliver the report.

    `check_world(world_size)` rejects options that do not fit the job's size (InputError);
    `rank_env(count)` gives per-rank variables for `--local` children.
    """
    from ..cluster.launch import WorldError, default_local_ranks, detect_world
    from ..cluster.run import run_as_rank, run_local

    progress = None if as_json else sys.stderr
    env = dict(os.environ)
    try:
        world = None if local is not None else detect_world(env)
    except WorldError as exc:
        return deliver(world_report(command, exc))
    if world is not None:
        check_world(world.world_size)
        return run_as_rank(world, options, env, as_json=as_json, deliver=deliver, progress=progress, stages=stages)
    count = local or default_local_ranks()
    check_world(count)
    report = run_local(count, options, rank_args, master_addr=master_addr, master_port=master_port,
                       rank_env=rank_env(count), progress=progress, stages=stages, command=command)
    return deliver(report)


def world_report(command: str, exc: Any) -> Report:
    """The launcher's environment is inconsistent (a WorldError): the rendezvous stage failed before it began."""
    finding = Finding(exc.cause, "error", str(exc), evidence=[Evidence("launcher environment", str(exc))],
                      fix=[exc.fix] if exc.fix else [])
    stage = {"name": "rendezvous", "title": "Rendezvous", "status": "failed", "seconds": 0.0, "detail": str(exc)}
    return Report(command, [finding], {"stages": [stage]})
