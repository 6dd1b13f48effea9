"""Entry points of `check`: as one rank of a launched job, or as the `--local N` parent.

Under a launcher, rank 0 runs the judge in a thread next to its own rank work. Under `--local`,
the parent is the judge: it holds the store, spawns the ranks, reads what children that could not
join printed, and reaps every child on every path (normal end, failure, Ctrl-C, SIGTERM).
"""

from __future__ import annotations

import errno
import os
import signal
import socket
import threading
import time
import uuid
import warnings
from typing import Callable, TextIO

from ..model import Evidence, Finding, Report
from .judge import MARGIN, Judge, JudgeContext, Options, Progress
from .launch import LocalRanks, World, listen_socket, watch_parent
from .rank import KEY_ROOT, key_prefix, run_rank
from .store import Exchange, client, port_holder, prefixed, serve
from .watchdog import Liveness

BYE_WAIT = 3.0  # how long the store's host waits for every rank to read its last verdict


def quiet_torch() -> None:
    """Keep torch's C++ chatter and a missing-NumPy warning off the user's terminal (before importing torch)."""
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    warnings.filterwarnings("ignore", message=".*NumPy.*")
    warnings.filterwarnings("ignore", category=FutureWarning, module="torch.distributed")


def _stages() -> list:
    from .stages import STAGES

    return STAGES


def run_as_rank(world: World, options: Options, env: dict[str, str], *, as_json: bool,
                deliver: Callable[[Report], int], progress: TextIO | None, stages: list | None = None) -> int:
    """This process is one rank; rank 0 also judges (unless a --local parent does). `stages`: check's by default."""
    quiet_torch()
    stages = stages or _stages()
    local_judge = env.get("NCCL_DOCTOR_LOCAL_JUDGE") == "1"
    if local_judge:
        watch_parent(env)
    start = None
    if world.rank == 0 and not local_judge:
        start = lambda address: _judge_thread(world, address, options, deliver, progress, stages)  # noqa: E731
    return run_rank(world, options, env, stages, local_judge=local_judge, as_json=as_json, start_judge=start)


def _judge_thread(world: World, address: tuple[str, int], options: Options, deliver: Callable[[Report], int],
                  progress: TextIO | None, stages: list | None = None) -> Callable[[], int]:
    """Start the judge beside rank 0's own work; returns a function that waits for its exit code."""
    exchange = Exchange(prefixed(client(*address, options.timeout + MARGIN), key_prefix(world)))
    ctx = JudgeContext(exchange, world.world_size, options, world.launcher, Liveness(exchange),
                       run_token=uuid.uuid4().hex[:12])
    _on_sigterm(ctx.terminating)
    code: list[int] = []

    stages = stages or _stages()

    def judge() -> None:
        report = Judge(ctx, stages, Progress(progress, len(stages))).run()
        report.facts.setdefault("world", {})["master"] = f"{world.master_addr}:{world.master_port}"
        code.append(deliver(report))
        _wait_for_byes(exchange, len(ctx.identities))

    thread = threading.Thread(target=judge, name="nccl-doctor-judge", daemon=True)
    thread.start()
    limit = 10 * (options.timeout + MARGIN) + 60  # every judge step is bounded; this only guards against bugs

    def exit_code() -> int:
        thread.join(limit)
        return code[0] if code else 3

    return exit_code


def _on_sigterm(flag: threading.Event) -> None:
    """torchrun ends every worker with SIGTERM once one has died: conclude with what is known, then report."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda *_: flag.set())


def _wait_for_byes(exchange: Exchange, ranks: int) -> None:
    deadline = time.monotonic() + BYE_WAIT
    try:
        while exchange.counter("bye") < ranks and time.monotonic() < deadline:
            time.sleep(0.05)
    except Exception:
        pass


# ------------------------------------------------------------------ --local N

def run_local(count: int, options: Options, rank_args: list[str], *, master_addr: str = "127.0.0.1",
              master_port: int = 0, rank_env: dict[int, dict[str, str]] | None = None,
              progress: TextIO | None = None, stages: list | None = None, command: str = "check") -> Report:
    """Spawn `count` ranks on this host and judge them; every child is reaped before this returns.

    `stages` and `command` (what each child runs) default to check's; `bench` passes its own."""
    stages = stages or _stages()
    try:
        sock = listen_socket(master_port)
    except OSError as exc:
        return _cannot_host(master_port, exc)
    port = sock.getsockname()[1]
    quiet_torch()
    store = serve(port, options.timeout + MARGIN, listen_fd=sock.detach())  # up before any rank is told of it
    local = LocalRanks(count, rank_args, master_addr, port, rank_env or {}, command=command)
    try:  # Ctrl-C and SIGTERM (cli.py raises Terminated, a KeyboardInterrupt) end here too: the ranks are reaped
        local.start()
        exchange = Exchange(prefixed(store, f"{KEY_ROOT}/check/"))
        ctx = JudgeContext(exchange, count, options, "local", Liveness(exchange, local.exits), local=local,
                           run_token=uuid.uuid4().hex[:12])
        report = Judge(ctx, stages, Progress(progress, len(stages))).run()
        report.facts.setdefault("world", {})["master"] = f"{master_addr}:{port}"
        return report
    finally:
        local.stop(grace=2.0)
        sock.close()


def _cannot_host(port: int, exc: OSError) -> Report:
    in_use = exc.errno == errno.EADDRINUSE
    holder = f"; held by {port_holder(port) or 'an unknown process'}" if in_use else ""
    finding = Finding("port-in-use" if in_use else "master-port-invalid", "error",
                      f"cannot host the store on port {port}: {exc.strerror or exc}", hosts=[socket.gethostname()],
                      evidence=[Evidence("bind", f"port {port}: {exc.strerror or exc}{holder}")],
                      fix=[f"Find the holder: `ss -ltnp | grep :{port}`; stop it, or choose another --master-port "
                           f"(0 picks a free one)."] if in_use else [])
    return Report("check", [finding], {"stages": [{"name": "rendezvous", "title": "Rendezvous", "status": "failed",
                                                   "seconds": 0.0, "detail": finding.message}]})


