"""Where a stalled rank is stuck: its training thread's Python stack, read from inside the process.

`python_stack` reads the frame of another thread with sys._current_frames(): pure Python, and it works
while that thread is blocked in a C call that released the GIL (a Gloo or NCCL wait, a socket, sleep).
`py_spy_stack` asks py-spy, when installed, for the same thread with native frames. `FrozenGuard`
covers the one case a Python thread cannot: a training thread that holds the GIL forever; faulthandler's
C watchdog then writes every thread's stack to stderr.
"""

from __future__ import annotations

import faulthandler
import os
import re
import shutil
import subprocess
import sys
import traceback

MAX_FRAMES = 24
PY_SPY_TIMEOUT = 10.0


def python_stack(thread_id: int | None) -> list[str]:
    """Innermost-last lines 'file:line in function: code' of a thread of this process; [] if it is gone."""
    frame = sys._current_frames().get(thread_id) if thread_id is not None else None
    if frame is None:
        return []
    lines = []
    for entry in traceback.extract_stack(frame)[-MAX_FRAMES:]:
        code = f": {entry.line.strip()}" if entry.line else ""
        lines.append(f"{_short(entry.filename)}:{entry.lineno} in {entry.name}{code}")
    return lines


def _short(path: str) -> str:
    """site-packages/torch/... rather than the venv's full path."""
    for marker in ("site-packages/", "dist-packages/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


def py_spy_path() -> str | None:
    """py-spy on PATH, or next to this Python (a virtual environment's bin/ is often not on PATH)."""
    beside = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return shutil.which("py-spy") or (beside if os.access(beside, os.X_OK) else None)


def py_spy_available() -> bool:
    return py_spy_path() is not None


def py_spy_stack(pid: int, thread: tuple[int | None, int | None], timeout: float = PY_SPY_TIMEOUT) -> list[str] | None:
    """py-spy's dump of one thread, given as (native id, Python ident); None when py-spy is missing,
    not permitted to read the process, or too slow."""
    exe = py_spy_path()
    if exe is None:
        return None
    try:
        done = subprocess.run([exe, "dump", "--native", "--pid", str(pid)], capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return one_thread(done.stdout, *thread) or None


def one_thread(dump: str, native_id: int | None, ident: int | None) -> list[str]:
    """py-spy prints 'Thread 22663 (idle)' blocks (older releases: 'Thread 0x7F..'), innermost frame first:
    keep our thread's frames, outermost first like Python's own stacks."""
    names = {f"thread {native_id} ", f"thread {ident:#x} " if ident is not None else None} - {None}
    for block in re.split(r"\n(?=Thread )", dump):
        head, _, body = block.partition("\n")
        if any(f"{head.lower()} ".startswith(n) for n in names):
            frames = [ln.strip() for ln in body.splitlines() if ln.strip()]
            return list(reversed(frames))[-MAX_FRAMES:]
    return []


class FrozenGuard:
    """Arms faulthandler's C watchdog: if the heartbeat thread cannot re-arm it for `seconds` (the GIL held
    by a stuck C call), every thread's stack goes to stderr. Re-arming costs a few microseconds."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.armed = False

    def rearm(self) -> None:
        try:
            faulthandler.dump_traceback_later(self.seconds, repeat=False, file=sys.__stderr__ or sys.stderr)
            self.armed = True
        except (ValueError, OSError, RuntimeError, AttributeError):  # no usable stderr (closed, redirected away)
            self.armed = False

    def disarm(self) -> None:
        if self.armed:
            faulthandler.cancel_dump_traceback_later()
            self.armed = False
