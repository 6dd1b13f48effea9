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

from . import environment, gpus, hardware, host, infiniband, limits, network, software

Facts = dict[str, Any]
SECTIONS: dict[str, Callable[[Mapping[str, str]], Facts]] = {
    "host": host.probe,
    "software": software.probe,
    "gpus": gpus.probe,
    "network": network.probe,
    "infiniband": infiniband.probe,
    "limits": limits.probe,
    "environment": environment.probe,
}
# Sections that build on another section's facts: name -> (fn(env, those facts, seconds left), that section).
DERIVED: dict[str, tuple[Callable[[Mapping[str, str], Facts, float], Facts], str]] = {
    "hardware": (hardware.probe, "infiniband"),
}
SECTION_TIMEOUT_S = 10.0
SUBPROCESS_MARGIN_S = 0.5  # a derived section's own waits end this long before the deadline: no orphans


def _run(fn: Callable[..., Facts], args: tuple[Any, ...], out: dict[str, Any]) -> None:
    try:
        out["facts"] = fn(*args)
    except Exception as exc:  # a failing probe is a fact, never a crash
        out["facts"] = {"unavailable": f"{type(exc).__name__}: {exc}"}


def _run_after(needed: threading.Thread, needed_out: dict[str, Any], name: str, fn: Callable[..., Facts],
               env: Mapping[str, str], deadline: float, out: dict[str, Any]) -> None:
    """Wait (at most half the time left) for the section `fn` builds on, then run it with what is left."""
    needed.join(max(0.0, deadline - time.monotonic()) / 2)
    base = needed_out.get("facts", {"unavailable": f"the {name} probe did not finish"})
    _run(fn, (env, base, max(0.1, deadline - time.monotonic() - SUBPROCESS_MARGIN_S)), out)


def collect(env: Mapping[str, str] | None = None, timeout: float = SECTION_TIMEOUT_S) -> dict:
    """All facts of this host: host, software, gpus, network, infiniband, limits, environment, hardware."""
    env = os.environ if env is None else env
    deadline = time.monotonic() + timeout
    results: dict[str, dict[str, Any]] = {name: {} for name in [*SECTIONS, *DERIVED]}
    threads = {name: threading.Thread(target=_run, args=(fn, (env,), results[name]), name=f"probe-{name}",
                                      daemon=True) for name, fn in SECTIONS.items()}
    for name, (fn, needs) in DERIVED.items():
        threads[name] = threading.Thread(target=_run_after, name=f"probe-{name}", daemon=True,
                                         args=(threads[needs], results[needs], needs, fn, env, deadline, results[name]))
    for thread in threads.values():
        thread.start()
    facts: dict[str, Any] = {}
    for name, thread in threads.items():
        thread.join(max(0.0, deadline - time.monotonic()))
        facts[name] = results[name].get("facts", {"unavailable": f"probe did not finish within {timeout:g} s"})
    return facts
