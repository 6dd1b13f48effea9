"""collect(): every section present, JSON-able, isolated; host, limits, GPUs (fake NVML) and IB (fake sysfs)."""

from __future__ import annotations

import json
import resource
import sys
import time
import types

import pytest

from nccl_doctor import probe
from nccl_doctor.probe import gpus, host, infiniband, limits

SECTIONS = {"host", "software", "gpus", "network", "infiniband", "limits", "environment"}


def test_collect_has_every_section_and_is_json():
    facts = probe.collect({"NCCL_DEBUG": "INFO", "HF_TOKEN": "hf_" + "x1Y2" * 10})
    assert set(facts) == SECTIONS
    assert all(isinstance(section, dict) for section in facts.values())
    text = json.dumps(facts)
    assert "x1Y2" not in text
    assert facts["environment"]["variables"] == {"NCCL_DEBUG": "INFO"}
    assert "master" not in facts["network"]


def test_a_failing_or_hanging_probe_is_a_fact(monkeypatch):
    def boom(env):
        raise RuntimeError("boom")

    def hang(env):
        time.sleep(30)

    monkeypatch.setitem(probe.SECTIONS, "gpus", boom)
    monkeypatch.setitem(probe.SECTIONS, "infiniband", hang)
    start = time.monotonic()
    facts = probe.collect({}, timeout=1.0)
    assert time.monotonic() - start < 5
    assert facts["gpus"] == {"unavailable": "RuntimeError: boom"}
    assert "did not finish" in facts["infiniband"]["unavailable"]
    assert "interfaces" in facts["network"]


def test_host_and_container_markers():
    facts = host.probe({})
    assert facts["hostname"] and facts["kernel"] and facts["cpu_count"] >= 1
    kube = host.container({"KUBERNETES_SERVICE_HOST": "10.96.0.1"})
    assert kube["detected"] and kube["runtime"] == "kubernetes"
    assert "container=podman" in host.container({"container": "podman"})["markers"]


def test_limits_match_the_process():
    facts = limits.probe({})
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert facts["nofile"]["soft"] in (soft, "unlimited")
    assert facts["shm"].get("total_bytes", 0) >= 0
    assert "unavailable" in limits.shm("/no/such/dir")


class FakeNVML(types.SimpleNamespace):
    """Just enough of pynvml for gpus.probe: two A100s."""

    class NVMLError(Exception):
        pass

    def __init__(self, fail_init: bool = False):
        super().__init__(shutdown=0)
        self.fail_init = fail_init

    def nvmlInit(self):
        if self.fail_init:
            raise self.NVMLError("Driver Not Loaded")

    def nvmlShutdown(self):
        self.shutdown += 1

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlSystemGetDriverVersion(self):
        return "535.104.05"

    def nvmlSystemGetCudaDriverVersion(self):
        return 12020

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetName(self, h):
        return b"NVIDIA A100-SXM4-80GB"

    def nvmlDeviceGetUUID(self, h):
        return f"GPU-{h:08d}-aaaa-bbbb-cccc-dddddddddddd"

    def nvmlDeviceGetPciInfo(self, h):
        return types.SimpleNamespace(busId=f"00000000:{0x10 + h:02X}:00.0")

    def nvmlDeviceGetMemoryInfo(self, h):
        return types.SimpleNamespace(total=80 * 1024**3)


def test_gpus_through_nvml(monkeypatch):
    fake = FakeNVML()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    facts = gpus.probe({})
    assert facts["driver_version"] == "535.104.05" and facts["cuda_driver_version"] == "12.2"
    assert facts["devices"][1] == {"index": 1, "name": "NVIDIA A100-SXM4-80GB",
                                   "uuid": "GPU-00000001-aaaa-bbbb-cccc-dddddddddddd", "bus_id": "00000000:11:00.0",
                                   "memory_total_mib": 81920}
    assert fake.shutdown == 1
    monkeypatch.setitem(sys.modules, "pynvml", FakeNVML(fail_init=True))
    assert "Driver Not Loaded" in gpus.probe({})["unavailable"]


def make_sysfs(root, devices):
    for name, ports, netdev in devices:
        dev = root / name
        (dev / "ports").mkdir(parents=True)
        (dev / "fw_ver").write_text("28.39.1002\n")
        (dev / "node_type").write_text("1: CA\n")
        if netdev:
            (dev / "device" / "net" / netdev).mkdir(parents=True)
        for number, (state, phys, rate, layer) in enumerate(ports, 1):
            port = dev / "ports" / str(number)
            port.mkdir()
            (port / "state").write_text(state + "\n")
            (port / "phys_state").write_text(phys + "\n")
            (port / "rate").write_text(rate + "\n")
            (port / "link_layer").write_text(layer + "\n")
    return root


ACTIVE = ("4: ACTIVE", "5: LinkUp", "200 Gb/sec (4X HDR)", "InfiniBand")
DOWN = ("1: DOWN", "3: Disabled", "10 Gb/sec (4X SDR)", "InfiniBand")
ROCE = ("4: ACTIVE", "5: LinkUp", "100 Gb/sec (2X HDR)", "Ethernet")


def test_infiniband_from_sysfs(tmp_path):
    root = make_sysfs(tmp_path / "infiniband", [("mlx5_0", [ACTIVE], "ib0"), ("mlx5_1", [DOWN, ROCE], None),
                                                ("mlx5_10", [ACTIVE], None)])
    facts = infiniband.probe({}, sysfs=str(root))
    dev = facts["devices"][0]
    assert dev["name"] == "mlx5_0" and dev["netdevs"] == ["ib0"] and dev["fw_ver"] == "28.39.1002"
    assert dev["ports"][0] == {"port": 1, "state": "ACTIVE", "state_code": 4, "phys_state": "LinkUp",
                               "phys_state_code": 5, "rate": "200 Gb/sec (4X HDR)", "rate_gbps": 200.0,
                               "link_layer": "InfiniBand"}
    devices = facts["devices"]
    pick = lambda spec: [(p["device"], p["port"]) for p in infiniband.ib_select_ports(spec, devices)]  # noqa: E731
    assert pick(None) == [("mlx5_0", 1), ("mlx5_1", 2), ("mlx5_10", 1)]
    assert pick("mlx5_1") == [("mlx5_1", 2), ("mlx5_10", 1)]  # prefix: mlx5_1 also selects mlx5_10
    assert pick("=mlx5_1") == [("mlx5_1", 2)]
    assert pick("mlx5_1:1") == [("mlx5_10", 1)]  # port 1 of mlx5_1 is DOWN
    assert pick("^mlx5_1") == [("mlx5_0", 1)]
    assert pick("^=mlx5_1") == [("mlx5_0", 1), ("mlx5_10", 1)]
    assert pick("mlx5_2") == []


def test_no_infiniband(tmp_path):
    assert "unavailable" in infiniband.probe({}, sysfs=str(tmp_path / "none"))


@pytest.mark.parametrize("text, expected", [("4: ACTIVE", (4, "ACTIVE")), ("ACTIVE", (None, "ACTIVE")),
                                            (None, (None, None))])
def test_port_state_parsing(text, expected):
    assert infiniband._state(text) == expected
