"""What the training thread tells the watcher: the step it is on and the phase it is in.

The training thread only writes a few attributes here (no lock, no I/O, no allocation beyond a
float); the heartbeat thread reads them. Plain attribute writes are atomic under the GIL, and a read
that straddles two writes is at worst one beat stale.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from types import TracebackType

TRAIN = "train"
RECENT_STEPS = 32  # step durations kept to judge this rank's own step time


class Progress:
    """One process's step and phase, written by the training thread."""

    def __init__(self) -> None:
        self.step: int | None = None
        self.step_at = time.monotonic()  # when the step last changed
        self.durations: deque[float] = deque(maxlen=RECENT_STEPS)
        self.phase = TRAIN
        self.phase_at = time.monotonic()
        self.thread_id = threading.main_thread().ident  # whose stack a stalled rank publishes
        self.native_id = threading.main_thread().native_id

    def watch_this_thread(self) -> None:
        self.thread_id, self.native_id = threading.get_ident(), threading.get_native_id()

    def mark_step(self, step: int | None = None) -> None:
        now = time.monotonic()
        if self.step is not None:
            self.durations.append(now - self.step_at)
        self.step = step if step is not None else (self.step or 0) + 1
        self.step_at = now

    def set_phase(self, name: str) -> str:
        previous, self.phase, self.phase_at = self.phase, str(name), time.monotonic()
        return previous


PROGRESS = Progress()


class phase:  # noqa: N801 (used like a function: `nccl_doctor.phase("eval")` or `with nccl_doctor.phase("eval"):`)
    """Mark the phase this rank is in; as a context manager, the previous phase comes back on exit.

    A rank that is behind while the others wait is judged by its phase: in "eval", "checkpoint",
    "preprocess" or "resume" it is working (reported when the wait nears the process-group timeout),
    in "train" it is hung (reported after `hang_after`).
    """

    def __init__(self, name: str) -> None:
        self.previous = PROGRESS.set_phase(name)

    def __enter__(self) -> phase:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        PROGRESS.set_phase(self.previous)


def step(number: int | None = None) -> None:
    """Mark the end of a training step (the next number, or `number`): cheap enough for every step."""
    PROGRESS.mark_step(number)
