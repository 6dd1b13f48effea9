"""Fingerprint exchange over the c10d TCPStore with N simulated ranks: is rank 0's work linear in N?

Each simulated rank is a thread with its own TCPStore connection that publishes this host's real
probe facts (as `check` does in its fingerprint stage); the judge gathers them (counter polling plus
one multi_get) and runs the cross-rank comparison. Prints the time of each part for every N.

    .venv/bin/python bench/store_scaling.py [N ...]     (default: 16 64 256)

The connect column is not ours to speed up: c10d looks up every peer's address in DNS (client and
server side), so on a host whose resolver drops queries some connections wait for its 5 s timeout.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor

warnings.filterwarnings("ignore", message=".*NumPy.*")
os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")

from nccl_doctor.cluster.store import Exchange, client, prefixed, serve  # noqa: E402
from nccl_doctor.probe import collect  # noqa: E402
from nccl_doctor.rules.consistency import compare_fingerprints, compare_settings, interface_findings  # noqa: E402


def exchange(n: int, facts: dict) -> dict[str, float]:
    server = serve(0, timeout=60)
    judge = Exchange(prefixed(server, f"bench{n}/"))
    connect_start = time.perf_counter()
    with ThreadPoolExecutor(32) as pool:  # c10d resolves every peer's name: one slow DNS answer stalls a connect
        ranks = list(pool.map(lambda _: Exchange(prefixed(client("127.0.0.1", server.port, 60), f"bench{n}/")),
                              range(n)))
    connected = time.perf_counter() - connect_start
    go = threading.Barrier(n + 1)

    def rank(r: int) -> None:
        mine = json.loads(json.dumps(facts))
        mine["host"]["hostname"] = f"node{r // 8:03d}"
        go.wait()
        ranks[r].publish("fingerprints", r, {"facts": mine, "lint": []})

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    go.wait()
    started = time.perf_counter()
    got = judge.gather("fingerprints", n, deadline=time.monotonic() + 60)
    gathered = time.perf_counter() - started
    for t in threads:
        t.join()
    assert not got.missing and len(got.results) == n
    host_of = {r: f"node{r // 8:03d}" for r in range(n)}
    facts_by_rank = {r: p["facts"] for r, p in got.results.items()}
    started = time.perf_counter()
    findings = (compare_fingerprints(facts_by_rank, host_of) + compare_settings(facts_by_rank, host_of)
                + interface_findings(facts_by_rank, host_of))
    compared = time.perf_counter() - started
    assert findings == []
    size = len(json.dumps({"facts": facts, "lint": []}))
    return {"connect": connected, "gather": gathered, "compare": compared, "bytes": size * n}


def main(sizes: list[int]) -> None:
    facts = collect()
    print(f"fingerprint of this host: {len(json.dumps(facts))} bytes of JSON")
    print(f"{'ranks':>6} {'connect s':>10} {'publish+gather s':>17} {'compare s':>10} {'MB moved':>9} "
          f"{'gather ms/rank':>15}")
    for n in sizes:
        runs = [exchange(n, facts) for _ in range(3)]
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        print(f"{n:>6} {med['connect']:>10.3f} {med['gather']:>17.3f} {med['compare']:>10.3f} "
              f"{med['bytes'] / 1e6:>9.2f} {1000 * med['gather'] / n:>15.3f}")


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [16, 64, 256])
