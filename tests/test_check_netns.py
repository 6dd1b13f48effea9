"""`check` across hosts: network namespaces joined by bridges act as three hosts, each runs torchrun.

Each host has a management network (the store, MASTER_ADDR) and a data network (NCCL/GLOO_SOCKET_IFNAME),
as clusters do; faults are made on the data network of h3, and h3 must be the host named.
"""

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from netns import NetnsLab, unavailable

pytestmark = [pytest.mark.netns, pytest.mark.slow]
REASON = unavailable()
HOSTS = ["h1", "h2", "h3"]
NETWORKS = {"mgmt": "10.213.1", "data": "10.213.2"}  # private test ranges, inside the lab's namespaces only
TIMEOUT = 10


@pytest.fixture
def lab():
    if REASON:
        pytest.skip(REASON)
    with NetnsLab(HOSTS, NETWORKS) as built:
        yield built


def check_across(lab: NetnsLab, *, port: int = 29400, per_node: int = 1, c10d: bool = False,
                 quick: bool = True, fault: str | None = None) -> tuple[dict, list[int], float]:
    """torchrun on every host (`per_node` ranks each; static rendezvous on rank 0's host, or c10d's on h1's
    endpoint); returns rank 0's JSON report and every exit code."""
    env = {**os.environ, "NCCL_SOCKET_IFNAME": "data0", "GLOO_SOCKET_IFNAME": "data0"}
    env.pop("NCCL_DOCTOR_FAULT", None)
    if fault:
        env["NCCL_DOCTOR_FAULT"] = fault
    endpoint = f"{lab.address('h1', 'mgmt')}:{port}"
    rendezvous = (["--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", "netns"] if c10d else
                  ["--node-rank", "{i}", "--master-addr", lab.address("h1", "mgmt"), "--master-port", str(port)])
    check = ["-m", "nccl_doctor", "check", "--json", "--timeout", str(TIMEOUT), *(["--quick"] if quick else [])]
    started = time.monotonic()
    procs = [lab.spawn(host, [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(len(HOSTS)),
                              "--nproc-per-node", str(per_node), *(a.format(i=i) for a in rendezvous), *check],
                       env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i, host in enumerate(HOSTS)]
    outputs = [procs[0].communicate(timeout=200)] + [_finish(p, wait=200 if not fault else 30) for p in procs[1:]]
    took = time.monotonic() - started
    report = next(json.loads(out) for out, _ in outputs if out.strip())  # rank 0's, wherever c10d put it
    return report, [p.returncode for p in procs], took


def _finish(proc: subprocess.Popen, wait: float) -> tuple[str, str]:
    """Its output; a host whose rank a fault froze never ends by itself (nothing runs in a stopped process)."""
    try:
        return proc.communicate(timeout=wait)
    except subprocess.TimeoutExpired:
        for child in psutil.Process(proc.pid).children(recursive=True):  # torchrun's workers have sessions of their own
            child.kill()
        os.killpg(proc.pid, signal.SIGKILL)
        return proc.communicate(timeout=30)


def stages(report: dict) -> dict[str, str]:
    return {s["name"]: s["status"] for s in report["facts"]["stages"]}


def test_healthy_hosts_pass(lab):
    report, codes, _ = check_across(lab)
    assert report["verdict"] != "error", report["findings"]
    assert codes == [0, 0, 0]
    assert report["facts"]["world"]["hosts"] == {"h1": [0], "h2": [1], "h3": [2]}
    assert stages(report)["network"] == "passed" and stages(report)["collectives"] == "passed"
    assert all(p["ok"] for p in report["facts"]["network"]["matrix"])


def test_host_whose_interface_name_differs_is_named(lab):
    lab.rename("h3", "data0", "ens9")
    report, codes, _ = check_across(lab)
    by_cause = {f["cause"]: f for f in report["findings"]}
    assert by_cause["ifname-differs-between-hosts"]["hosts"] == ["h3"]
    assert by_cause["gloo-ifname-no-match"]["hosts"] == ["h3"]
    assert "NCCL_SOCKET_IFNAME=data0,ens9" in by_cause["ifname-differs-between-hosts"]["fix"][0]
    assert stages(report)["fingerprints"] == "failed" and stages(report)["backend"] == "skipped"
    assert codes[0] == 1


def test_host_whose_link_is_down_is_named(lab):
    lab.set_down("h3", "data0")
    report, codes, _ = check_across(lab)
    errors = [f for f in report["findings"] if f["severity"] == "error"]
    assert errors and all(f["hosts"] == ["h3"] for f in errors), errors
    assert {"no-usable-interface", "host-unreachable"} <= {f["cause"] for f in errors}
    assert stages(report)["network"] == "failed"
    assert codes[0] == 1


def test_unreachable_master_address_is_reported_by_the_rank_that_cannot_reach_it(lab):
    """No host has 10.213.1.99: the rank says so itself (there is no store, hence no judge) within its deadline."""
    env = {**os.environ, "RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "10.213.1.99", "MASTER_PORT": "29400"}
    started = time.monotonic()
    proc = lab.spawn("h2", [sys.executable, "-m", "nccl_doctor", "check", "--json", "--timeout", "4"], env,
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, _ = proc.communicate(timeout=60)
    report = json.loads(out)
    [finding] = report["findings"]
    assert (finding["cause"], finding["ranks"], finding["hosts"]) == ("master-unreachable", [1], ["h2"])
    assert "no route to host" in finding["message"] or "timed out" in finding["message"]
    assert proc.returncode == 1 and time.monotonic() - started < 4 + 20


def test_renamed_nic_on_a_host_of_two_ranks_is_one_finding(lab):
    lab.rename("h3", "data0", "ens9")
    report, _, _ = check_across(lab, per_node=2)
    named = [f for f in report["findings"] if f["cause"] == "ifname-differs-between-hosts"]
    assert len(named) == 1 and named[0]["hosts"] == ["h3"] and named[0]["ranks"] == [4, 5], named
    assert len([f for f in report["findings"] if f["cause"] == "gloo-ifname-no-match"]) == 1


def test_slow_host_among_three_under_torchrun_c10d_is_named(lab):
    """The case that once passed unnamed: c10d rendezvous, 2 ranks per host, one host's link at 30 Mbit/s."""
    lab.slow_host("h3", "30mbit")
    report, _, _ = check_across(lab, per_node=2, c10d=True, quick=False)
    slow = [f for f in report["findings"] if f["cause"] in ("slow-host", "slow-link", "asymmetric-link",
                                                             "below-line-rate")]
    assert [(f["cause"], f["hosts"]) for f in slow] == [("slow-host", ["h3"])], report["facts"]["bandwidth"]
    assert report["facts"]["world"]["launcher"] == "torchrun"


def test_frozen_rank_on_another_host_is_told_from_a_dead_one(lab):
    """Rank 5 on h3 stops itself (SIGSTOP) before all_reduce; the judge runs on h1 and cannot see it, so rank 4,
    on h3 too, reads its state for the judge."""
    report, _, _ = check_across(lab, per_node=2, fault="freeze:rank=5:stage=collectives:op=all_reduce")
    first = report["findings"][0]
    assert (first["cause"], first["ranks"], first["hosts"]) == ("rank-frozen", [5], ["h3"]), first
    assert "stopped" in first["message"]
