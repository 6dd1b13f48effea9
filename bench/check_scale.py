"""`check` at 1,024 and 8,192 ranks, on paper: simulated fingerprints, not processes.

Every simulated rank publishes this host's real probe facts and lint findings over a real c10d TCPStore
(as the fingerprint stage's ranks do; a few connections carry them all, as the judge sees the same keys
either way), with one bad host among them: another NCCL wheel, a NCCL setting of its own and a
GLOO_SOCKET_IFNAME it lacks. Then rank 0's side runs for real, part by part (gather, compare, fold) and
as the fingerprint stage's judge runs it, and the report is rendered as the terminal would show it.
Prints the time of each part and the report's height in lines for every N; the report must fit one
screen (50 lines). Each simulated rank also publishes this host's lint findings, to be folded.

    python bench/check_scale.py [N ...]     (default: 1024 8192)
"""

from __future__ import annotations

import copy
import io
import json
import os
import sys
import time
import warnings
from concurrent.futures import ThreadPoolExecutor

warnings.filterwarnings("ignore", message=".*NumPy.*")
os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")

from nccl_doctor.cluster.judge import Judge, JudgeContext  # noqa: E402
from nccl_doctor.cluster.options import Options  # noqa: E402
from nccl_doctor.cluster.stages import fingerprints  # noqa: E402
from nccl_doctor.cluster.store import Exchange, client, prefixed, serve  # noqa: E402
from nccl_doctor.cluster.watchdog import Liveness  # noqa: E402
from nccl_doctor.model import Finding, fold  # noqa: E402
from nccl_doctor.probe import collect  # noqa: E402
from nccl_doctor.render.text import render_text  # noqa: E402
from nccl_doctor.rules.consistency import compare_fingerprints, compare_settings, interface_findings  # noqa: E402
from nccl_doctor.rules.lint import lint  # noqa: E402

PER_HOST = 8
BAD_HOST = 37
SCREEN = 50
PUBLISHERS = 16


def fingerprint_of(rank: int, facts: dict, lint_wire: list, bad: dict) -> dict:
    """This host's facts as rank `rank` would publish them: its own host name, and the bad host's faults."""
    mine = copy.deepcopy(facts)
    host = rank // PER_HOST
    mine["host"]["hostname"] = f"node{host:04d}"
    if host == BAD_HOST:
        mine["software"]["nccl_wheels"] = [{"name": "nvidia-nccl-cu12", "version": "2.18.1", "libraries": []}]
        mine["environment"]["variables"].update(bad)
    return {"facts": mine, "lint": lint_wire, "torch": {"cuda": False, "gpus": 0, "nccl": True, "gloo": True}}


def publish(store_port: int, prefix: str, n: int, facts: dict, lint_wire: list) -> None:
    bad = {"NCCL_PROTO": "LL", "GLOO_SOCKET_IFNAME": "eth9"}

    def publisher(k: int) -> None:
        exchange = Exchange(prefixed(client("127.0.0.1", store_port, 120), prefix))
        for rank in range(k, n, PUBLISHERS):
            exchange.publish("fingerprints", rank, fingerprint_of(rank, facts, lint_wire, bad))

    with ThreadPoolExecutor(PUBLISHERS) as pool:
        list(pool.map(publisher, range(PUBLISHERS)))


class Clock:
    """Wall and CPU seconds of one part (CPU: this process, the store's server thread included; on a loaded
    machine wall time is mostly other jobs' turns)."""

    def __init__(self) -> None:
        self.parts: dict[str, tuple[float, float]] = {}

    def time(self, name: str, fn):
        wall, cpu = time.perf_counter(), time.process_time()
        result = fn()
        self.parts[name] = (time.perf_counter() - wall, time.process_time() - cpu)
        return result


def run(n: int, facts: dict, lint_wire: list) -> dict:
    server = serve(0, timeout=120)
    prefix = f"scale{n}/"
    clock = Clock()
    clock.time("publish", lambda: publish(server.port, prefix, n, facts, lint_wire))
    exchange = Exchange(prefixed(server, prefix))
    ctx = JudgeContext(exchange, n, Options(timeout=120), "simulated", Liveness(exchange))
    ctx.identities = {r: {"host": f"node{r // PER_HOST:04d}", "pid": 1000 + r, "local_rank": r % PER_HOST}
                      for r in range(n)}
    got = clock.time("gather", lambda: exchange.gather("fingerprints", n, time.monotonic() + 120))
    assert not got.missing
    payload = sum(len(json.dumps(p)) for p in got.results.values())
    facts_by_rank = {r: p["facts"] for r, p in got.results.items()}
    host_of = {r: i["host"] for r, i in ctx.identities.items()}
    compared = clock.time("compare", lambda: compare_fingerprints(facts_by_rank, host_of)
                          + compare_settings(facts_by_rank, host_of) + interface_findings(facts_by_rank, host_of))
    lint_found = [Finding.from_wire(w, r, host_of[r]) for r, p in got.results.items() for w in p["lint"]]
    clock.time("fold", lambda: fold(compared + lint_found))
    outcome = clock.time("stage", lambda: fingerprints.on_judge(ctx))  # all of it: gather, compare, fold
    judge = Judge(ctx, [fingerprints.STAGE])
    judge.outcomes["fingerprints"] = outcome
    out = io.StringIO()
    clock.time("render", lambda: render_text(judge.report(), out))
    return {"parts": clock.parts, "mb": payload / 1e6, "lines": len(out.getvalue().splitlines()),
            "findings": len(judge.report().findings), "text": out.getvalue()}


def main(sizes: list[int]) -> None:
    facts = collect()
    lint_wire = [f.to_wire() for f in lint(os.environ, facts) if f.category != "rendezvous_network"]
    print(f"fingerprint of this host: {len(json.dumps(facts))} bytes of JSON, {len(lint_wire)} lint findings;"
          f" {PER_HOST} ranks per host, host node{BAD_HOST:04d} bad")
    parts = ("publish", "gather", "compare", "fold", "stage", "render")
    print("seconds, wall/CPU; stage = the fingerprint stage's judge from gather to folded findings")
    print(f"{'ranks':>6} {'MB':>5} " + " ".join(f"{p:>11}" for p in parts) + f" {'findings':>8} {'lines':>6}")
    last = {}
    for n in sizes:
        last = run(n, facts, lint_wire)
        print(f"{n:>6} {last['mb']:>5.1f} " + " ".join(f"{w:>5.2f}/{c:<5.2f}" for w, c in (last["parts"][p] for p in parts))
              + f" {last['findings']:>8} {last['lines']:>6}"
              + ("" if last["lines"] <= SCREEN else f"  (more than one screen: {SCREEN} lines)"))
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"\nthe report at {sizes[-1]} ranks, as the terminal shows it:\n")
    print(last["text"])


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [1024, 8192])
