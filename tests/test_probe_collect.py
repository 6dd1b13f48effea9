"""collect(): every section present, JSON-able, isolated and bounded; host, limits, GPUs (fake NVML), the hardware
section. The IB reader has its own tests (test_probe_infiniband.py)."""

from __future__ import annotations

import json
import resource
import sys
import time
import types

from nccl_doctor import probe
from nccl_doctor.probe import gpus, hardware, host, limits

SECTIONS = {"host", "software", "gpus", "network", "infiniband", "limits", "environment", "hardware"}


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
        time.sleep(120)

    monkeypatch.setitem(probe.SECTIONS, "gpus", boom)
    monkeypatch.setitem(probe.SECTIONS, "infiniband", hang)
    start = time.monotonic()
    facts = probe.collect({}, timeout=1.0)
    assert time.monotonic() - start < 30
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


def test_hardware_section_is_light_and_leaves_ib_ports_to_the_infiniband_section():
    facts = probe.collect({})
    hw = facts["hardware"]
    assert set(hw) == {"topology", "gpu_health", "fabric", "pci", "xid"}
    assert len(json.dumps(hw)) < 20_000
    assert "devices" in facts["infiniband"]


def test_hardware_waits_for_the_infiniband_section_only_so_long(monkeypatch):
    def hang(env):
        time.sleep(120)

    monkeypatch.setitem(probe.SECTIONS, "infiniband", hang)
    start = time.monotonic()
    facts = probe.collect({}, timeout=2.0)
    assert time.monotonic() - start < 30
    assert "did not finish" in facts["infiniband"]["unavailable"]
    assert "topology" in facts["hardware"]  # read without the IB facts


def test_the_hardware_section_gets_what_is_left_of_the_deadline(monkeypatch):
    seen = {}

    def record(env, ib, seconds):
        seen.update(ib=ib, seconds=seconds)
        return {}

    monkeypatch.setitem(probe.DERIVED, "hardware", (record, "infiniband"))
    probe.collect({}, timeout=3.0)
    assert "devices" in seen["ib"] and 0 < seen["seconds"] <= 3.0 - probe.SUBPROCESS_MARGIN_S
    assert hardware.Budget(None).left(7) == 7 and 0.05 <= hardware.Budget(0.2).left(7) <= 0.2
