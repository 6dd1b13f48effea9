"""`nccl_doctor.watch()`: heartbeats on every rank, detection on rank 0, findings long before the timeout.

    w = nccl_doctor.watch(hang_after=120)       # or: with nccl_doctor.watch(): ...
    for batch in loader:
        ...
        w.step()                                 # or nccl_doctor.step()
        with nccl_doctor.phase("eval"): evaluate()

Callable before or after init_process_group: the heartbeat thread connects once a store exists (the
default group's, torchrun's agent store, or the one given). It costs the training thread one attribute
write per step() and nothing else; the threads are daemons and stop quietly when the store goes away.
"""

from __future__ import annotations

import atexit
import sys
import threading
import time
from types import TracebackType
from typing import Any, Callable

from ..model import Finding, Report
from .heartbeat import Heartbeat
from .job import STORE_TIMEOUT, Identity, agent_store, identity, job_store, keys, own_connection
from .monitor import MonitorThread, print_finding
from .progress import PROGRESS, phase
from .settings import Settings

_active: Watch | None = None
_lock = threading.Lock()


class Watch:
    """The running watch of this process (one per process; `watch()` returns it again while it runs)."""

    def __init__(self, ident: Identity, settings: Settings, *, store: Any = None, group: Any = None,
                 detect: bool | None = None, on_finding: Callable[[Finding], None] | None = None,
                 stacks: str = "auto", frozen_guard: bool = True) -> None:
        self.ident, self.settings, self.store = ident, settings, store
        PROGRESS.watch_this_thread()  # the thread that starts the watch is the one whose stack matters
        self.heartbeat = Heartbeat(ident.rank, ident.host, PROGRESS, settings, self._connect, group, stacks,
                                   frozen_guard)
        self.monitor: MonitorThread | None = None
        if (detect if detect is not None else ident.rank == 0) and not ident.alone:
            self.monitor = MonitorThread(self._connect, settings, ident.world_size, on_finding or print_finding())
        self._announced = False
        self._stopped = False
        self._printing = on_finding is None

    def start(self) -> Watch:
        if self.ident.alone:  # a plain `python train.py`: no peers to wait for, nothing to watch
            print("nccl-doctor: watch() outside a distributed job (no process group, no launcher variables): "
                  "nothing to watch", file=sys.stderr)
            return self
        self.heartbeat.start()
        if self.monitor:
            self.monitor.start()
        atexit.register(self.stop)
        return self

    # ------------------------------------------------------------------ for the training loop

    def step(self, number: int | None = None) -> None:
        """Mark the end of a training step."""
        PROGRESS.mark_step(number)

    def phase(self, name: str) -> phase:
        """Mark the phase this rank is in (`with w.phase("eval"): ...`)."""
        return phase(name)

    # ------------------------------------------------------------------ the end

    def report(self) -> Report:
        """What the detector found so far (on the detecting rank; elsewhere an empty report)."""
        return self.monitor.report() if self.monitor else Report("watch", facts={"rank": self.ident.rank})

    def stop(self) -> Report:
        """Stop both threads (bounded), tell the detector this rank ended, return the final report."""
        global _active
        if self._stopped:
            return self.report()
        self._stopped = True
        self.heartbeat.stop()
        if self.monitor:
            self.monitor.stop()
        with _lock:
            if _active is self:
                _active = None
        report = self.monitor.report(refresh=True) if self.monitor else self.report()
        if self.monitor and self._printing:
            for finding in report.findings:
                if finding.cause == "pg-timeout-unfit":  # measured at the end, not shown live
                    print_finding()(finding)
        return report

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    # ------------------------------------------------------------------ the store, once there is one

    def _connect(self) -> Any | None:
        """Called from our threads, each for its own connection; None while there is no store yet."""
        base = job_store(self.store)
        if base is not None:
            conn = own_connection(base)
        else:
            conn = agent_store(self.ident.world, time.monotonic() + STORE_TIMEOUT)
            if conn is None:
                return None  # before init_process_group under a launcher without an agent store: try later
            conn = own_connection(conn)
        root = keys(conn, "watch")
        run = self.ident.run_id
        if not self._announced:
            root.set("current", run)
            root.set(f"{run}/config", _config(self.ident, self.settings))
            self._announced = True
        return keys(conn, "watch", run)


def _config(ident: Identity, settings: Settings) -> str:
    import dataclasses
    import json

    return json.dumps({"world_size": ident.world_size, "settings": dataclasses.asdict(settings)})


def watch(*, store: Any = None, group: Any = None, hang_after: float | None = None, beat: float | None = None,
          detect: bool | None = None, on_finding: Callable[[Finding], None] | None = None, stacks: str = "auto",
          frozen_guard: bool = True, **thresholds: Any) -> Watch:
    """Start watching this rank (and, on rank 0, the whole job); returns the running `Watch`.

    store: the job's store (default: the default process group's, or torchrun's agent store).
    group: the process group whose collectives count as progress (default: the default group).
    hang_after: seconds without progress, while the others wait, before a rank is reported hung.
    detect: run the detector here (default: on rank 0 only; False leaves it to `nccl-doctor watch`).
    on_finding: called on the detecting rank with each new finding (default: print it on stderr).
    stacks: "auto" (py-spy when installed, else Python's own), "python".
    thresholds: any field of runtime Settings (straggler_share, timeout_fraction, ...).
    """
    global _active
    with _lock:
        if _active is not None:
            return _active
        settings = Settings.defaults().with_(hang_after=hang_after, beat=beat, **thresholds)
        _active = Watch(identity(group), settings, store=store, group=group, detect=detect, on_finding=on_finding,
                        stacks=stacks, frozen_guard=frozen_guard)
        return _active.start()


def active() -> Watch | None:
    return _active
