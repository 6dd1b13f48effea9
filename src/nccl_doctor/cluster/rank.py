"""One rank of the check: join the store, then run the stages the judge calls for, in lockstep.

A rank never decides on its own whether the check goes on: after each stage it waits (bounded) for
the judge's verdict, which names the next stage or ends the run. Whatever a rank cannot report
through the store (it never reached it) goes to its stdout as one JSON line, which the `--local`
parent reads, or, under other launchers, to `deliver` as a short report of its own.
"""

from __future__ import annotations

import importlib
import json
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ..model import Evidence, Finding, Report
from .faults import Faults
from .judge import MARGIN, failed_to_start
from .launch import World
from .options import Options
from .store import Exchange, PortInUse, StoreUnreachable, client, connect, prefixed, serve
from .watchdog import RankWatch
from ..roads import emits

KEY_ROOT = "nccl-doctor"
INTERNAL_PREFIX = "NCCL_DOCTOR_"


@dataclass
class RankContext:
    world: World
    host: str
    exchange: Exchange
    env: dict[str, str]  # the environment as the user launched us, before we touched it
    faults: Faults
    options: Options
    store_address: tuple[str, int]
    plan: dict[str, Any] = field(default_factory=dict)  # everything the judge's verdicts said so far
    state: dict[str, Any] = field(default_factory=dict)  # what a stage leaves for later ones
    deferred: list[Callable[[], None]] = field(default_factory=list)

    @property
    def rank(self) -> int:
        return self.world.rank

    def publish(self, step: str, payload: dict) -> None:
        self.exchange.publish(step, self.rank, payload)

    def verdict(self, step: str, patience: float = 0.0) -> dict:
        found = self.exchange.verdict(step, self.options.timeout + patience + MARGIN)
        self.plan.update(found)
        return found

    def mark(self, step: str) -> None:
        """Record entering a step whose completion the judge watches (a collective, backend init)."""
        self.exchange.put(f"enter/{step}/{self.rank}", time.time())

    def defer(self, fn: Callable[[], None]) -> None:
        """Run fn once the current stage's verdict has arrived (e.g. close listeners peers still probe)."""
        self.deferred.append(fn)

    def new_store_connection(self, prefix: str) -> Any:
        host, port = self.store_address
        return prefixed(client(host, port, self.options.timeout + MARGIN),
                        key_prefix(self.options.command, self.world.run_id) + prefix)


def key_prefix(command: str, run_id: str) -> str:
    """Our keys in the store: a command's run of one job (the launcher's run id)."""
    return f"{KEY_ROOT}/{command}/{run_id}/"


class JoinFailure(Exception):
    """This rank could not join: a finding to hand to whoever reports."""

    def __init__(self, finding: Finding) -> None:
        super().__init__(finding.message)
        self.finding = finding


@emits("master-addr-unresolvable", "master-unreachable", "port-in-use")
def open_store(world: World, hosts_store: bool, deadline: float) -> tuple[Any, tuple[str, int]]:
    """Host the store (rank 0 outside torchrun's agent store) or connect to it, within the deadline."""
    where = f"{world.master_addr}:{world.master_port}"
    host = socket.gethostname()
    try:
        if hosts_store:
            store = serve(world.master_port, deadline - time.monotonic())
            return store, ("127.0.0.1", world.master_port)
        return connect(world.master_addr, world.master_port, deadline), (world.master_addr, world.master_port)
    except PortInUse as exc:
        raise JoinFailure(Finding(
            "port-in-use", "error", f"rank {world.rank} cannot host the store: {exc}", ranks=[world.rank],
            hosts=[host], evidence=[Evidence("TCPStore", exc.detail)],
            fix=[f"Find the holder: `ss -ltnp | grep :{world.master_port}`; stop it, or use another port "
                 f"(MASTER_PORT / --master-port)."])) from None
    except StoreUnreachable as exc:
        cause = "master-addr-unresolvable" if exc.reason.startswith("name not resolved") else "master-unreachable"
        raise JoinFailure(Finding(
            cause, "error", f"rank {world.rank} on {host} cannot reach the store at {where}: {exc.reason}",
            ranks=[world.rank], hosts=[host], evidence=[Evidence(f"rank {world.rank}", str(exc))],
            fix=[f"From {host}, test the port while rank 0 runs: `nc -vz {world.master_addr} {world.master_port}`."]
        )) from None


def run_rank(world: World, options: Options, env: dict[str, str], stages: list, *, local_judge: bool,
             deliver: Callable[[Report], int],
             start_judge: Callable[[tuple[str, int]], Callable[[], int]] | None = None) -> int:
    """Run this rank to the end; returns the process exit code (the judge's, on the rank that hosts it).
    `deliver` draws a report this rank must give alone (it could not join, and no --local parent listens)."""
    faults = Faults.from_env(world.rank, env)
    if faults.skips_start():
        return 0
    faults.before("start")
    host = socket.gethostname()
    hosts_store = world.rank == 0 and not world.agent_store and not local_judge
    importlib.import_module("torch.distributed")  # seconds of start-up: not part of the store's deadline
    try:
        raw, address = open_store(world, hosts_store, time.monotonic() + options.timeout)
    except JoinFailure as failure:
        if local_judge:  # the --local parent reads it from our stdout
            print(json.dumps({"join_failure": failure.finding.to_wire()}), flush=True)
            return 1
        return deliver(failed_to_start(options.command, failure.finding))
    exchange = Exchange(prefixed(raw, key_prefix(options.command, world.run_id)))
    user_env = {k: v for k, v in env.items() if not k.startswith(INTERNAL_PREFIX)}  # ours are not the user's
    ctx = RankContext(world, host, exchange, user_env, faults, options, address)
    judge_code = start_judge(address) if start_judge else (lambda: 0)
    main_done = threading.Event()
    RankWatch(Exchange(ctx.new_store_connection("")), world.rank, judge_code, main_done).start()
    try:
        _follow_judge(ctx, stages)
    except Exception as exc:  # the judge names the rank as missing; these are its last words
        words = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}"
        print(f"nccl-doctor: rank {world.rank}: {words}", file=sys.stderr)
        _last_words(exchange, world.rank, words)
    finally:
        main_done.set()
        exchange.bye()
    return judge_code()


def _follow_judge(ctx: RankContext, stages: list) -> None:
    by_name = {s.name: s for s in stages}
    name: str | None = stages[0].name
    while name:
        stage = by_name[name]
        ctx.faults.before(stage.name)
        stage.on_rank(ctx)
        name = ctx.verdict(stage.name, stage.patience).get("next")
        while ctx.deferred:
            ctx.deferred.pop()()


def _last_words(exchange: Exchange, rank: int, words: str) -> None:
    try:
        exchange.put(f"crash/{rank}", words)
    except Exception:
        pass
