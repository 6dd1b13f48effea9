"""Cross-rank rules of `check` on gathered facts (no process groups): rules/consistency.py."""

import copy
import json
from pathlib import Path

import pytest

from nccl_doctor.model import Finding, fold, ranges
from nccl_doctor.rules.consistency import (compare_fingerprints, compare_settings, device_findings,
                                           interface_findings, network_findings)
from nccl_doctor.rules.links import Limits, Link, Node, judge_links

BASE = json.loads((Path(__file__).parent / "fixtures/check/facts_cpu_host.json").read_text())


def ranks_of(hosts: dict[str, int]) -> tuple[dict[int, dict], dict[int, str]]:
    """Facts for `n` ranks per host, all copies of one real host's facts."""
    facts, host_of = {}, {}
    for host, n in hosts.items():
        for _ in range(n):
            rank = len(facts)
            facts[rank] = copy.deepcopy(BASE)
            facts[rank]["host"]["hostname"] = host
            host_of[rank] = host
    return facts, host_of


def test_ranks_text():
    assert ranges([7, 0, 1, 2, 5, 8]) == "0-2,5,7-8"
    assert ranges([]) == ""


def test_identical_ranks_have_no_differences():
    facts, host_of = ranks_of({"a": 2, "b": 2})
    assert compare_fingerprints(facts, host_of) == [] and compare_settings(facts, host_of) == []


def test_nccl_wheel_on_one_host_is_named_by_host():
    facts, host_of = ranks_of({"a": 2, "b": 2, "c": 2})
    for r in (4, 5):
        facts[r]["software"]["nccl_wheels"] = [{"name": "nvidia-nccl-cu12", "version": "2.18.1", "libraries": []}]
    [f] = compare_fingerprints(facts, host_of)
    assert (f.cause, f.severity.value, f.ranks, f.hosts) == ("nccl-version-mismatch", "error", [4, 5], ["c"])
    assert "nvidia-nccl-cu12 2.18.1 on c (ranks 4-5)" in f.message and "none on a, b (ranks 0-3)" in f.message


def test_torch_and_loaded_nccl_versions_compared():
    facts, host_of = ranks_of({"a": 1, "b": 1, "c": 1})
    facts[1]["software"]["torch"]["version"] = "2.5.1+cu124"
    for r in facts:
        facts[r]["software"]["nccl"]["loaded_version"] = "2.21.5"
    facts[2]["software"]["nccl"]["loaded_version"] = "2.26.2"
    causes = {f.cause: f for f in compare_fingerprints(facts, host_of)}
    assert causes["torch-version-mismatch"].hosts == ["b"]
    assert causes["nccl-version-mismatch"].hosts == ["c"]


def test_unobservable_facts_are_not_a_difference():
    facts, host_of = ranks_of({"a": 1, "b": 1})
    facts[1]["gpus"] = {"unavailable": "NVML not found"}
    facts[0]["gpus"] = {"driver_version": "550.54", "count": 0, "devices": []}
    assert compare_fingerprints(facts, host_of) == []


def test_setting_on_one_rank_only():
    facts, host_of = ranks_of({"a": 4})
    facts[1]["environment"]["variables"]["NCCL_PROTO"] = "LL"
    facts[2]["environment"]["variables"]["NCCL_DEBUG"] = "INFO"
    facts[3]["environment"]["variables"]["NCCL_SOCKET_IFNAME"] = "eth1"  # may differ per host
    found = {f.message.split(":")[0]: f for f in compare_settings(facts, host_of)}
    proto = found["ranks disagree on NCCL_PROTO"]
    assert (proto.cause, proto.severity.value, proto.ranks) == ("nccl-setting-differs", "error", [1])
    assert "Unset NCCL_PROTO on a (rank 1)" in proto.fix[0]
    assert found["ranks disagree on NCCL_DEBUG"].severity.value == "info"
    assert len(found) == 2


def test_interface_missing_on_one_host():
    facts, host_of = ranks_of({"a": 1, "b": 1, "c": 1})
    for r in facts:
        facts[r]["environment"]["variables"].update(NCCL_SOCKET_IFNAME="eth0", GLOO_SOCKET_IFNAME="eth0")
    facts[2]["network"]["interfaces"][1]["name"] = "ens9"  # c names its NIC differently
    found = {f.cause: f for f in interface_findings(facts, host_of)}
    assert found["ifname-differs-between-hosts"].hosts == ["c"] and found["ifname-differs-between-hosts"].ranks == [2]
    assert found["gloo-ifname-no-match"].ranks == [2] and "ens9" in found["gloo-ifname-no-match"].message


def test_interface_down_and_interface_nowhere():
    facts, host_of = ranks_of({"a": 1, "b": 1})
    for r in facts:
        facts[r]["environment"]["variables"]["NCCL_SOCKET_IFNAME"] = "eth0"
    facts[1]["network"]["interfaces"][1]["up"] = False
    [down] = interface_findings(facts, host_of)
    assert (down.cause, down.hosts) == ("no-usable-interface", ["b"])
    for r in facts:
        facts[r]["environment"]["variables"]["NCCL_SOCKET_IFNAME"] = "ib"
    assert {f.cause for f in interface_findings(facts, host_of)} == {"socket-ifname-no-match"}


def test_device_binding():
    host_of = {0: "a", 1: "a", 2: "b", 3: "b"}
    bindings = {
        0: {"local_rank": 0, "count": 1, "visible": "0", "device": 0, "uuid": "GPU-1"},
        1: {"local_rank": 1, "count": 1, "visible": "0", "device": None},
        2: {"local_rank": 0, "count": 2, "visible": "<unset>", "device": 0, "uuid": "GPU-7"},
        3: {"local_rank": 1, "count": 2, "visible": "<unset>", "device": 1, "uuid": "GPU-7"},
    }
    found = {f.cause: f for f in device_findings(bindings, host_of)}
    assert found["more-ranks-than-gpus"].ranks == [1] and "CUDA_VISIBLE_DEVICES=0" in found["more-ranks-than-gpus"].message
    assert found["duplicate-gpu"].ranks == [2, 3] and found["duplicate-gpu"].hosts == ["b"]


def _host(listeners, probes):
    return {"listeners": listeners, "probes": probes}


def _listen(iface, address, roles=("gloo",)):
    return {"iface": iface, "address": address, "netmask": "255.255.255.0", "port": 4000, "roles": list(roles)}


def test_host_nobody_reaches_is_the_one_named():
    names = ["h1", "h2", "h3"]
    listeners = {h: [_listen("data0", f"10.0.2.{i}"), _listen("mgmt0", f"10.0.1.{i}", ())]
                 for i, h in enumerate(names, 1)}
    hosts = {}
    for h in names:
        probes = []
        for t in names:
            if t != h:
                for l in listeners[t]:
                    ok = l["iface"] == "mgmt0" or (h != "h3" and t != "h3")
                    probes.append({"to": t, "iface": l["iface"], "address": l["address"], "ok": ok,
                                   "error": None if ok else "timed out"})
        hosts[h] = _host(listeners[h], probes)
    findings, facts = network_findings(hosts, ["gloo"])
    assert [(f.cause, f.hosts) for f in findings] == [("host-unreachable", ["h3"])]
    assert facts["suggestion"]["gloo"] == "`export GLOO_SOCKET_IFNAME=mgmt0`"
    assert "GLOO_SOCKET_IFNAME=mgmt0" in findings[0].fix[0]


def test_renamed_nic_gets_a_per_subnet_suggestion():
    names = ["h1", "h2"]
    listeners = {"h1": [_listen("data0", "10.0.2.1", ("nccl", "gloo"))], "h2": [_listen("ens9", "10.0.2.2", ())]}
    hosts = {h: _host(listeners[h], [{"to": t, "iface": l["iface"], "address": l["address"], "ok": True}
                                     for t in names if t != h for l in listeners[t]]) for h in names}
    findings, facts = network_findings(hosts, ["nccl"])
    assert findings == []
    assert facts["suggestion"]["nccl"] == "`export NCCL_SOCKET_IFNAME=data0,ens9`"
    assert "on h2: `export GLOO_SOCKET_IFNAME=ens9`" in facts["suggestion"]["gloo"]


def bandwidth_findings(links):
    """check's bandwidth sample, a ring of hosts measured at `gbps` both ways, judged by the link rule."""
    hosts = sorted({h for link in links for h in (link["a"], link["b"])})
    nodes = {h: Node(h, i, h) for i, h in enumerate(hosts)}
    return judge_links(nodes, [Link(l["a"], l["b"], l["gbps"] * 1e9 / 8, l["gbps"] * 1e9 / 8, 5.0) for l in links],
                       Limits())


def test_bandwidth_flags_the_slow_host_not_its_neighbours():
    links = [{"a": "h1", "b": "h2", "gbps": 9.0}, {"a": "h2", "b": "h3", "gbps": 1.0},
             {"a": "h3", "b": "h4", "gbps": 1.2}, {"a": "h4", "b": "h1", "gbps": 9.5}]
    [f] = bandwidth_findings(links)
    assert (f.cause, f.hosts) == ("slow-host", ["h3"])
    assert bandwidth_findings(links[:1]) == []  # one link: nothing to compare with


def test_bandwidth_single_slow_link():
    links = [{"a": "h1", "b": "h2", "gbps": 9.0}, {"a": "h2", "b": "h3", "gbps": 9.0},
             {"a": "h3", "b": "h4", "gbps": 1.0}, {"a": "h4", "b": "h5", "gbps": 9.0}, {"a": "h5", "b": "h1", "gbps": 9.0}]
    [f] = bandwidth_findings(links)
    assert (f.cause, f.hosts) == ("slow-link", ["h3", "h4"])


def test_same_finding_on_many_ranks_is_merged():
    def seen(rank):
        return [Finding("debug-logging-off", "info", "NCCL_DEBUG is unset", ranks=[rank], hosts=[f"h{rank // 2}"])]

    [f] = fold([f for r in range(4) for f in seen(r)])
    assert f.ranks == [0, 1, 2, 3] and f.hosts == ["h0", "h1"]


@pytest.mark.parametrize("n", [1, 2, 3, 7])
def test_collective_table_expectations_are_consistent(n):
    """Simulate each collective's semantics from the inputs and compare with the table's `expected`."""
    import torch

    from nccl_doctor.cluster.ops import COLLECTIVES, fill

    count, like = 12 * n, torch.empty(0)
    inputs = [COLLECTIVES[c].buffers(r, n, count, like).send for c in COLLECTIVES for r in range(n)]
    assert all(torch.equal(x, x.round()) for x in inputs)  # small integers: exact in any float type
    total = sum(fill(r, count, like) for r in range(n))
    for r in range(n):
        assert torch.equal(COLLECTIVES["all_reduce"].expected(r, n, count, like), total)
        chunk = count // n
        assert torch.equal(COLLECTIVES["reduce_scatter"].expected(r, n, count, like), total[r * chunk:(r + 1) * chunk])
        gathered = torch.cat([COLLECTIVES["all_gather"].buffers(j, n, count, like).send for j in range(n)])
        assert torch.equal(COLLECTIVES["all_gather"].expected(r, n, count, like), gathered)
        sends = [COLLECTIVES["all_to_all"].buffers(j, n, count, like).send for j in range(n)]
        a2a = torch.cat([s[r * chunk:(r + 1) * chunk] for s in sends])
        assert torch.equal(COLLECTIVES["all_to_all"].expected(r, n, count, like), a2a)


def test_collective_check_reports_wrong_elements_and_bus_factors():
    import torch

    from nccl_doctor.cluster.ops import COLLECTIVES

    entry = COLLECTIVES["all_reduce"]
    bufs = entry.buffers(0, 4, 16, torch.empty(0))
    bufs.recv.copy_(entry.expected(0, 4, 16, bufs.recv))
    assert entry.check(bufs, 0, 4, 16) == []
    bufs.recv[5] += 1
    [line] = entry.check(bufs, 0, 4, 16)
    assert line.startswith("1 of 16 elements wrong: [5]")
    assert entry.bus_factor(8) == 2 * 7 / 8 and COLLECTIVES["broadcast"].bus_factor(8) == 1.0
    assert COLLECTIVES["reduce"].expected(1, 4, 16, bufs.recv) is None  # only the root's output is defined
