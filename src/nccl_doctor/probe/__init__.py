"""Facts about this host, as plain JSON-able dicts. Probes observe; they never judge.

`collect()` runs every section in its own thread with a deadline: a section that raises or hangs becomes
{"unavailable": "why"} and the others are unaffected. Keys are stable so that `check` can compare sections
between ranks.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from . import environment, gpus, host, infiniband, limits, network, software

SECTIONS: dict[str, Callable[[Mapping[str, str]], dict[str, Any]]] = {
    "host": host.probe,
    "software": software.probe,
    "gpus": gpus.probe,
    "network": network.probe,
    "infiniband": infiniband.probe,
    "limits": limits.probe,
    "environment": environment.probe,
}
SECTION_TIMEOUT_S = 10.0


def _run(fn: Callable[[Mapping[str, str]], dict[str, Any]], env: Mapping[str, str], out: dict[str, Any]) -> None:
    try:
        out["facts"] = fn(env)
    except Exception as exc:  # a failing probe is a fact, never a crash
        out["facts"] = {"unavailable": f"{type(exc).__name__}: {exc}"}


def collect(env: Mapping[str, str] | None = None, timeout: float = SECTION_TIMEOUT_S) -> dict:
    """All facts of this host: host, software, gpus, network, infiniband, limits, environment."""
    env = os.environ if env is None else env
    results: dict[str, dict[str, Any]] = {name: {} for name in SECTIONS}
    threads = {name: threading.Thread(target=_run, args=(fn, env, results[name]), name=f"probe-{name}", daemon=True)
               for name, fn in SECTIONS.items()}
    for thread in threads.values():
        thread.start()
    deadline = time.monotonic() + timeout
    facts: dict[str, Any] = {}
    for name, thread in threads.items():
        thread.join(max(0.0, deadline - time.monotonic()))
        facts[name] = results[name].get("facts", {"unavailable": f"probe did not finish within {timeout:g} s"})
    return facts
