"""`check`'s bandwidth sample across 2, 3 and 5 hosts (network namespaces on one bridge): healthy, one slow
host, one slow link. The host, link or direction at fault must be the one named, and nothing when healthy.

Each host runs its ranks with plain RANK/WORLD_SIZE/MASTER_* variables (the 3-host lab runs 2 ranks per
host, as in the case that once went unnamed: 0.1, 0.1 and 11 Gbit/s passed). A slow host is a token
bucket on what it sends (`tc ... tbf`, 30 Mbit/s); a slow link, one on what two neighbours in check's
ring send each other, and on nothing else.
"""

import json
import os
import subprocess
import sys

import pytest

from netns import NetnsLab, unavailable

pytestmark = [pytest.mark.netns, pytest.mark.slow]
REASON = unavailable()
NETWORKS = {"mgmt": "10.215.1", "data": "10.215.2"}  # private test ranges, inside the lab's namespaces only
LINK_CAUSES = {"slow-host", "slow-link", "asymmetric-link", "below-line-rate"}
RATE = "30mbit"
PER_HOST = {2: 1, 3: 2, 5: 1}
PORTS = iter(range(29511, 29600))


@pytest.fixture(scope="module", params=[2, 3, 5])
def lab(request):
    if REASON:
        pytest.skip(REASON)
    if subprocess.run(["tc", "-V"], capture_output=True).returncode != 0:
        pytest.skip("`tc` (iproute2) is not installed")
    with NetnsLab([f"h{i}" for i in range(1, request.param + 1)], NETWORKS) as built:
        yield built


def check_across(lab: NetnsLab) -> dict:
    """`nccl-doctor check` on every host; rank 0's JSON report."""
    per_host, port = PER_HOST[len(lab.hosts)], next(PORTS)
    world = per_host * len(lab.hosts)
    base = {**os.environ, "GLOO_SOCKET_IFNAME": "data0", "NCCL_SOCKET_IFNAME": "data0",
            "MASTER_ADDR": lab.address("h1", "mgmt"), "MASTER_PORT": str(port), "WORLD_SIZE": str(world),
            "LOCAL_WORLD_SIZE": str(per_host)}
    base.pop("NCCL_DOCTOR_FAULT", None)
    argv = [sys.executable, "-m", "nccl_doctor", "check", "--json", "--timeout", "20"]
    procs = [lab.spawn(host, argv, {**base, "RANK": str(h * per_host + l), "LOCAL_RANK": str(l)},
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for h, host in enumerate(lab.hosts) for l in range(per_host)]
    outputs = [p.communicate(timeout=300) for p in procs]
    assert outputs[0][0].strip(), outputs[0][1][-3000:]
    report = json.loads(outputs[0][0])
    assert {s["name"]: s["status"] for s in report["facts"]["stages"]}["bandwidth"] != "skipped", report
    return report


def link_findings(report: dict) -> list[dict]:
    return [f for f in report["findings"] if f["cause"] in LINK_CAUSES]


def test_healthy_hosts_name_nobody(lab):
    report = check_across(lab)
    assert link_findings(report) == [], json.dumps(report["facts"]["bandwidth"], indent=1)
    assert len(report["facts"]["bandwidth"]["links"]) == (1 if len(lab.hosts) == 2 else len(lab.hosts))


def test_slow_host_is_named(lab):
    last = lab.hosts[-1]
    lab.slow_host(last, RATE)
    try:
        report = check_across(lab)
    finally:
        lab.unshape(last)
    found = link_findings(report)
    assert len(found) == 1, json.dumps([found, report["facts"]["bandwidth"]], indent=1)
    [f] = found
    assert f["severity"] == "error" and last in f["hosts"]
    if len(lab.hosts) == 2:  # two hosts: the direction is all that can be told
        assert (f["cause"], f["hosts"]) == ("slow-link", ["h1", "h2"])
        assert f"slow from {last} to h1" in f["message"] and f"{last}'s transmit side" in f["message"]
    else:
        assert (f["cause"], f["hosts"]) == ("slow-host", [last])
        assert "transmit side" in f["message"]  # tbf shapes what the host sends, not what it receives
        assert sorted(f["ranks"]) == [(len(lab.hosts) - 1) * PER_HOST[len(lab.hosts)]]  # the host's measuring rank


def test_slow_link_is_named(lab):
    lab.slow_link("h1", "h2", "data", RATE)
    try:
        report = check_across(lab)
    finally:
        lab.unshape("h1")
        lab.unshape("h2")
    found = link_findings(report)
    assert len(found) == 1, json.dumps([found, report["facts"]["bandwidth"]], indent=1)
    [f] = found
    assert f["hosts"] == ["h1", "h2"]
    if len(lab.hosts) == 2:  # the only link, slow both ways: below its line rate, host or link untold
        assert f["cause"] == "below-line-rate" and "two hosts" in f["message"]
    else:
        assert (f["cause"], f["severity"]) == ("slow-link", "error") and "h1 <-> h2" in f["message"]
