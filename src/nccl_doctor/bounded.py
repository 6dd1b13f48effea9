"""One way to bound a call that has no timeout of its own (a hung resolver, NVML driver call, or a
c10d handshake that blocks with the GIL released): run it in a daemon thread and abandon it."""

from __future__ import annotations

import threading
from typing import Any, Callable, TypeVar

T = TypeVar("T")


def within(seconds: float, fn: Callable[[], T], name: str = "bounded") -> T:
    """fn(), or TimeoutError after `seconds` (the thread is left behind, never waited for).
    fn's own exception is re-raised in the caller."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed to the caller
            box["error"] = exc

    thread = threading.Thread(target=run, name=f"nccl-doctor-{name}", daemon=True)
    thread.start()
    thread.join(max(0.0, seconds))
    if thread.is_alive():
        raise TimeoutError(f"no answer within {seconds:g} s")
    if "error" in box:
        raise box["error"]
    return box["value"]
