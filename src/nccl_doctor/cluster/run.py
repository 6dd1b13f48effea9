"""Running `check` or `bench`: as one rank of a launcher's job, or as the `--local N` parent.

`run_job` is the one entry: it reads the launcher's world (cluster/launch.py) and either runs this
process as one rank (rank 0 also judges, in a thread beside its own rank work) or starts `--local`
ranks on this host and judges them from here, where it holds the store, reads what children that
could not join printed, and reaps every child on every path (normal end, failure, Ctrl-C, SIGTERM).
The report goes to `deliver` (the command's renderer), which returns the exit code.
"""

from __future__ import annotations

import errno
import os
import signal
import socket
import threading
import uuid
import warnings
from typing import Callable

from ..model import Evidence, Finding, InputError, Report
from .judge import MARGIN, Events, Judge, JudgeContext, failed_to_start
from .launch import LocalRanks, World, WorldError, default_local_ranks, detect_world, listen_socket, watch_parent
from .options import Options
from .rank import key_prefix, run_rank
from .store import Exchange, client, port_holder, prefixed, serve
from .watchdog import Liveness
from ..roads import emits



def quiet_torch() -> None:
    """Keep torch's C++ chatter and a missing-NumPy warning off the user's terminal (before importing torch)."""
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    warnings.filterwarnings("ignore", message=".*NumPy.*")
    warnings.filterwarnings("ignore", category=FutureWarning, module="torch.distributed")


def run_job(options: Options, stages: list, *, deliver: Callable[[Report], int], events: Events | None = None,
            local: int | None = None, master_addr: str = "127.0.0.1", master_port: int = 0,
            check_world: Callable[[int], None] = lambda world_size: None,
            rank_env: Callable[[int], dict[int, dict[str, str]]] = lambda count: {}) -> int:
    """Run `stages` as one rank of the launcher's job, or on `local` ranks started here (0: one per GPU);
    returns the exit code. `check_world(world_size)` rejects options that do not fit the job's size
    (InputError); `rank_env(count)` gives per-rank variables for `--local` children."""
    env = dict(os.environ)
    try:
        world = None if local is not None else detect_world(env)
    except WorldError as exc:
        return deliver(failed_to_start(options.command, Finding(
            exc.cause, "error", str(exc), evidence=[Evidence("launcher environment", str(exc))],
            fix=[exc.fix] if exc.fix else [])))
    if world is not None:
        check_world(world.world_size)
        return run_as_rank(world, options, stages, env, deliver=deliver, events=events)
    count = local or default_local_ranks()
    check_world(count)
    report = run_local(count, options, stages, master_addr=master_addr, master_port=master_port,
                       rank_env=rank_env(count), events=events)
    code = deliver(report)
    if report.facts.get("interrupted"):  # what was measured is printed; cli.py says why it ended and exits 130/143
        raise KeyboardInterrupt
    return code


def run_as_rank(world: World, options: Options, stages: list, env: dict[str, str], *,
                deliver: Callable[[Report], int], events: Events | None = None) -> int:
    """This process is one rank; rank 0 also judges (unless a --local parent does)."""
    quiet_torch()
    local_judge = env.get("NCCL_DOCTOR_LOCAL_JUDGE") == "1"
    if local_judge:
        watch_parent(env)
    start = None
    if world.rank == 0 and not local_judge:
        start = lambda address: _judge_thread(world, address, options, stages, deliver, events)  # noqa: E731
    return run_rank(world, options, env, stages, local_judge=local_judge, deliver=deliver, start_judge=start)


def _judge_thread(world: World, address: tuple[str, int], options: Options, stages: list,
                  deliver: Callable[[Report], int], events: Events | None) -> Callable[[], int]:
    """Start the judge beside rank 0's own work; returns a function that waits for its exit code."""
    exchange = Exchange(prefixed(client(*address, options.timeout + MARGIN), key_prefix(options.command, world.run_id)))
    ctx = JudgeContext(exchange, world.world_size, options, world.launcher, Liveness(exchange),
                       run_token=uuid.uuid4().hex[:12], events=events or Events())
    _on_sigterm(ctx.terminating)
    code: list[int] = []

    def judge() -> None:
        report = Judge(ctx, stages).run()
        report.facts.setdefault("world", {})["master"] = f"{world.master_addr}:{world.master_port}"
        code.append(deliver(report))
        exchange.wait_for_byes(len(ctx.identities))

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


# ------------------------------------------------------------------ --local N

def run_local(count: int, options: Options, stages: list, *, master_addr: str = "127.0.0.1", master_port: int = 0,
              rank_env: dict[int, dict[str, str]] | None = None, events: Events | None = None) -> Report:
    """Spawn `count` ranks on this host, each running `nccl-doctor COMMAND` with the same options, and judge
    them; every child is reaped before this returns."""
    if count < 1:
        raise InputError(f"--local {count}: at least one rank")
    try:
        sock = listen_socket(master_port)
    except OSError as exc:
        return _cannot_host(options.command, master_port, exc)
    port = sock.getsockname()[1]
    quiet_torch()
    store = serve(port, options.timeout + MARGIN, listen_fd=sock.detach())  # up before any rank is told of it
    local = LocalRanks(count, options.argv(), master_addr, port, rank_env or {}, command=options.command)
    try:  # Ctrl-C and SIGTERM (cli.py raises Terminated, a KeyboardInterrupt) end here too: the ranks are reaped
        local.start()
        exchange = Exchange(prefixed(store, key_prefix(options.command, World.run_id)))
        ctx = JudgeContext(exchange, count, options, "local", Liveness(exchange, local.exits), local=local,
                           run_token=uuid.uuid4().hex[:12], events=events or Events())
        report = Judge(ctx, stages).run()
        report.facts.setdefault("world", {})["master"] = f"{master_addr}:{port}"
        return report
    finally:
        local.stop(grace=2.0)
        sock.close()


@emits("master-port-invalid", "port-in-use")
def _cannot_host(command: str, port: int, exc: OSError) -> Report:
    """The --local parent cannot bind the store's port: in use (who holds it) or invalid."""
    in_use = exc.errno == errno.EADDRINUSE
    holder = f"; held by {port_holder(port) or 'an unknown process'}" if in_use else ""
    return failed_to_start(command, Finding(
        "port-in-use" if in_use else "master-port-invalid", "error",
        f"cannot host the store on port {port}: {exc.strerror or exc}", hosts=[socket.gethostname()],
        evidence=[Evidence("bind", f"port {port}: {exc.strerror or exc}{holder}")],
        fix=[f"Find the holder: `ss -ltnp | grep :{port}`; stop it, or choose another --master-port "
             f"(0 picks a free one)."] if in_use else []))
