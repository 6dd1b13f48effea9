"""Every rank's heartbeat: a daemon thread that samples this rank's progress and publishes it as JSON.

Every `sample` seconds it reads the collective sequence number of the watched group (PyTorch counts
collectives on entry, so a rank waiting inside collective N already reads N) and notes when it changed:
those arrival times, compared across ranks, show who reaches collectives late. With each arrival go the
training thread's time on a CPU and time waiting for one, so far (Linux schedstat): a rank late because
the host is oversubscribed waited for a CPU more than its work explains; a straggler had more work.
Every `beat` seconds it writes `hb/RANK` to the store. A rank idle for a while also publishes its training
thread's stack. The training thread never waits on any of this; when the store stops answering the thread
gives up.
"""

from __future__ import annotations

import logging
import os
import statistics
import threading
import time
from collections import deque
from typing import Any, Callable

from .job import default_group_state, sequence_number
from .progress import Progress
from .settings import Settings
from .stacks import FrozenGuard, py_spy_available, py_spy_stack, python_stack

log = logging.getLogger("nccl_doctor")

ARRIVALS_KEPT = 64  # recent changes of the sequence number published per beat
GIVE_UP_AFTER = 3  # consecutive failed beats, once connected, before we conclude the store is gone


class Heartbeat(threading.Thread):
    def __init__(self, rank: int, host: str, progress: Progress, settings: Settings,
                 connect: Callable[[], Any | None], group: Any = None, stacks: str = "auto",
                 frozen_guard: bool = True) -> None:
        super().__init__(name=f"nccl-doctor-heartbeat-{rank}", daemon=True)
        self.rank, self.host, self.progress, self.settings = rank, host, progress, settings
        self.connect, self.group, self.stacks = connect, group, stacks
        self.halt = threading.Event()
        self.store: Any = None
        self.beats = 0
        self.pg: Any = None
        self.backend: str | None = None
        self.pg_timeout: float | None = None
        self.seq: int | None = None
        self.seq_at = time.monotonic()  # when the sequence number last changed (or we started)
        self.arrivals: deque[tuple] = deque(maxlen=ARRIVALS_KEPT)  # (seq, wall time, cpu time, cpu wait)
        self.max_gap = 0.0
        self.gap_phases: set[str] = set()  # phases seen during the gap now open
        self.max_gap_phases: list[str] = []
        self.max_gap_step: int | None = None
        self.spy: dict[str, Any] = {}  # py-spy's stack for the current stall, filled by a helper thread
        self.guard = FrozenGuard(settings.hang_after + settings.stale_after) if frozen_guard else None
        self.gave_up = False

    # ------------------------------------------------------------------ the loop

    def run(self) -> None:
        next_beat = time.monotonic()
        failures = 0
        while not self.halt.is_set():
            self._sample()
            if time.monotonic() >= next_beat:
                next_beat = time.monotonic() + self.settings.beat
                if self._beat():
                    failures = 0
                elif self.store is not None:
                    failures += 1
                    if failures >= GIVE_UP_AFTER:
                        self._give_up()
                        return
            self.halt.wait(self.settings.sample)

    def stop(self, timeout: float = 2.0) -> None:
        """End the thread, telling the detector this rank ended on purpose (a last, bounded beat)."""
        self.halt.set()
        if self.is_alive() and self is not threading.current_thread():
            self.join(timeout)
        if self.guard:
            self.guard.disarm()
        if self.store is not None and not self.gave_up:
            try:
                self.store.set(f"hb/{self.rank}", _json(self.payload(state="ended")))
            except Exception:
                pass

    def _give_up(self) -> None:
        self.gave_up = True
        if self.guard:
            self.guard.disarm()
        log.info("nccl-doctor: rank %d: the store stopped answering; heartbeats stopped (the job goes on)", self.rank)

    # ------------------------------------------------------------------ sampling (every `sample` seconds)

    def _sample(self) -> None:
        if self.pg is None:
            self.pg, self.backend, self.pg_timeout = default_group_state(self.group)
        seq = sequence_number(self.pg) if self.pg is not None else None
        now = time.monotonic()
        if seq is not None and seq != self.seq:
            if self.seq is not None:
                self._close_gap(now - self.seq_at)
            self.seq, self.seq_at = seq, now
            self.arrivals.append((seq, round(time.time(), 4), *cpu_times(self.progress.native_id)))
        self.gap_phases.add(self.progress.phase)

    def _close_gap(self, gap: float) -> None:
        if gap > self.max_gap:
            self.max_gap, self.max_gap_phases, self.max_gap_step = gap, sorted(self.gap_phases), self.progress.step
        self.gap_phases = {self.progress.phase}

    # ------------------------------------------------------------------ publishing (every `beat` seconds)

    def _beat(self) -> bool:
        if self.store is None:
            try:
                self.store = self.connect()
            except Exception as exc:  # no store yet, or never: try again next beat
                log.debug("nccl-doctor: rank %d: no store yet: %s", self.rank, exc)
                return False
            if self.store is None:
                return False
        self.beats += 1
        try:
            self.store.set(f"hb/{self.rank}", _json(self.payload()))
        except Exception as exc:
            log.debug("nccl-doctor: rank %d: heartbeat failed: %s", self.rank, exc)
            return False
        if self.guard:
            self.guard.rearm()
        return True

    def idle(self, now: float) -> float:
        """Seconds since this rank last made progress: a new collective or a new step."""
        return now - max(self.seq_at, self.progress.step_at)

    def payload(self, state: str = "running") -> dict[str, Any]:
        now, p = time.monotonic(), self.progress
        idle = self.idle(now)
        beat = {"rank": self.rank, "host": self.host, "pid": os.getpid(), "beat": self.beats, "state": state,
                "t": round(time.time(), 4), "step": p.step, "step_time": _median(p.durations),
                "phase": p.phase, "phase_s": round(now - p.phase_at, 3), "seq": self.seq, "idle": round(idle, 3),
                "arrivals": list(self.arrivals), "open_gap": round(now - self.seq_at, 3) if self.seq is not None else None,
                "max_gap": round(self.max_gap, 3), "max_gap_phases": self.max_gap_phases,
                "max_gap_step": self.max_gap_step, "backend": self.backend, "pg_timeout": self.pg_timeout}
        if idle >= self.settings.stack_after and state == "running":
            beat.update(self._stack())
        else:
            self.spy.clear()
        return beat

    def _stack(self) -> dict[str, Any]:
        p = self.progress
        if self.stacks in ("auto", "py-spy") and py_spy_available():
            if not self.spy:
                self.spy["pending"] = True
                threading.Thread(target=self._spy, args=((p.native_id, p.thread_id),), daemon=True,
                                 name="nccl-doctor-py-spy").start()
            if self.spy.get("stack"):
                return {"stack": self.spy["stack"], "stack_source": "py-spy"}
        return {"stack": python_stack(p.thread_id), "stack_source": "python"}

    def _spy(self, thread: tuple[int | None, int | None]) -> None:
        stack = py_spy_stack(os.getpid(), thread)
        if stack:
            self.spy["stack"] = stack


def cpu_times(thread: int | None) -> tuple[float, float] | tuple[()]:
    """Seconds the thread has spent on a CPU, and runnable but waiting for one, since it started (() off Linux)."""
    try:
        with open(f"/proc/self/task/{thread}/schedstat") as f:
            ran, waited = f.read().split()[:2]
        return round(int(ran) / 1e9, 4), round(int(waited) / 1e9, 4)
    except (OSError, ValueError):
        return ()


def _median(values: Any) -> float | None:
    values = list(values)
    return round(statistics.median(values), 4) if values else None


def _json(value: Any) -> str:
    import json

    return json.dumps(value, separators=(",", ":"))
