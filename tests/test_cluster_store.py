"""The store exchange: JSON steps, bounded waits, and why a store cannot be reached or hosted."""

import os
import socket
import threading
import time

import pytest

pytest.importorskip("torch.distributed")

from nccl_doctor.cluster.store import (Exchange, PortInUse, StoreUnreachable, client, connect, prefixed,
                                       probe_endpoint, serve)


@pytest.fixture
def server():
    store = serve(0, timeout=10)
    yield store
    del store


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_gather_returns_results_and_names_the_missing(server):
    judge = Exchange(prefixed(server, "t/"))
    ranks = [Exchange(prefixed(client("127.0.0.1", server.port, 10), "t/")) for _ in range(3)]
    for r in (0, 2):
        ranks[r].publish("step", r, {"rank": r, "text": "é"})
    started = time.monotonic()
    got = judge.gather("step", 3, deadline=time.monotonic() + 0.5)
    assert 0.5 <= time.monotonic() - started < 20  # bounded: wide margins, load can stall a 2-core machine
    assert got.results == {0: {"rank": 0, "text": "é"}, 2: {"rank": 2, "text": "é"}} and got.missing == [1]
    judge.decide("step", {"next": None})
    assert ranks[1].verdict("step", timeout=1) == {"next": None}


def test_gather_stops_as_soon_as_everyone_published(server):
    judge = Exchange(server)

    def late() -> None:
        time.sleep(0.3)
        Exchange(client("127.0.0.1", server.port, 10)).publish("s", 1, {})

    Exchange(server).publish("s", 0, {})
    threading.Thread(target=late).start()
    started = time.monotonic()
    got = judge.gather("s", 2, deadline=time.monotonic() + 120)
    assert got.missing == [] and time.monotonic() - started < 60  # well before the deadline


def test_gather_gives_up_when_told(server):
    got = Exchange(server).gather("s", 2, deadline=time.monotonic() + 30, give_up=lambda missing: missing == [0, 1])
    assert got.missing == [0, 1]


def test_verdict_wait_is_bounded(server):
    started = time.monotonic()
    with pytest.raises(Exception):
        Exchange(server).verdict("never", timeout=0.3)
    assert time.monotonic() - started < 20


def test_refused_is_told_apart_and_the_deadline_holds():
    port = free_port()
    assert probe_endpoint("127.0.0.1", port, 1).startswith("connection refused")
    started = time.monotonic()
    with pytest.raises(StoreUnreachable) as exc:
        connect("127.0.0.1", port, deadline=time.monotonic() + 1.5)
    assert exc.value.reason.startswith("connection refused")
    assert time.monotonic() - started < 20


def test_a_port_that_is_not_a_store():
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        with pytest.raises(StoreUnreachable) as exc:
            connect("127.0.0.1", other.getsockname()[1], deadline=time.monotonic() + 2)
    assert "no c10d store answered" in exc.value.reason


def test_port_in_use_names_the_holder():
    with socket.socket() as holder:
        holder.bind(("0.0.0.0", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(PortInUse) as exc:
            serve(port, timeout=2)
    assert exc.value.port == port
    assert exc.value.holder is None or str(os.getpid()) in exc.value.holder


def test_unresolvable_master_fails_at_once_with_its_cause(monkeypatch):
    """A name that does not resolve will not start resolving: no point waiting for the deadline."""
    from nccl_doctor.cluster.launch import World
    from nccl_doctor.cluster.rank import JoinFailure, open_store

    def no_such_name(*args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", no_such_name)
    world = World(rank=1, world_size=2, local_rank=1, local_world_size=2, master_addr="head-node",
                  master_port=29500, launcher="env")
    started = time.monotonic()
    with pytest.raises(JoinFailure) as exc:
        open_store(world, hosts_store=False, deadline=time.monotonic() + 120)
    assert time.monotonic() - started < 60  # at once, not at the deadline
    finding = exc.value.finding
    assert finding.cause == "master-addr-unresolvable" and finding.ranks == [1]
    assert "name not resolved" in finding.message and "head-node:29500" in finding.message
