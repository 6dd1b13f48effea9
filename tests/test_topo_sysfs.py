"""Readers over fake sysfs trees: RDMA ports, GID tables, counters and deltas, PCI topology, ACS,
IOMMU, NVSwitches and Xid events."""

from __future__ import annotations

import os
import time

import psutil

from nccl_doctor.probe import gpu_health, ib_health, infiniband, nvlink, topology
from nccl_doctor.probe.hardware import hardware_facts
from test_topo_fakes import FakeHost, two_socket_node


def test_ib_ports_state_rate_gids_counters(tmp_path):
    two_socket_node(tmp_path)
    ib = ib_health.read_ib_ports(tmp_path)
    devices = {d["name"]: d for d in ib["devices"]}
    ib0, roce = devices["mlx5_0"], devices["mlx5_1"]
    assert ib0["pci"] == "0000:04:00.0" and ib0["numa_node"] == 0 and ib0["hca_type"] == "MT4129"
    port = ib0["ports"][0]
    assert port["port"] == 1 and (port["state"], port["state_code"], port["phys_state"]) == ("ACTIVE", 4, "LinkUp")
    assert (port["rate_gbps"], port["width"], port["speed"]) == (400.0, "4X", "NDR")
    assert port["counters"] == {"link_downed": 0, "port_rcv_errors": 0, "symbol_error": 0}
    assert (port["lid"], port["sm_lid"], port["gids"]) == ("0x1a", "0x1", [])
    gids = roce["ports"][0]["gids"]
    assert [g["index"] for g in gids] == [0, 1, 2, 3]  # null entries of the table are skipped
    assert gids[3] == {"index": 3, "gid": "0000:0000:0000:0000:0000:ffff:0a00:0001", "type": "RoCE v2",
                       "ndev": "ens1f0np0", "ipv4": "10.0.0.1"}
    assert gids[1]["ipv4"] is None
    assert ib["dev_infiniband"] == {"present": True, "uverbs": ["uverbs0", "uverbs1"]}


def test_details_extend_the_basic_reading_without_rereading_it(tmp_path, monkeypatch):
    host = FakeHost(tmp_path)
    host.pci("0000:00:03.0")
    host.pci("0000:00:03.0", "0000:06:00.0", vendor="0x15b3", cls="0x020000")
    many = {i: (f"0000:0000:0000:0000:0000:ffff:0a00:{i:04x}", "RoCE v2", "eth2") for i in range(300)}
    host.rdma("mlx5_0", "0000:06:00.0", {1: {"layer": "Ethernet", "gids": many}})
    basic = infiniband.read_devices(tmp_path)
    read = []
    monkeypatch.setattr(infiniband, "read_gids", lambda port_dir, slots: read.extend(slots) or [])
    port = ib_health.read_ib_ports(tmp_path, basic)["devices"][0]["ports"][0]
    assert read == list(range(infiniband.GID_SLOTS_BASIC, ib_health.MAX_GIDS))  # only the slots not read yet
    assert (port["gids_read"], port["gid_slots"]) == (ib_health.MAX_GIDS, 300)
    assert port["gids"] == basic["devices"][0]["ports"][0]["gids"] and "counters" in port
    assert "counters" not in basic["devices"][0]["ports"][0]  # the basic reading is left as it was


def test_no_rdma_devices_is_a_fact_not_an_error(tmp_path):
    assert ib_health.read_ib_ports(tmp_path) == {"sysfs": str(tmp_path / "sys/class/infiniband"), "devices": [],
                                                 "dev_infiniband": {"present": False, "uverbs": []}}


def test_counter_sampling_reports_only_what_grew(tmp_path):
    host = two_socket_node(tmp_path)

    def between_samples(seconds: float) -> None:
        assert seconds == 3
        host.counters("mlx5_0", 1, {"symbol_error": 7, "link_downed": 0, "port_rcv_errors": 0})
        host.counters("mlx5_1", 1, {"symbol_error": 0, "link_downed": 0, "port_rcv_errors": 0},
                      {"local_ack_timeout_err": 12})

    host.counters("mlx5_1", 1, {}, {"local_ack_timeout_err": 2})
    sample = ib_health.sample_ib_counters(tmp_path, 3, sleep=between_samples)
    assert sample["deltas"] == {"mlx5_0/1": {"symbol_error": 7}, "mlx5_1/1": {"local_ack_timeout_err": 10}}


def test_pci_scan_finds_gpus_nics_links_and_iommu(tmp_path):
    two_socket_node(tmp_path)
    pci = topology.read_pci(tmp_path, ib_health.read_ib_ports(tmp_path))
    devices = pci["devices"]
    assert sorted((b, d["kind"]) for b, d in devices.items()) == [
        ("0000:03:00.0", "gpu"), ("0000:04:00.0", "nic"), ("0000:05:00.0", "gpu"),
        ("0000:06:00.0", "nic"), ("0000:81:00.0", "gpu")]
    gpu0 = devices["0000:03:00.0"]
    assert gpu0["chain"] == ["0000:00:01.0", "0000:01:00.0", "0000:02:08.0", "0000:03:00.0"]
    assert gpu0["link"] == {"speed": "16.0 GT/s PCIe", "gen": 4, "max_speed": "16.0 GT/s PCIe", "max_gen": 4,
                            "width": 16, "max_width": 16}
    assert gpu0["iommu_group_type"] == "identity" and gpu0["acs_redirect"] == {}
    assert devices["0000:06:00.0"]["link"]["width"] == 8 and devices["0000:06:00.0"]["rdma"] == "mlx5_1"
    assert devices["0000:81:00.0"]["numa_node"] == 1 and devices["0000:81:00.0"]["local_cpulist"] == "16-31"


def test_topology_from_the_pci_tree(tmp_path):
    two_socket_node(tmp_path)
    ib = ib_health.read_ib_ports(tmp_path)
    topo = topology.topology_from_pci(tmp_path, topology.read_pci(tmp_path, ib), {("GPU0", "GPU1"): 4, ("GPU1", "GPU0"): 4})
    assert topo["gpus"] == ["GPU0", "GPU1", "GPU2"] and topo["nics"] == {"NIC0": "mlx5_0", "NIC1": "mlx5_1"}
    m = topo["matrix"]
    assert m["GPU0"]["NIC0"] == "PIX"      # same PCIe switch
    assert m["GPU1"]["NIC0"] == "PHB"      # other root port, same host bridge
    assert m["GPU0"]["GPU1"] == "NV4"      # NVLink wins over the PCIe path
    assert m["GPU2"]["NIC0"] == "SYS" and m["GPU2"]["GPU0"] == "SYS"
    assert topo["affinity"]["GPU2"] == {"cpu": "16-31", "numa": 1}
    assert topo["source"] == "sysfs PCI tree + NVML NVLink"


def test_acs_redirect_on_switch_ports_is_read_from_config_space(tmp_path):
    host = two_socket_node(tmp_path)
    host.acs("0000:02:08.0", 0b0011101)  # SV, ReqRedir, CmpltRedir, UpstreamFwd
    host.acs("0000:00:01.0", 0b0001100)  # on the root port: not between peers under the switch
    pci = topology.read_pci(tmp_path)
    assert pci["devices"]["0000:03:00.0"]["acs_redirect"] == {"0000:02:08.0": ["ReqRedir", "CmpltRedir"]}


def test_acs_control_walks_the_capability_list():
    config = bytearray(4096)
    config[0x100:0x104] = (0x0001 | 1 << 16 | 0x140 << 20).to_bytes(4, "little")  # AER, next at 0x140
    config[0x140:0x144] = (0x000D | 1 << 16).to_bytes(4, "little")
    config[0x146:0x148] = (0x1C).to_bytes(2, "little")
    assert topology.acs_control(bytes(config)) == 0x1C
    assert topology.acs_control(bytes(64)) is None  # what a non-root user reads
    looping = bytearray(4096)
    looping[0x100:0x104] = (0x0001 | 0x100 << 20).to_bytes(4, "little")
    assert topology.acs_control(bytes(looping)) is None


def test_nvswitches_and_fabric_manager_process(tmp_path):
    host = FakeHost(tmp_path)
    host.pci("0000:00:05.0")
    host.pci("0000:00:05.0", "0000:07:00.0", vendor="0x10de", cls="0x068000")
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "nvidia-nvswitchctl").touch()
    pci = topology.read_pci(tmp_path)
    fabric = nvlink.read_fabric(tmp_path, pci, {}, live=False, process_names=["sshd", "nv-fabricmanager"])
    assert fabric["nvswitch"]["present"] and fabric["nvswitch"]["pci"] == ["0000:07:00.0"]
    assert fabric["fabric_manager_process"] is True and fabric["fabric_manager_service"] is None
    assert nvlink.read_fabric(tmp_path, pci, {}, live=False)["fabric_manager_process"] is None


def test_xid_events_from_kern_log(tmp_path):
    host = FakeHost(tmp_path)
    host.kern_log(
        "Jun 11 10:22:33 node7 kernel: [ 1234.5] NVRM: Xid (PCI:0000:3b:00): 79, pid=2345, GPU has fallen off the bus.",
        "Jun 11 10:22:34 node7 kernel: [ 1234.6] NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.",
        "Jun 11 10:30:00 node7 kernel: NVRM: Xid (PCI:0000:86:00): 13, Graphics SM Warp Exception on (GPC 0, TPC 1)")
    xid = gpu_health.read_xid_events(tmp_path, live=False)
    assert xid["since_boot"] is False
    assert [(e["bus_id"], e["xid"], e["line"]) for e in xid["events"]] == [("0000:3b:00.0", 79, 1), ("0000:86:00.0", 13, 3)]
    assert gpu_health.read_xid_events(tmp_path / "nothing", live=False)["unavailable"].startswith("no readable")


def test_hardware_facts_on_a_fake_tree_skips_host_only_readers(tmp_path):
    two_socket_node(tmp_path)
    facts = hardware_facts(tmp_path)
    assert facts["gpu_health"]["unavailable"].startswith("NVML not read")
    assert facts["topology"]["source"] == "sysfs PCI tree"
    assert facts["xid"]["unavailable"] and "ib_counter_deltas" not in facts
    assert facts["fabric"]["fabric_manager_process"] is None
    assert "counters" in facts["ib_ports"]["devices"][0]["ports"][0]
    light = hardware_facts(tmp_path, detail=False)
    assert "counters" not in light["ib_ports"]["devices"][0]["ports"][0]
    assert light["topology"] == facts["topology"] and light["pci"] == facts["pci"]


def test_hardware_facts_are_bounded_by_the_timeout(tmp_path, monkeypatch):
    """A hung nvidia-smi is killed when the time is up, not left behind."""
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\nexec sleep 120\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    start = time.monotonic()
    facts = hardware_facts(timeout=1.0)
    assert time.monotonic() - start < 30
    topo = facts["topology"]
    assert "did not finish within" in topo.get("unavailable", topo.get("nvidia_smi", ""))
    assert not [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", "30"]
                and p.ppid() == os.getpid()]
