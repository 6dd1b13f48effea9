"""`bench --matrix` across hosts: four network namespaces joined by bridges, one rank each.

Each host has a management network (the store) and a data network (GLOO_SOCKET_IFNAME), as clusters
do. A healthy run must name no slow host or link; with h3's data interface shaped to 20 Mbit/s by a
token bucket (`tc qdisc ... tbf`, egress only), the link matrix must name h3, and only h3, as slow.
"""

import json
import os
import subprocess
import sys
import time

import pytest

from netns import NetnsLab, unavailable

pytestmark = [pytest.mark.netns, pytest.mark.slow]
REASON = unavailable()
HOSTS = ["h1", "h2", "h3", "h4"]
NETWORKS = {"mgmt": "10.214.1", "data": "10.214.2"}  # private test ranges, inside the lab's namespaces only
LINK_CAUSES = {"slow-host", "slow-link", "asymmetric-link", "below-line-rate"}


@pytest.fixture(scope="module")
def lab():
    if REASON:
        pytest.skip(REASON)
    if subprocess.run(["tc", "-V"], capture_output=True).returncode != 0:
        pytest.skip("`tc` (iproute2) is not installed")
    with NetnsLab(HOSTS, NETWORKS) as built:
        yield built


def matrix_across(lab: NetnsLab, port: int) -> tuple[dict, list[int], float]:
    """`nccl-doctor bench --matrix` on every host, launched with plain RANK/WORLD_SIZE/MASTER_* variables."""
    base = {**os.environ, "GLOO_SOCKET_IFNAME": "data0", "MASTER_ADDR": lab.address("h1", "mgmt"),
            "MASTER_PORT": str(port), "WORLD_SIZE": str(len(HOSTS)), "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}
    base.pop("NCCL_DOCTOR_FAULT", None)
    argv = [sys.executable, "-m", "nccl_doctor", "bench", "--matrix", "--matrix-bytes", "1M", "--matrix-time", "0.3",
            "--backend", "gloo", "--timeout", "20", "--json"]
    started = time.monotonic()
    procs = [lab.spawn(host, argv, {**base, "RANK": str(i)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True) for i, host in enumerate(HOSTS)]
    outputs = [p.communicate(timeout=150) for p in procs]
    took = time.monotonic() - started
    assert outputs[0][0].strip(), outputs[0][1][-2000:]
    return json.loads(outputs[0][0]), [p.returncode for p in procs], took


def link_findings(report: dict) -> list[dict]:
    return [f for f in report["findings"] if f["cause"] in LINK_CAUSES]


def test_healthy_matrix_names_nobody_and_slow_host_is_named(lab):
    report, codes, took = matrix_across(lab, 29431)
    matrix = report["facts"]["matrix"]
    assert link_findings(report) == [], json.dumps(matrix, indent=1)
    assert codes == [0, 0, 0, 0] and took < 100
    assert matrix["rounds"] == 3 and len(matrix["links"]) == 6  # N-1 rounds of disjoint pairs, every pair once
    assert {n["label"] for n in matrix["nodes"]} == set(HOSTS)
    assert all(n["line_gbps"] == 10 and n["via"].startswith("data0") for n in matrix["nodes"])  # veth: 10000 Mb/s

    subprocess.run(["tc", "-n", lab.namespaces["h3"], "qdisc", "add", "dev", "data0", "root", "tbf", "rate", "20mbit",
                    "burst", "32kbit", "latency", "400ms"], check=True, capture_output=True, timeout=10)
    report, codes, took = matrix_across(lab, 29432)
    [slow] = link_findings(report)
    assert (slow["cause"], slow["hosts"], slow["severity"]) == ("slow-host", ["h3"], "error"), slow
    assert "transmit side" in slow["message"]  # tbf shapes what h3 sends, not what it receives
    assert len(slow["evidence"]) == 3 and codes[0] == 1 and took < 100
    shaped = [l for l in report["facts"]["matrix"]["links"] if "h3" in (l["a"], l["b"])]
    assert all(min(l["ab_Bps"], l["ba_Bps"]) < 4e6 for l in shaped)  # 20 Mbit/s is 2.5 MB/s
