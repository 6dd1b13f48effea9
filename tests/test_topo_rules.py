"""Judging hardware facts: each rule fires on the fault it names, and stays silent on healthy nodes."""

from __future__ import annotations

import pynvml

from nccl_doctor.model import Severity
from nccl_doctor.probe.hardware import hardware_facts
from nccl_doctor.probe.topology import parse_smi_topo
from nccl_doctor.rules.hardware import judge
from test_topo_fakes import SMI, FakeHost, FakeNVML, hgx_gpu, two_socket_node


def causes(findings, cause=None):
    return [f for f in findings if cause is None or f.cause == cause]


def smi_facts(name: str) -> dict:
    return {"topology": {"source": "nvidia-smi topo -m (file)", **parse_smi_topo((SMI / name).read_text())}}


def healthy_hgx(tmp_path, **nvml_kw):
    host = FakeHost(tmp_path)
    for i in range(4):
        host.gpu(f"0000:{0x10 + i:02x}:00.0", f"0000:{0x18 + i * 0x10:02x}:00.0", iommu="identity")
    return FakeNVML([hgx_gpu(i, **nvml_kw) for i in range(4)])


def test_healthy_fake_hgx_node_has_no_findings(tmp_path):
    nvml = healthy_hgx(tmp_path)
    assert judge(hardware_facts(tmp_path, nvml=nvml)) == []


def test_gpu_whose_nearest_nic_is_sys():
    findings = judge(smi_facts("h100_nv18_6nic_nccl1357.txt"))
    far = causes(findings, "gpu-nic-far")
    assert len(far) == 1 and far[0].severity == Severity.WARNING
    assert far[0].message.startswith("GPU1, GPU3, GPU5:") and "SYS" in far[0].message
    assert judge(smi_facts("h100_nv18_9nic_nccl1453.txt")) == []
    assert causes(judge(smi_facts("k80_mlx4_soc_tensorflow_gdr.txt")), "gpu-nic-far")  # GPU0/1: mlx4_0 via SOC


def test_nccl_ib_hca_choosing_a_far_nic():
    facts = smi_facts("a100_nv12_10nic_readme.txt")
    facts["ib_ports"] = {"devices": [{"name": f"mlx5_{i}", "ports": [{"port": 1, "state": "ACTIVE", "state_code": 4,
                                                                       "link_layer": "InfiniBand"}]} for i in range(10)],
                         "dev_infiniband": {"present": True, "uverbs": ["uverbs0"]}}
    assert judge(facts, {"NCCL_IB_HCA": "mlx5_0,mlx5_2,mlx5_4,mlx5_6"}) == []
    far = causes(judge(facts, {"NCCL_IB_HCA": "mlx5_0,mlx5_1,mlx5_2,mlx5_3"}), "gpu-nic-far")
    assert len(far) == 1 and "mlx5_4, mlx5_5, mlx5_6, mlx5_7" in far[0].message
    assert "GPU4, GPU5, GPU6, GPU7" in far[0].message
    none = causes(judge(facts, {"NCCL_IB_HCA": "mlx4"}), "ib-hca-no-match")
    assert none and none[0].severity == Severity.ERROR
    assert judge(facts, {"NCCL_IB_HCA": "mlx4", "NCCL_IB_DISABLE": "1"}) == []


def test_ib_hca_judged_against_the_nic_legend_of_a_saved_matrix():
    facts = smi_facts("a100_nv12_10nic_readme.txt")
    assert causes(judge(facts, {"NCCL_IB_HCA": "=mlx5_1"}), "gpu-nic-far")
    assert causes(judge(facts, {"NCCL_IB_HCA": "bnxt_re"}), "ib-hca-no-match")
    assert judge(facts, {"NCCL_IB_HCA": "mlx5"}) == []


def test_port_down_degraded_rate_and_missing_dev_nodes(tmp_path):
    host = two_socket_node(tmp_path)
    host.rdma("mlx5_2", "0000:04:00.0", {1: {"state": "1: DOWN", "phys": "2: Polling", "rate": "10 Gb/sec (4X SDR)"}})
    host.rdma("mlx5_3", "0000:04:00.0", {1: {"rate": "100 Gb/sec (4X EDR)"}})
    findings = judge(hardware_facts(tmp_path))
    down = causes(findings, "ib-port-down")
    assert len(down) == 1 and down[0].severity == Severity.WARNING and "no cable or no link partner" in down[0].message
    assert "NCCL_IB_HCA=^mlx5_2:1" in down[0].fix[0]
    slow = causes(findings, "ib-rate-degraded")
    assert [f.message.split()[0] for f in slow] == ["mlx5_3"] and "400 Gb/sec" in slow[0].message
    named = causes(judge(hardware_facts(tmp_path), {"NCCL_IB_HCA": "mlx5_2"}), "ib-port-down")
    assert named[0].severity == Severity.ERROR and "falls back to TCP" in named[0].message
    (tmp_path / "dev" / "infiniband" / "uverbs0").unlink()
    (tmp_path / "dev" / "infiniband" / "uverbs1").unlink()
    assert causes(judge(hardware_facts(tmp_path)), "ib-missing-in-container")


def test_a_down_port_beside_active_ones_and_the_fix_that_keeps_nccl_ib_hca(tmp_path):
    host = two_socket_node(tmp_path)
    host.rdma("mlx5_2", "0000:04:00.0", {1: {"state": "1: DOWN", "phys": "3: Disabled"}})
    assert causes(judge(hardware_facts(tmp_path)), "ib-port-down") == []  # disabled on purpose, not asked for
    named = causes(judge(hardware_facts(tmp_path), {"NCCL_IB_HCA": "mlx5_0,mlx5_2"}), "ib-port-down")
    assert len(named) == 1 and named[0].severity == Severity.ERROR and "administratively disabled" in named[0].message
    assert named[0].evidence[0].text == "NCCL_IB_HCA=mlx5_0,mlx5_2" and named[0].fix[0].endswith("NCCL_IB_HCA==mlx5_0:1")
    (tmp_path / "sys/class/infiniband/mlx5_2/ports/1/phys_state").write_text("2: Polling\n")
    excluding = causes(judge(hardware_facts(tmp_path), {"NCCL_IB_HCA": "^mlx5_1"}), "ib-port-down")
    assert len(excluding) == 1 and excluding[0].severity == Severity.WARNING
    assert excluding[0].fix[0].endswith("NCCL_IB_HCA=^mlx5_1,mlx5_2:1")


def test_rising_counters_are_errors_and_static_ones_info(tmp_path):
    host = two_socket_node(tmp_path)
    host.counters("mlx5_0", 1, {"symbol_error": 3, "link_downed": 1, "port_rcv_errors": 0})
    info = causes(judge(hardware_facts(tmp_path)), "ib-link-errors")
    assert len(info) == 1 and info[0].severity == Severity.INFO and "--sample" in info[0].fix[0]
    facts = hardware_facts(tmp_path)
    facts["ib_counter_deltas"] = {"seconds": 10, "ports": ["mlx5_0/1"], "deltas": {"mlx5_0/1": {"link_downed": 2, "symbol_error": 40}}}
    rising = causes(judge(facts), "ib-link-errors")
    assert len(rising) == 1 and rising[0].severity == Severity.ERROR and "link_downed +2" in rising[0].message


def test_roce_gid_index(tmp_path):
    two_socket_node(tmp_path)
    facts = hardware_facts(tmp_path)
    assert causes(judge(facts, {"NCCL_IB_GID_INDEX": "3"}), "roce-gid-index") == []
    v1 = causes(judge(facts, {"NCCL_IB_GID_INDEX": "0"}), "roce-gid-index")
    assert v1[0].severity == Severity.WARNING and "IB/RoCE v1" in v1[0].message and "NCCL_IB_GID_INDEX=3" in v1[0].fix[0]
    assert "link-local" in causes(judge(facts, {"NCCL_IB_GID_INDEX": "1"}), "roce-gid-index")[0].message
    assert causes(judge(facts, {"NCCL_IB_GID_INDEX": "7"}), "roce-gid-index")[0].severity == Severity.ERROR


def test_roce_port_without_ipv4_gid(tmp_path):
    host = FakeHost(tmp_path)
    host.pci("0000:00:03.0")
    host.pci("0000:00:03.0", "0000:06:00.0", vendor="0x15b3", cls="0x020000")
    host.rdma("mlx5_0", "0000:06:00.0", {1: {"layer": "Ethernet", "gids": {
        0: ("fe80:0000:0000:0000:5aa2:e1ff:feda:e626", "IB/RoCE v1", "eth2"),
        1: ("fe80:0000:0000:0000:5aa2:e1ff:feda:e626", "RoCE v2", "eth2")}}})
    host.dev_infiniband("uverbs0")
    gid = causes(judge(hardware_facts(tmp_path)), "roce-gid-index")
    assert gid and "dev eth2" in gid[0].fix[0]


def test_pcie_width_and_generation(tmp_path):
    two_socket_node(tmp_path)  # mlx5_1 trained x8 of x16
    nic = causes(judge(hardware_facts(tmp_path)), "pcie-degraded")
    assert len(nic) == 1 and "mlx5_1" in nic[0].message and "x8" in nic[0].message
    busy_slow = healthy_hgx(tmp_path / "b", reasons=0x0, pcie=(3, 5, 16, 16))
    assert len(causes(judge(hardware_facts(tmp_path / "b", nvml=busy_slow)), "pcie-degraded")) == 4
    idle_slow = healthy_hgx(tmp_path / "c", reasons=0x1, pcie=(1, 5, 16, 16))  # idle GPUs drop to Gen1
    assert causes(judge(hardware_facts(tmp_path / "c", nvml=idle_slow)), "pcie-degraded") == []


def test_nvlink_down_on_one_gpu(tmp_path):
    nvml = healthy_hgx(tmp_path)
    nvml.gpus[2] = hgx_gpu(2, down=(5, 6))
    found = causes(judge(hardware_facts(tmp_path, nvml=nvml)), "nvlink-inactive")
    assert len(found) == 1 and found[0].message.startswith("GPU2 has 16 active NVLinks, other GPUs 18")


def test_nvlink_short_pair_in_a_uniform_matrix():
    facts = smi_facts("h100_nv18_9nic_nccl1453.txt")
    facts["topology"]["matrix"]["GPU2"]["GPU6"] = facts["topology"]["matrix"]["GPU6"]["GPU2"] = "NV12"
    found = causes(judge(facts), "nvlink-inactive")
    assert len(found) == 1 and "GPU2-GPU6 NV12" in found[0].message
    assert causes(judge(smi_facts("dgx1v_mlx5_nccltests29.txt")), "nvlink-inactive") == []  # cube mesh by design
    assert causes(judge(smi_facts("a6000_nvlink_bridge_siboehm.txt")), "nvlink-inactive") == []


def test_fabric_manager_not_started(tmp_path):
    nvml = healthy_hgx(tmp_path, fabric=(pynvml.NVML_GPU_FABRIC_STATE_NOT_STARTED, pynvml.NVML_SUCCESS))
    found = causes(judge(hardware_facts(tmp_path, nvml=nvml)), "fabric-manager")
    assert len(found) == 1 and found[0].severity == Severity.ERROR and "not_started" in found[0].message


def test_fabric_registration_failed_and_links_all_down(tmp_path):
    nvml = healthy_hgx(tmp_path, fabric=(pynvml.NVML_GPU_FABRIC_STATE_COMPLETED, pynvml.NVML_ERROR_UNKNOWN))
    found = causes(judge(hardware_facts(tmp_path, nvml=nvml)), "fabric-manager")
    assert "completed with status 999" in found[0].message
    bridge = FakeNVML([{"bus_id": "0:1:0.0", "links": [(0, None, 0)] * 4}, {"bus_id": "0:2:0.0", "links": [(0, None, 0)] * 4}])
    down = causes(judge(hardware_facts(tmp_path, nvml=bridge)), "nvlink-inactive")
    assert len(down) == 1 and down[0].message.startswith("every NVLink of every GPU is inactive")


def test_nvswitch_without_fabric_manager_process():
    facts = {"fabric": {"nvswitch": {"present": True, "pci": ["0000:07:00.0"]}, "gpu_fabric_state": {},
                        "fabric_manager_process": False, "fabric_manager_service": "inactive"}}
    found = causes(judge(facts), "fabric-manager")
    assert found[0].severity == Severity.ERROR and "service inactive" in found[0].message
    facts["fabric"]["fabric_manager_service"] = None  # a container: the manager may run on the host
    assert causes(judge(facts), "fabric-manager")[0].severity == Severity.WARNING
    facts["fabric"]["fabric_manager_process"] = True
    assert judge(facts) == []


def test_p2p_disabled_between_nvlinked_gpus():
    facts = smi_facts("a6000_nvlink_bridge_siboehm.txt")
    facts["gpu_health"] = {"gpus": [], "p2p": {"0-1": "DISABLED_BY_REGKEY", "0-2": "NOT_SUPPORTED"}}
    found = causes(judge(facts), "p2p-disabled-nvlink")
    assert len(found) == 1 and "GPU0 and GPU1 are connected by NV4" in found[0].message


def test_throttling_ecc_and_xid(tmp_path):
    nvml = healthy_hgx(tmp_path)
    nvml.gpus[0] = hgx_gpu(0, reasons=0x40)
    nvml.gpus[1] = hgx_gpu(1, temp=85)
    nvml.gpus[2] = hgx_gpu(2, ecc={(pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC): 3})
    nvml.gpus[3] = hgx_gpu(3, remap=(0, 0, 1, 0))
    FakeHost(tmp_path).kern_log("kernel: NVRM: Xid (PCI:0000:18:00): 79, pid=1, GPU has fallen off the bus.",
                                "kernel: NVRM: Xid (PCI:0000:28:00): 13, Graphics SM Warp Exception")
    findings = judge(hardware_facts(tmp_path, nvml=nvml))
    throttled = causes(findings, "gpu-throttling")
    assert [f.message.split()[0] for f in throttled] == ["GPU0", "GPU1"]
    ecc = causes(findings, "gpu-ecc")
    assert [(f.message.split()[0], f.severity) for f in ecc] == [("GPU2", Severity.ERROR), ("GPU3", Severity.WARNING)]
    xid = causes(findings, "gpu-xid")
    assert [(f.message.split(":")[0], f.severity) for f in xid] == [("GPU0", Severity.WARNING), ("GPU1", Severity.INFO)]


def test_acs_and_iommu_on_pcie_gpus(tmp_path):
    host = two_socket_node(tmp_path)
    host.acs("0000:02:08.0", 0b1100)
    acs = causes(judge(hardware_facts(tmp_path)), "p2p-acs-iommu")
    assert len(acs) == 1 and "ACS redirects" in acs[0].message
    other = FakeHost(tmp_path / "vm")
    other.gpu("0000:00:04.0", iommu="DMA-FQ")
    other.gpu("0000:00:05.0", iommu="DMA-FQ")
    iommu = causes(judge(hardware_facts(tmp_path / "vm")), "p2p-acs-iommu")
    assert len(iommu) == 1 and "DMA-FQ" in iommu[0].message


def test_unavailable_facts_make_no_findings():
    facts = {key: {"unavailable": "x"} for key in ("topology", "gpu_health", "fabric", "ib_ports", "pci", "xid")}
    assert judge(facts, {"NCCL_IB_HCA": "mlx5_0", "NCCL_IB_GID_INDEX": "3"}) == []
    assert judge({}) == []


def test_host_is_attached():
    findings = judge(smi_facts("h100_nv18_6nic_nccl1357.txt"), host="node7")
    assert findings and all(f.hosts == ["node7"] for f in findings)
