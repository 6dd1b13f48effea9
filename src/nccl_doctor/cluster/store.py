"""JSON exchange between the ranks and the judge over the c10d TCPStore, every call bounded.

Never through the backend under test (it may be what is broken) and never pickle: each rank writes
JSON under `STEP/r/RANK` and bumps the counter `STEP/n`; the judge polls the counter until the world
is complete or the deadline passes, reads the values with a few `multi_get`s, and writes its verdict
under `STEP/verdict`, which the ranks wait for. Rank 0's work and the store traffic are linear in
the number of ranks.
"""

from __future__ import annotations

import errno
import json
import socket
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable

from ..bounded import within

POLL_FIRST, POLL_MAX = 0.002, 0.05  # judge's counter polling: fast at first, then gentle on the store
BYE_WAIT = 3.0  # how long the store's host waits for every rank to read its last verdict
MULTI_GET = 256  # keys per multi_get: one call for 8,192 fingerprints takes 13x longer than 32 calls of 256


class StoreUnreachable(Exception):
    """The store's address could not be reached; `reason` is one short word group for the report."""

    def __init__(self, host: str, port: int, reason: str, detail: str = "") -> None:
        super().__init__(f"cannot reach the store at {host}:{port}: {reason}" + (f" ({detail})" if detail else ""))
        self.host, self.port, self.reason, self.detail = host, port, reason, detail


class PortInUse(Exception):
    def __init__(self, port: int, holder: str | None, detail: str) -> None:
        who = f" by {holder}" if holder else ""
        super().__init__(f"port {port} is already in use{who}")
        self.port, self.holder, self.detail = port, holder, detail


def probe_endpoint(host: str, port: int, timeout: float) -> str | None:
    """Try one TCP connection; None when it connects, else why not (refused, timed out, ...)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        return f"name not resolved ({exc.strerror})"
    last = "no address"
    for family, kind, proto, _, addr in infos:
        with socket.socket(family, kind, proto) as sock:
            sock.settimeout(timeout)
            try:
                sock.connect(addr)
                return None
            except socket.timeout:
                last = f"timed out after {timeout:.0f} s (firewall, wrong address or no route)"
            except OSError as exc:
                last = _socket_reason(exc)
    return last


def _socket_reason(exc: OSError) -> str:
    words = {errno.ECONNREFUSED: "connection refused (nothing listens on that port: rank 0 not started, "
                                 "crashed, or a different MASTER_PORT)",
             errno.EHOSTUNREACH: "no route to host", errno.ENETUNREACH: "network unreachable",
             errno.ETIMEDOUT: "timed out (firewall, wrong address or no route)"}
    return words.get(exc.errno or 0, exc.strerror or str(exc))


def connect(host: str, port: int, deadline: float) -> Any:
    """A TCPStore client, once the port accepts connections; StoreUnreachable at the deadline.

    TCPStore's own connect loop retries past its timeout and only says 'timed out'; probing the
    socket ourselves keeps the deadline and tells refused from unreachable from unresolved.
    """
    from torch.distributed import TCPStore

    while True:  # at least one attempt, however late we start
        left = deadline - time.monotonic()
        reason = probe_endpoint(host, port, min(max(left, 1.0), 3.0)) or ""
        if not reason:
            left = max(1.0, deadline - time.monotonic())
            try:
                return within(left, lambda: TCPStore(host, port, None, False, timedelta(seconds=left)))
            except Exception as exc:  # accepted, then no c10d handshake: another service, or a dying store
                raise StoreUnreachable(host, port, f"the port accepts connections but no c10d store answered "
                                                   f"within {left:.0f} s (another service holds it?)",
                                       _first_line(exc)) from None
        if reason.startswith("name not resolved") or time.monotonic() >= deadline:
            raise StoreUnreachable(host, port, reason)
        time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))


def serve(port: int, timeout: float, listen_fd: int | None = None) -> Any:
    """Host the store (rank 0, or the --local parent); PortInUse names who holds the port."""
    from torch.distributed import TCPStore

    try:
        return TCPStore("0.0.0.0", port, None, True, timedelta(seconds=timeout), wait_for_workers=False,
                        master_listen_fd=listen_fd)
    except Exception as exc:
        text = _first_line(exc)
        if "EADDRINUSE" in text or "in use" in text:
            raise PortInUse(port, port_holder(port), text) from None
        raise


def port_holder(port: int) -> str | None:
    """Which process listens on the port (psutil; None when it cannot be told)."""
    try:
        import psutil

        for conn in psutil.net_connections(kind="tcp"):
            if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN:
                if conn.pid is None:
                    return "another process"
                try:
                    command = " ".join(" ".join(psutil.Process(conn.pid).cmdline()).split())
                    return f"pid {conn.pid} ({command[:100]})"
                except psutil.Error:
                    return f"pid {conn.pid}"
    except Exception:
        return None
    return None


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def prefixed(store: Any, prefix: str) -> Any:
    from torch.distributed import PrefixStore

    return PrefixStore(prefix, store)


def client(host: str, port: int, timeout: float) -> Any:
    """A second connection to the same store, for a thread that must not wait behind another's call."""
    from torch.distributed import TCPStore

    return within(timeout, lambda: TCPStore(host, port, None, False, timedelta(seconds=timeout)))


@dataclass
class Gathered:
    """What a step brought in: results by rank, and the ranks that did not answer in time."""

    results: dict[int, dict]
    missing: list[int]


class Exchange:
    """Steps of JSON between ranks and the judge, on one store connection (not shared across threads)."""

    def __init__(self, store: Any) -> None:
        self.store = store

    # -- both sides
    def put(self, key: str, value: Any) -> None:
        self.store.set(key, json.dumps(value, default=str))

    def get(self, key: str, timeout: float) -> Any:
        self.store.wait([key], timedelta(seconds=max(0.001, timeout)))
        return json.loads(self.store.get(key))

    def has(self, key: str) -> bool:
        return bool(self.store.check([key]))

    def counter(self, key: str, add: int = 0) -> int:
        return int(self.store.add(key, add))

    def bye(self) -> None:
        """This rank has read its last word from the store (best effort: the store may be gone)."""
        try:
            self.counter("bye", 1)
        except Exception:
            pass

    def wait_for_byes(self, ranks: int, within: float = BYE_WAIT) -> None:
        """The store's host keeps it up (bounded) until every rank has said bye, so none reads a closed store."""
        deadline = time.monotonic() + within
        try:
            while self.counter("bye") < ranks and time.monotonic() < deadline:
                time.sleep(0.02)
        except Exception:
            pass

    # -- rank side
    def publish(self, step: str, rank: int, payload: dict) -> None:
        self.put(f"{step}/r/{rank}", payload)
        self.counter(f"{step}/n", 1)

    def verdict(self, step: str, timeout: float) -> dict:
        return self.get(f"{step}/verdict", timeout)

    # -- judge side
    def gather(self, step: str, world_size: int, deadline: float,
               give_up: Callable[[list[int]], bool] | None = None) -> Gathered:
        """Wait until every rank published `step`, the deadline passes, or give_up(missing) says so."""
        pause, next_look = POLL_FIRST, time.monotonic() + 0.5
        while self.counter(f"{step}/n") < world_size and time.monotonic() < deadline:
            time.sleep(pause)
            pause = min(pause * 2, POLL_MAX)
            if give_up and time.monotonic() >= next_look:
                next_look = time.monotonic() + 0.5
                if give_up(self.absent(step, world_size)):
                    break
        missing = self.absent(step, world_size) if self.counter(f"{step}/n") < world_size else []
        present = [r for r in range(world_size) if r not in set(missing)]
        keys = [f"{step}/r/{r}" for r in present]
        values = [v for i in range(0, len(keys), MULTI_GET) for v in self.store.multi_get(keys[i:i + MULTI_GET])]
        return Gathered({r: json.loads(v) for r, v in zip(present, values)}, missing)

    def absent(self, step: str, world_size: int) -> list[int]:
        return [r for r in range(world_size) if not self.store.check([f"{step}/r/{r}"])]

    def decide(self, step: str, verdict: dict) -> None:
        self.put(f"{step}/verdict", verdict)
