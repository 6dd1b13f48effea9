"""One or more tests per lint rule, on fixture facts (an 8-GPU H100 host with IB) and hand-written settings."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from nccl_doctor.model import Evidence, Severity
from nccl_doctor.probe.environment import SourcedEnv
from nccl_doctor.probe.topology import parse_smi_topo
from nccl_doctor.rules.lint import RULES, lint, rules_markdown
from nccl_doctor.rules.hardware import judge
from test_topo_fakes import SMI

FIXTURES = Path(__file__).parent / "fixtures" / "env"
BASE = json.loads((FIXTURES / "facts_8gpu_ib.json").read_text())
MULTI_NODE = {"WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8", "RANK": "9", "LOCAL_RANK": "1",
              "MASTER_ADDR": "10.1.0.10", "MASTER_PORT": "29500", "NCCL_DEBUG": "WARN"}


def facts(**changes) -> dict:
    """The fixture facts with dotted-path replacements, e.g. facts(**{"limits.shm.free_bytes": 1})."""
    data = copy.deepcopy(BASE)
    for path, value in changes.items():
        *parents, last = path.split(".")
        node = data
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value
    return data


def found(env: dict, fx: dict | None = None, cause: str | None = None) -> list:
    env = {"NCCL_DEBUG": "WARN", **env}
    findings = lint(env, BASE if fx is None else fx)
    return [f for f in findings if cause is None or f.cause == cause]


def one(env: dict, cause: str, fx: dict | None = None):
    hits = found(env, fx, cause)
    assert len(hits) == 1, [(f.cause, f.message) for f in found(env, fx)]
    return hits[0]


def none(env: dict, cause: str, fx: dict | None = None) -> None:
    hits = found(env, fx, cause)
    assert not hits, [(f.cause, f.message) for f in hits]


# ------------------------------------------------------------------ names


def test_unknown_nccl_variable_with_did_you_mean():
    f = one({"NCCL_DEBG": "INFO"}, "env-unknown-variable")
    assert "did you mean NCCL_DEBUG" in f.message and f.severity == Severity.WARNING
    assert "export NCCL_DEBUG=INFO" in f.fix[0]
    f = one({"NCCL_SOCKET_IFNAM": "eth0"}, "env-unknown-variable")
    assert "NCCL_SOCKET_IFNAME" in f.message


def test_unknown_without_suggestion_and_torch_names():
    f = one({"NCCL_FROBNICATE_EVERYTHING": "1"}, "env-unknown-variable")
    assert "did you mean" not in f.message
    assert "TORCH_NCCL_BLOCKING_WAIT" in one({"TORCH_NCCL_BLOKING_WAIT": "1"}, "env-unknown-variable").message
    assert "TORCH_DISTRIBUTED_DEBUG" in one({"TORCH_DISTRIBUTED_DEBG": "INFO"}, "env-unknown-variable").message
    assert "did you mean MASTER_ADDR" in one({"MASTER_ADDRESS": "10.0.0.1"}, "env-unknown-variable").message
    assert "GLOO_SOCKET_IFNAME" in one({"GLOO_SOCKET_IFNAM": "eth0"}, "env-unknown-variable").message
    for harmless in ("TORCH_HOME", "TORCH_COMPILE_THREADS_MAX", "TORCHINDUCTOR_CACHE_DIR", "GLOO_FOO", "MASTER_KEY_X",
                     "TORCH_LOGS_FORMAT"):
        none({harmless: "1"}, "env-unknown-variable")


def test_not_read_variables_have_no_effect():
    f = one({"NCCL_IB_MTU": "4096"}, "env-removed-variable")
    assert "has no effect" in f.message and "MTU" in f.message
    f = one({"NCCL_MAX_RINGS": "8"}, "env-removed-variable")
    assert "export NCCL_MAX_CTAS=8" in f.fix[0]
    assert one({"NCCL_SOCKET_TIMEOUT": "60"}, "env-removed-variable").fix[0].startswith("Use NCCL_SOCKET_RETRY_CNT instead (")


def test_removed_variables_depend_on_the_loaded_nccl():
    f = one({"NCCL_IB_GDR_LEVEL": "PHB"}, "env-removed-variable")
    assert "2.4.2" in f.message and "export NCCL_NET_GDR_LEVEL=PHB" in f.fix[0]
    none({"NCCL_CREATE_THREAD_CONTEXT": "1"}, "env-removed-variable")  # 2.21.5 still reads it
    unknown_version = facts(**{"software.nccl.loaded_version": None, "software.torch.nccl_built_with": None})
    assert "2.30.7" in one({"NCCL_CREATE_THREAD_CONTEXT": "1"}, "env-removed-variable", unknown_version).message


def test_deprecated_variables_and_replacement_chain():
    f = one({"NCCL_MAX_NCHANNELS": "4"}, "env-deprecated-variable")
    assert "NCCL_MAX_CTAS" in f.message and "export NCCL_MAX_CTAS=4" in f.fix[0]
    old = facts(**{"software.nccl.loaded_version": "2.15.5"})
    none({"NCCL_MAX_NCHANNELS": "4"}, "env-deprecated-variable", old)  # not deprecated yet in 2.15
    f = one({"NCCL_MIN_NRINGS": "4"}, "env-deprecated-variable", old)
    assert "NCCL_MIN_NCHANNELS" in f.message  # NCCL_MIN_CTAS does not exist in 2.15
    f = one({"NCCL_MAX_CTAS": "4"}, "env-removed-variable", old)
    assert "added in NCCL 2.17" in f.message and "NCCL_MAX_NCHANNELS" in f.fix[0]


def test_plugin_variable():
    f = one({"NCCL_IBEXT_DISABLE": "1"}, "env-plugin-variable")
    assert "nccl-rdma-sharp-plugins" in f.message and "NCCL_IB_DISABLE" in f.message


def test_torch_legacy_alias():
    f = one({"NCCL_ASYNC_ERROR_HANDLING": "1"}, "env-deprecated-variable")
    assert "export TORCH_NCCL_ASYNC_ERROR_HANDLING=1" in f.fix[0]
    f = one({"NCCL_BLOCKING_WAIT": "1", "TORCH_NCCL_BLOCKING_WAIT": "0"}, "env-deprecated-variable")
    assert "PyTorch uses TORCH_NCCL_BLOCKING_WAIT=0" in f.message


# ------------------------------------------------------------------ values


@pytest.mark.parametrize("env, fragment, severity", [
    ({"NCCL_IB_RETRY_CNT": "10"}, "outside the valid range 0..7", Severity.ERROR),
    ({"NCCL_P2P_LEVEL": "node"}, "PHB", Severity.ERROR),
    ({"NCCL_P2P_LEVEL": "nvl"}, "case-sensitively", Severity.ERROR),
    ({"NCCL_NET_GDR_LEVEL": "phb"}, "case-sensitively", Severity.ERROR),
    ({"NCCL_IB_DISABLE": "true"}, "finds no number and uses 0 (off)", Severity.ERROR),
    ({"NCCL_BUFFSIZE": "4M"}, "stops at 'M' and uses 4", Severity.ERROR),
    ({"NCCL_BUFFSIZE": "010"}, "octal", Severity.WARNING),
    ({"NCCL_BUFFSIZE": "99999999999999999999999"}, "64 bits", Severity.ERROR),
    ({"NCCL_CROSS_NIC": "3"}, "not one of 0, 1, 2", Severity.WARNING),
    ({"NCCL_DEBUG": "verbose"}, "not one of VERSION", Severity.ERROR),
    ({"NCCL_SOCKET_FAMILY": "ipv4"}, "not one of AF_INET", Severity.ERROR),
    ({"NCCL_SOCKET_FAMILY": "af_inet"}, "case-sensitively", Severity.ERROR),
    ({"NCCL_DEBUG_SUBSYS": "INIT,NETWORK"}, "'NETWORK' not known", Severity.WARNING),
    ({"NCCL_PROTO": "Simpel"}, "unknown protocol 'Simpel', which NCCL 2.21.5 silently ignores", Severity.WARNING),
    ({"TORCH_NCCL_BLOCKING_WAIT": "maybe"}, "raises", Severity.ERROR),
    ({"TORCH_NCCL_ASYNC_ERROR_HANDLING": "abc"}, "std::stoi", Severity.ERROR),
    ({"TORCH_NCCL_ASYNC_ERROR_HANDLING": "5"}, "not one of 0, 1, 2, 3", Severity.WARNING),
    ({"TORCH_DISTRIBUTED_DEBUG": "verbose"}, "not one of OFF, INFO, DETAIL", Severity.ERROR),
    ({"RANK": "abc"}, "not an integer", Severity.ERROR),
    ({"NCCL_SOCKET_IFNAME": '"ens1f0"'}, "quotes are part of the value", Severity.ERROR),
    ({"NCCL_IB_HCA": "mlx5_0, mlx5_1"}, "spaces", Severity.ERROR),
])
def test_invalid_values(env, fragment, severity):
    f = one(env, "env-invalid-value")
    assert fragment in f.message and f.severity == severity
    assert f.fix and f.evidence[0].text.startswith(next(iter(env)))


@pytest.mark.parametrize("env", [
    {"NCCL_IB_RETRY_CNT": "7"}, {"NCCL_P2P_LEVEL": "NVL"}, {"NCCL_P2P_LEVEL": "2"}, {"NCCL_BUFFSIZE": "0x400000"},
    {"NCCL_IB_DISABLE": "0"}, {"NCCL_DEBUG": "info"}, {"NCCL_SOCKET_FAMILY": "AF_INET"},
    {"NCCL_PROTO": "ll,ll128,simple"}, {"NCCL_PROTO": "^LL128"}, {"NCCL_DEBUG_SUBSYS": "^init,coll"},
    {"TORCH_NCCL_BLOCKING_WAIT": "TRUE"}, {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "3"}, {"RANK": "3"},
    {"NCCL_ALGO": "Ring,Tree"},
])
def test_valid_values_pass(env):
    none(env, "env-invalid-value")
    none(env, "algo-proto-override") if "NCCL_ALGO" not in env else None


def test_algo_per_function_syntax_depends_on_version():
    value = {"NCCL_ALGO": "ring;allreduce:tree"}
    f = one(value, "env-invalid-value")  # the fixture's NCCL is 2.21.5
    assert "needs NCCL 2.24" in f.message
    new = facts(**{"software.nccl.loaded_version": "2.26.2"})
    none(value, "env-invalid-value", new)
    assert "no function prefix" in one({"NCCL_ALGO": "allreduce:tree;ring"}, "env-invalid-value", new).message
    assert "unknown function 'allgathr'" in one({"NCCL_ALGO": "ring;allgathr:ring"}, "env-invalid-value", new).message
    f = one({"NCCL_PROTO": "Simpel"}, "env-invalid-value", new)
    assert "unknown protocol 'Simpel'" in f.message and "ncclInvalidUsage" in f.message and f.severity == Severity.ERROR


def test_algo_proto_that_enable_nothing():
    f = one({"NCCL_PROTO": "^LL,LL128,Simple"}, "algo-proto-override")
    assert f.severity == Severity.ERROR
    new = facts(**{"software.nccl.loaded_version": "2.26.2"})
    f = one({"NCCL_ALGO": "ring;allreduce:^ring,tree,collnetdirect,collnetchain,nvls,nvlstree,pat"},
            "algo-proto-override", new)
    assert "AllReduce" in f.message and f.severity == Severity.ERROR
    f = one({"NCCL_ALGO": "Ring"}, "algo-proto-override")
    assert f.severity == Severity.INFO


# ------------------------------------------------------------------ NCCL config files and graph files


def conf(entries: list[dict], origin: str = "/etc/nccl.conf", exists: bool = True) -> dict:
    return facts(**{"environment.nccl_conf": [{"origin": origin, "path": "/etc/nccl.conf" if origin == "/etc/nccl.conf"
                                               else "/opt/job/nccl.conf", "exists": exists, "entries": entries}]})


def test_conf_file_lines_nccl_reads_differently():
    fx = conf([{"line": 1, "name": "export NCCL_DEBUG", "value": "INFO"},
               {"line": 2, "name": "NCCL_SOCKET_IFNAME ", "value": " ens1f0"},
               {"line": 3, "ignored": "no '=' on the line"},
               {"line": 4, "name": "NCCL_IB_HCA", "value": "mlx5_0 "}])
    hits = found({}, fx, "env-invalid-value")
    messages = " | ".join(f.message for f in hits)
    assert "named 'export NCCL_DEBUG'" in messages and "named 'NCCL_SOCKET_IFNAME '" in messages
    assert "has no '='" in messages and "trailing whitespace" in messages
    assert all(f.evidence[0].source == "/etc/nccl.conf" for f in hits)


def test_conf_file_values_are_linted_and_env_wins():
    fx = conf([{"line": 2, "name": "NCCL_IB_DISABLE", "value": "1"}, {"line": 3, "name": "NCCL_DEBUG", "value": "x"}])
    f = one({}, "ib-not-used", fx)
    assert (f.evidence[0].source, f.evidence[0].line) == ("/etc/nccl.conf", 2)
    none({"NCCL_DEBUG": "WARN"}, "env-invalid-value", fx)  # the environment's value wins


def test_missing_nccl_conf_file():
    fx = conf([], origin="NCCL_CONF_FILE", exists=False)
    f = one({"NCCL_CONF_FILE": "/opt/job/nccl.conf"}, "env-invalid-value", fx)
    assert "skips ~/.nccl.conf" in f.message


def test_azure_graph_file_on_a_smaller_vm():
    fx = conf([{"line": 1, "name": "NCCL_TOPO_FILE", "value": "/opt/microsoft/ncv4/topo.xml"},
               {"line": 2, "name": "NCCL_GRAPH_FILE", "value": "/opt/microsoft/ncv4/graph.xml"}])
    fx["gpus"]["count"] = 1
    fx["environment"]["files"] = {
        "NCCL_GRAPH_FILE": {"path": "/opt/microsoft/ncv4/graph.xml", "exists": True, "gpu_devs": [0, 1, 2, 3]},
        "NCCL_TOPO_FILE": {"path": "/opt/microsoft/ncv4/topo.xml", "exists": False}}
    hits = found({}, fx, "nccl-graph-file")
    by_var = {f.evidence[0].text.split("=")[0]: f for f in hits}
    assert by_var["NCCL_GRAPH_FILE"].severity == Severity.ERROR
    assert "refers to GPUs 0..3 but this host has 1 GPU" in by_var["NCCL_GRAPH_FILE"].message
    assert "/etc/nccl.conf:2" in by_var["NCCL_GRAPH_FILE"].message
    assert "Delete the NCCL_GRAPH_FILE line from /etc/nccl.conf" in by_var["NCCL_GRAPH_FILE"].fix[0]
    assert "does not exist" in by_var["NCCL_TOPO_FILE"].message


# ------------------------------------------------------------------ interfaces


def test_socket_ifname_selects_nothing():
    f = one({"NCCL_SOCKET_IFNAME": "eth0"}, "socket-ifname-no-match")
    assert f.severity == Severity.ERROR and "ens1f0 10.1.0.11" in f.message
    assert "NCCL_SOCKET_IFNAME=ens1f0" in f.fix[0]
    assert "exists but is DOWN" in one({"NCCL_SOCKET_IFNAME": "ens1f1"}, "socket-ifname-no-match").message
    one({"NCCL_SOCKET_IFNAME": "=ens1"}, "socket-ifname-no-match")  # exact names
    one({"NCCL_SOCKET_IFNAME": "ens1f0", "NCCL_SOCKET_FAMILY": "AF_INET6"}, "socket-ifname-no-match")
    for ok in ("ens", "ens1f0,ib", "=ib0", "^docker,lo", "^=lo"):
        none({"NCCL_SOCKET_IFNAME": ok}, "socket-ifname-no-match")


def test_socket_ifname_short_value_is_ignored():
    f = one({"NCCL_SOCKET_IFNAME": "e"}, "env-invalid-value")
    assert "shorter than 2 characters" in f.message


def test_socket_ifname_only_loopback_in_multi_node_job():
    f = one({**MULTI_NODE, "NCCL_SOCKET_IFNAME": "^ens,ib"}, "wrong-interface-selected")
    assert f.severity == Severity.ERROR and "selects only lo" in f.message


def test_default_interface_differs_from_route_to_master():
    fx = facts(**{"network.master": {"addr": "10.1.0.10", "port": "29500", "route": {
        "host": "10.1.0.10", "address": "10.1.0.10", "source_address": "10.1.0.11", "interface": "ens1f0",
        "local": False, "loopback": False}}})
    f = one(MULTI_NODE, "wrong-interface-selected", fx)
    assert "NCCL picks ib0" in f.message and "through ens1f0" in f.message
    assert "NCCL_SOCKET_IFNAME=ens1f0" in f.fix[0]
    none({**MULTI_NODE, "NCCL_SOCKET_IFNAME": "ens1f0"}, "wrong-interface-selected", fx)
    none({k: v for k, v in MULTI_NODE.items() if "WORLD" not in k}, "wrong-interface-selected", fx)  # one node


def test_default_interface_virtual_or_nothing():
    only_docker = facts(**{"network.interfaces": [
        {"name": "lo", "up": True, "running": True, "addresses": [{"family": "AF_INET", "address": "127.0.0.1"}]},
        {"name": "docker0", "up": True, "running": True, "addresses": [{"family": "AF_INET", "address": "172.17.0.1"}]}]})
    assert "docker0 (172.17.0.1)" in one(MULTI_NODE, "wrong-interface-selected", only_docker).message
    nothing = facts(**{"network.interfaces": [{"name": "eth0", "up": False, "running": False, "addresses": []}]})
    assert one({}, "no-usable-interface", nothing).severity == Severity.ERROR


def test_gloo_ifname_takes_exact_names():
    f = one({"GLOO_SOCKET_IFNAME": "ens1"}, "gloo-ifname-no-match")
    assert "exact interface names" in f.message and "Unable to find address for: ens1" in f.message
    assert "exact interface names" in one({"GLOO_SOCKET_IFNAME": "^lo"}, "gloo-ifname-no-match").message
    assert "has no IP address" in one({"GLOO_SOCKET_IFNAME": "ens1f1"}, "gloo-ifname-no-match").message
    assert len(found({"GLOO_SOCKET_IFNAME": "ens1f0,eth9,ib0"}, cause="gloo-ifname-no-match")) == 1
    none({"GLOO_SOCKET_IFNAME": "ens1f0,ib0"}, "gloo-ifname-no-match")


def test_gloo_default_with_loopback_hostname():
    debian = facts(**{"network.interfaces": BASE["network"]["interfaces"][:2],
                      "network.hostname": {"name": "node-1", "addresses": ["127.0.1.1"], "loopback_only": True}})
    f = one(MULTI_NODE, "wrong-interface-selected", debian)
    assert "127.0.1.1" in f.message and "GLOO_SOCKET_IFNAME=ens1f0" in f.fix[0]
    none({**MULTI_NODE, "GLOO_SOCKET_IFNAME": "ens1f0"}, "wrong-interface-selected", debian)
    none({}, "wrong-interface-selected", debian)  # one node: loopback is fine


# ------------------------------------------------------------------ InfiniBand


def test_ib_hca_matching():
    assert one({"NCCL_IB_HCA": "mlx5_2"}, "ib-hca-no-match").severity == Severity.ERROR
    f = one({"NCCL_IB_HCA": "mlx5_1"}, "ib-hca-no-match")
    assert f.severity == Severity.WARNING and "mlx5_10, mlx5_11" in f.message and "=mlx5_1" in f.fix[0]
    for ok in ("=mlx5_1", "^mlx5_0", "mlx5_0:1,=mlx5_1", "=mlx5_0,mlx5_11"):
        none({"NCCL_IB_HCA": ok}, "ib-hca-no-match")
    assert "DOWN" in one({"NCCL_IB_HCA": "=mlx5_10"}, "ib-port-down").message
    none({"NCCL_IB_HCA": "mlx5_0:2"}, "ib-port-down")
    one({"NCCL_IB_HCA": "mlx5_0:2"}, "ib-hca-no-match")  # port 2 does not exist


def test_ib_hca_without_devices():
    no_ib = facts(infiniband={"sysfs": "/sys/class/infiniband", "devices": [],
                              "dev_infiniband": {"present": False, "uverbs": []}})
    assert one({"NCCL_IB_HCA": "mlx5_0"}, "ib-hca-no-match", no_ib).severity == Severity.WARNING
    no_ib["host"]["container"] = {"detected": True, "runtime": "docker", "markers": ["/.dockerenv"]}
    one({"NCCL_IB_HCA": "mlx5_0"}, "ib-missing-in-container", no_ib)


def test_ib_ports_all_down():
    down = facts()
    for dev in down["infiniband"]["devices"]:
        for port in dev["ports"]:
            port["state"], port["state_code"] = "INIT", 2
    assert "no InfiniBand/RoCE port is ACTIVE" in one({}, "ib-port-down", down).message
    none({}, "ib-port-down")


def test_ib_disabled_with_active_ports():
    f = one({"NCCL_IB_DISABLE": "1"}, "ib-not-used")
    assert "mlx5_0:1 (400 Gb/sec (4X NDR))" in f.message
    none({"NCCL_IB_DISABLE": "0"}, "ib-not-used")
    none({"NCCL_IB_DISABLE": "1"}, "ib-not-used", facts(infiniband={"unavailable": "none"}))


def test_roce_gid_index_with_where_it_was_set():
    none({"NCCL_IB_GID_INDEX": "3"}, "roce-gid-index")
    f = lint(SourcedEnv({"NCCL_IB_GID_INDEX": "0", "NCCL_DEBUG": "WARN"}, "job.env", {"NCCL_IB_GID_INDEX": 4}), BASE)
    gid = [x for x in f if x.cause == "roce-gid-index"]
    assert len(gid) == 1 and "IB/RoCE v1" in gid[0].message and "NCCL_IB_GID_INDEX=3" in gid[0].fix[0]
    assert gid[0].evidence[0] == Evidence("job.env", "NCCL_IB_GID_INDEX=0", 4)
    none({"NCCL_IB_GID_INDEX": "40"}, "roce-gid-index")  # beyond the 16 slots collect() reads: not judged
    assert one({"NCCL_IB_GID_INDEX": "7"}, "roce-gid-index").severity == Severity.ERROR  # read, and empty


def test_ib_hca_from_an_nccl_conf_file_is_judged_with_its_line():
    fx = facts(**{"environment.nccl_conf": [{"origin": "/etc/nccl.conf", "path": "/etc/nccl.conf", "exists": True,
                                             "entries": [{"line": 2, "name": "NCCL_IB_HCA", "value": "mlx5_4"}]}]})
    f = one({}, "ib-hca-no-match", fx)
    assert f.evidence[0] == Evidence("/etc/nccl.conf", "NCCL_IB_HCA=mlx5_4", 2)


def test_missing_dev_infiniband():
    fx = facts(**{"infiniband.dev_infiniband": {"present": True, "uverbs": []}})
    assert "no uverbs device" in one({}, "ib-missing-in-container", fx).message


def smi_hardware(name: str, **extra) -> dict:
    topo = {"source": "nvidia-smi topo -m", **parse_smi_topo((SMI / name).read_text())}
    return {"topology": topo, "gpu_health": {"unavailable": "NVML: not in this test"}, "pci": {"devices": {}},
            "fabric": {"nvswitch": {"present": False}, "gpu_fabric_state": {}}, "xid": {"events": []}, **extra}


def test_lint_judges_the_hardware_section():
    assert [f.cause for f in found({}, facts(hardware=smi_hardware("h100_nv18_9nic_nccl1453.txt")))
            if f.category not in ("nccl_config",)] == []
    sick = smi_hardware(
        "h100_nv18_6nic_nccl1357.txt",
        fabric={"nvswitch": {"present": True, "pci": ["0000:07:00.0"]}, "gpu_fabric_state": {},
                "fabric_manager_process": False, "fabric_manager_service": "inactive"},
        xid={"source": "dmesg", "since_boot": True, "events": [
            {"source": "dmesg", "line": 7, "bus_id": "0000:18:00.0", "xid": 79,
             "text": "NVRM: Xid (PCI:0000:18:00): 79, pid=1, GPU has fallen off the bus."}]},
        gpu_health={"gpus": [{"index": 0, "bus_id": "0000:18:00.0", "pcie": {"gen": 5, "max_gen": 5, "width": 8,
                                                                              "max_width": 16},
                              "ecc": {"volatile_uncorrected": 3}, "throttle": []}], "p2p": {}})
    fx = facts(hardware=sick)
    assert one({}, "gpu-nic-far", fx).message.startswith("GPU1, GPU3, GPU5:")
    assert one({}, "fabric-manager", fx).severity == Severity.ERROR
    assert one({}, "gpu-xid", fx).severity == Severity.ERROR
    assert one({}, "gpu-ecc", fx).severity == Severity.ERROR
    assert "x8" in one({}, "pcie-degraded", fx).message
    none({"NCCL_IB_DISABLE": "1"}, "gpu-nic-far", fx)
    assert lint({}, facts(hardware={"unavailable": "probe did not finish"})) is not None


@pytest.mark.parametrize("env", [{}, {"NCCL_IB_HCA": "mlx5_1"}, {"NCCL_IB_HCA": "=mlx5_10"}, {"NCCL_IB_HCA": "mlx5_2"},
                                 {"NCCL_IB_HCA": "^mlx5_0"}, {"NCCL_IB_GID_INDEX": "0"}])
def test_ib_findings_have_one_home_shared_with_topo(env):
    """lint's InfiniBand findings are exactly rules.hardware's (what `topo` reports), each once."""
    findings = found(env)
    ib = [(f.cause, f.message) for f in findings if f.category == "infiniband_roce"]
    assert len(ib) == len(set(ib))
    topo = judge({"ib_ports": BASE["infiniband"], "host": BASE["host"]}, {"NCCL_DEBUG": "WARN", **env})
    assert sorted(ib) == sorted((f.cause, f.message) for f in topo if f.category == "infiniband_roce")


# ------------------------------------------------------------------ rendezvous


def test_rank_and_world_size():
    assert "RANK=8 with WORLD_SIZE=8" in one({"RANK": "8", "WORLD_SIZE": "8", "MASTER_ADDR": "a", "MASTER_PORT": "1"},
                                             "rank-config-invalid").message
    one({"LOCAL_RANK": "8", "LOCAL_WORLD_SIZE": "8"}, "rank-config-invalid")
    one({"LOCAL_WORLD_SIZE": "16", "WORLD_SIZE": "8"}, "rank-config-invalid")
    f = one({"RANK": "1", "WORLD_SIZE": "2"}, "rank-config-invalid")
    assert f.severity == Severity.WARNING and "MASTER_ADDR expected" in f.message
    none({"RANK": "1", "WORLD_SIZE": "2", "TORCHELASTIC_USE_AGENT_STORE": "True"}, "rank-config-invalid")
    none(MULTI_NODE, "rank-config-invalid")


def test_local_rank_beyond_visible_gpus():
    f = one({"LOCAL_RANK": "2", "CUDA_VISIBLE_DEVICES": "0,1"}, "more-ranks-than-gpus")
    assert "invalid device ordinal" in f.message
    assert "16 ranks on this node" in one({"LOCAL_WORLD_SIZE": "16"}, "more-ranks-than-gpus").message
    f = one({"CUDA_VISIBLE_DEVICES": "0,9,1"}, "more-ranks-than-gpus")
    assert f.severity == Severity.WARNING and "leaving 1" in f.message
    assert "hides all 8 GPUs" in one({"CUDA_VISIBLE_DEVICES": ""}, "more-ranks-than-gpus").message
    assert "16 ranks" in one({"LOCAL_RANK": "9", "LOCAL_WORLD_SIZE": "16"}, "more-ranks-than-gpus").message
    none({"LOCAL_RANK": "7", "LOCAL_WORLD_SIZE": "8"}, "more-ranks-than-gpus")
    none({"LOCAL_RANK": "3"}, "more-ranks-than-gpus", facts(gpus={"unavailable": "no NVML"}))


def route(**kw) -> dict:
    return facts(**{"network.master": {"addr": "x", "port": "29500", "route": {"host": "x", **kw}}})


def test_master_addr():
    env = {"MASTER_ADDR": "x"}
    f = one(env, "master-addr-unresolvable", route(error="unresolvable", unavailable="cannot resolve x: [Errno -2]"))
    assert f.severity == Severity.ERROR
    assert one(env, "master-addr-unresolvable", route(error="timeout", unavailable="t")).severity == Severity.WARNING
    one(env, "master-unreachable", route(error="no-route", unavailable="no route to 10.9.9.9: Network is unreachable"))
    loop = route(address="127.0.1.1", loopback=True, local=True, interface="lo", source_address="127.0.0.1")
    assert "loopback" in one({**MULTI_NODE, **env}, "master-addr-unresolvable", loop).message
    none(env, "master-addr-unresolvable", loop)  # a single-node job may use loopback


def test_master_port():
    assert one({"MASTER_PORT": "70000"}, "master-port-invalid").severity == Severity.ERROR
    one({"MASTER_PORT": "port"}, "master-port-invalid")
    local = route(address="10.1.0.11", local=True, loopback=False, interface="ens1f0")
    one({"MASTER_ADDR": "x", "MASTER_PORT": "80"}, "master-port-invalid", local)  # uid 1000, privileged port
    local["network"]["master"]["listeners"] = [{"address": "0.0.0.0", "pid": 4242, "process": "python"}]
    f = one({"MASTER_ADDR": "x", "MASTER_PORT": "29500"}, "port-in-use", local)
    assert "python 4242" in f.message and "ss -ltnp | grep :29500" in f.fix[0]
    none({"MASTER_ADDR": "x", "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "job"}, "port-in-use", local)
    remote = route(address="10.1.0.10", local=False, loopback=False, interface="ens1f0")
    remote["network"]["master"]["listeners"] = [{"address": "0.0.0.0", "pid": 1}]
    none({"MASTER_ADDR": "x", "MASTER_PORT": "29500"}, "port-in-use", remote)


# ------------------------------------------------------------------ host


def test_shm_too_small_for_local_ranks():
    small = facts(**{"limits.shm": {"path": "/dev/shm", "total_bytes": 64 * 2**20, "free_bytes": 64 * 2**20}})
    f = one({"LOCAL_WORLD_SIZE": "2"}, "shm-too-small", small)
    assert f.severity == Severity.ERROR and "2 local ranks" in f.message and "remount" in f.fix[0]
    small["host"]["container"]["detected"] = True
    assert "--shm-size" in one({"LOCAL_WORLD_SIZE": "2"}, "shm-too-small", small).fix[0]
    medium = facts(**{"limits.shm": {"path": "/dev/shm", "total_bytes": 512 * 2**20, "free_bytes": 512 * 2**20}})
    assert one({"LOCAL_WORLD_SIZE": "8"}, "shm-too-small", medium).severity == Severity.WARNING
    one({}, "shm-too-small", medium)  # 8 visible GPUs count as 8 local ranks
    none({"LOCAL_WORLD_SIZE": "8", "NCCL_SHM_DISABLE": "1"}, "shm-too-small", medium)
    none({"LOCAL_WORLD_SIZE": "1"}, "shm-too-small", small)
    none({"LOCAL_WORLD_SIZE": "8"}, "shm-too-small")


def test_memlock_with_ib():
    f = one({}, "ulimit-memlock", facts(**{"limits.memlock": {"soft": 65536, "hard": 65536}}))
    assert f.severity == Severity.ERROR and "memlock=-1" in f.fix[0]
    f = one({}, "ulimit-memlock", facts(**{"limits.memlock": {"soft": 2**30, "hard": "unlimited"}}))
    assert f.severity == Severity.WARNING and "ulimit -l unlimited" in f.fix[0]
    none({}, "ulimit-memlock", facts(**{"limits.memlock": {"soft": 65536, "hard": 65536}},
                                     infiniband={"unavailable": "none"}))
    none({}, "ulimit-memlock")


def test_nofile():
    f = one({}, "ulimit-nofile", facts(**{"limits.nofile": {"soft": 1024, "hard": 1048576}}))
    assert "ulimit -n 1048576" in f.fix[0]
    f = one({"WORLD_SIZE": "4096"}, "ulimit-nofile", facts(**{"limits.nofile": {"soft": 8192, "hard": 8192}}))
    assert "16384" in f.message and "--ulimit nofile" in f.fix[0]
    none({}, "ulimit-nofile")


def test_conflicting_nccl_installations():
    fx = facts()
    fx["software"]["nccl_wheels"].append({"name": "nvidia-nccl-cu11", "version": "2.14.3", "libraries": []})
    f = one({}, "conflicting-nccl-packages", fx)
    assert f.severity == Severity.ERROR and "pip uninstall nvidia-nccl-cu11" in f.fix[0]
    fx = facts()
    fx["software"]["nccl"]["libraries"].append({"path": "/usr/local/nccl/lib/libnccl.so.2", "found_via":
                                                ["LD_LIBRARY_PATH"], "version": "2.18.3"})
    fx["software"]["nccl"]["loaded_version"] = "2.18.3"
    fx["software"]["nccl"]["loaded_from"] = "/usr/local/nccl/lib/libnccl.so.2"
    hits = found({}, fx, "conflicting-nccl-packages")
    assert any("2.18.3, 2.21.5" in f.message for f in hits)
    assert any("built with NCCL 2.21.5 but loads NCCL 2.18.3" in f.message for f in hits)
    none({}, "conflicting-nccl-packages")


# ------------------------------------------------------------------ performance and error handling


@pytest.mark.parametrize("env", [
    {"NCCL_P2P_DISABLE": "1"}, {"NCCL_SHM_DISABLE": "1"}, {"NCCL_PROTO": "Simple"}, {"NCCL_NET_GDR_LEVEL": "LOC"},
    {"NCCL_BUFFSIZE": "65536"}, {"NCCL_MAX_NCHANNELS": "1"}, {"NCCL_MAX_CTAS": "1"},
])
def test_perf_settings(env):
    f = one(env, "perf-setting")
    assert f.severity == Severity.WARNING and f.fix[0].startswith(f"`unset {next(iter(env))}`")


@pytest.mark.parametrize("env", [{"NCCL_P2P_DISABLE": "2"}, {"NCCL_PROTO": "LL,Simple"}, {"NCCL_BUFFSIZE": "4M"},
                                 {"NCCL_MAX_CTAS": "16"}])
def test_settings_that_cost_nothing(env):
    none(env, "perf-setting")


def test_error_handling_off():
    f = one({"TORCH_NCCL_ASYNC_ERROR_HANDLING": "0"}, "error-handling-off")
    assert "nothing raises" in f.message
    f = one({"TORCH_NCCL_ASYNC_ERROR_HANDLING": "0", "TORCH_NCCL_BLOCKING_WAIT": "1"}, "error-handling-off")
    assert "nothing raises" not in f.message
    one({"TORCH_NCCL_ENABLE_MONITORING": "false"}, "error-handling-off")
    assert "2.0 h" in one({"TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": "7200"}, "error-handling-off").message
    assert one({"TORCH_NCCL_TRACE_BUFFER_SIZE": "0"}, "error-handling-off").severity == Severity.INFO
    none({"TORCH_NCCL_ASYNC_ERROR_HANDLING": "3", "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": "600"}, "error-handling-off")


def test_debug_logging():
    assert lint({}, BASE) and [f.severity for f in lint({}, BASE) if f.cause == "debug-logging-off"] == [Severity.INFO]
    assert "%h" in one({"NCCL_DEBUG_FILE": "/tmp/nccl.log"}, "debug-logging-off").fix[0]
    none({"NCCL_DEBUG_FILE": "/tmp/nccl.%h.%p.log"}, "debug-logging-off")


# ------------------------------------------------------------------ the whole


KITCHEN_SINK = {
    "NCCL_DEBG": "INFO", "NCCL_IB_MTU": "4096", "NCCL_IB_GDR_LEVEL": "PHB", "NCCL_MAX_NCHANNELS": "1",
    "NCCL_IBEXT_DISABLE": "1", "NCCL_P2P_LEVEL": "node", "NCCL_IB_RETRY_CNT": "12", "NCCL_PROTO": "Simple",
    "NCCL_SOCKET_IFNAME": "eth0", "GLOO_SOCKET_IFNAME": "^lo", "NCCL_IB_HCA": "mlx5_9", "NCCL_IB_DISABLE": "1",
    "RANK": "20", "WORLD_SIZE": "16", "LOCAL_RANK": "9", "LOCAL_WORLD_SIZE": "8", "MASTER_PORT": "0",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "0", "NCCL_DEBUG_FILE": "/tmp/n.log", "NCCL_P2P_DISABLE": "1",
    "HF_TOKEN": "hf_" + "a1B2" * 10, "MASTER_ADDR": "https://user:s3cr3tpass@example.org",
}


def test_every_finding_names_a_cause_with_a_fix_and_leaks_no_secret():
    findings = lint(SourcedEnv(KITCHEN_SINK, "job.env", {k: i for i, k in enumerate(KITCHEN_SINK, 1)}), BASE)
    assert len({f.cause for f in findings}) >= 12
    for f in findings:
        assert f.fix_steps(), f.cause
        data = json.dumps(f.to_json())
        assert "s3cr3tpass" not in data and "a1B2a1B2" not in data
    assert all(e.source == "job.env" and e.line for f in findings for e in f.evidence if "=" in e.text
               and not e.source.startswith("probe"))


def test_lint_is_a_pure_function_of_its_inputs(monkeypatch):
    monkeypatch.setenv("NCCL_DEBG", "INFO")
    assert not [f for f in lint({}, BASE) if f.cause == "env-unknown-variable"]
    first = [f.to_json() for f in lint(KITCHEN_SINK, BASE)]
    assert first == [f.to_json() for f in lint(KITCHEN_SINK, copy.deepcopy(BASE))]


def test_unavailable_facts_never_crash_a_rule():
    bare = {name: {"unavailable": "probe failed"} for name in BASE}
    findings = lint(KITCHEN_SINK, bare)
    assert {f.cause for f in findings} >= {"env-unknown-variable", "env-invalid-value", "rank-config-invalid"}
    assert lint(KITCHEN_SINK, {}) is not None


def test_docs_rule_table_is_current():
    """docs/lint.md carries the table rules_markdown() generates from the rules' docstrings."""
    text = (Path(__file__).parents[1] / "docs" / "lint.md").read_text()
    assert rules_markdown() in text, "regenerate the rule table: python -c 'from nccl_doctor.rules.lint import " \
                                     "rules_markdown; print(rules_markdown())'"
    assert len(RULES) == len({rule.__name__ for rule in RULES})
