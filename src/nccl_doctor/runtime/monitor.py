"""Reads every rank's heartbeat from the store and feeds the detector: on rank 0 (a daemon thread of
`watch()`) or in a separate process (`nccl-doctor watch --store HOST:PORT`).

Keys, under `nccl-doctor/watch/` in the job's root store: `current` names the run (a torchrun restart
starts a new one), `RUN/config` says the world size and settings, `RUN/hb/RANK` is each rank's latest beat.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from typing import Any, Callable, TextIO

from ..model import Finding, Report
from .detect import Detector
from .settings import Settings

log = logging.getLogger("nccl_doctor")
GIVE_UP_AFTER = 3  # consecutive failed polls before concluding that the store is gone


class Monitor:
    """One store connection (prefixed to the run) -> detector; `poll` returns new findings."""

    def __init__(self, store: Any, settings: Settings, world_size: int) -> None:
        self.store, self.world_size = store, world_size
        self.detector = Detector(settings, world_size)
        self.seen: list[int] = []

    def poll(self) -> list[Finding]:
        return self.detector.observe(self.read(), time.monotonic())

    def read(self) -> dict[int, dict[str, Any]]:
        """The latest beat of every rank that has published one (new ranks are looked for each time)."""
        for rank in range(self.world_size):
            if rank not in self.seen and self.store.check([f"hb/{rank}"]):
                self.seen.append(rank)
        if not self.seen:
            return {}
        values = self.store.multi_get([f"hb/{r}" for r in self.seen])
        return {r: json.loads(v) for r, v in zip(self.seen, values)}

    def all_ended(self) -> bool:
        views = self.detector.views
        return len(views) == self.world_size and all(v.beat.get("state") == "ended" for v in views.values())

    def report(self) -> Report:
        return self.detector.report()


def print_finding(out: TextIO | None = None) -> Callable[[Finding], None]:
    """Default reporting on rank 0: the finding, rendered as in every other report, on stderr."""

    def show(finding: Finding) -> None:
        from ..render.text import render_text

        render_text(Report("watch", [finding]), out or sys.stderr)

    return show


class MonitorThread(threading.Thread):
    """Rank 0's detector: polls every beat; stops quietly when the store is gone."""

    def __init__(self, connect: Callable[[], Any | None], settings: Settings, world_size: int,
                 on_finding: Callable[[Finding], None]) -> None:
        super().__init__(name="nccl-doctor-monitor", daemon=True)
        self.connect, self.settings, self.world_size, self.on_finding = connect, settings, world_size, on_finding
        self.halt = threading.Event()
        self.monitor: Monitor | None = None
        self.lock = threading.Lock()  # the final report must not read the detector mid-poll

    def run(self) -> None:
        failures = 0
        while not self.halt.is_set():
            self.halt.wait(self.settings.beat)
            try:
                if self.monitor is None:
                    store = self.connect()
                    if store is None:
                        continue
                    self.monitor = Monitor(store, self.settings, self.world_size)
                beats = self.monitor.read()
                with self.lock:  # only the detector's bookkeeping, never the store I/O
                    new = self.monitor.detector.observe(beats, time.monotonic())
                failures = 0
            except Exception as exc:
                failures += 1
                log.debug("nccl-doctor: monitor poll failed: %s", exc)
                if self.monitor is not None and failures >= GIVE_UP_AFTER:
                    log.info("nccl-doctor: the store stopped answering; the watch stopped detecting (the job goes on)")
                    return
                continue
            for finding in new:
                try:
                    self.on_finding(finding)
                except Exception as exc:  # a faulty callback must not end detection
                    log.warning("nccl-doctor: on_finding callback failed: %s", exc)

    def stop(self, timeout: float = 2.0) -> None:
        self.halt.set()
        if self.is_alive() and self is not threading.current_thread():
            self.join(timeout)

    def report(self, refresh: bool = False) -> Report:
        """The detector's report; refresh=True (once the thread has stopped) reads the latest beats first."""
        if self.monitor is None:
            return Report("watch", facts={"world_size": self.world_size, "note": "the store was never reached"})
        with self.lock:
            if refresh:
                try:
                    self.monitor.poll()
                except Exception as exc:
                    log.debug("nccl-doctor: final poll failed: %s", exc)
            return self.monitor.report()
