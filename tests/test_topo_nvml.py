"""NVML readers driven by a fake NVML (no GPU here), and their bounded failure modes."""

from __future__ import annotations

import threading

import pynvml
import pytest

from nccl_doctor.probe import gpu_health, nvlink
from nccl_doctor.probe.hardware import hardware_facts
from test_topo_fakes import FakeNVML, hgx_gpu, two_socket_node


def test_reads_every_health_field():
    nvml = FakeNVML([hgx_gpu(0, reasons=0x1 | 0x40, temp=86, pcie=(4, 5, 8, 16),
                             ecc={(pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC): 2},
                             remap=(1, 2, 1, 0))])
    health = gpu_health.read_gpu_health(nvml)
    assert nvml.shut_down and health["driver"] == "550.54.15"
    g = health["gpus"][0]
    assert g["name"] == "NVIDIA H100 80GB HBM3" and g["bus_id"] == "0000:18:00.0"
    assert g["throttle"] == ["GpuIdle", "HwThermalSlowdown"] and g["temperature_c"] == 86 and g["slowdown_temp_c"] == 87
    assert g["ecc"] == {"volatile_uncorrected": 2, "aggregate_uncorrected": 0, "volatile_corrected": 0}
    assert g["remapped_rows"] == {"correctable": 1, "uncorrectable": 2, "pending": True, "failure": False}
    assert g["retired_pages"] is None  # Hopper remaps rows; page retirement answers NOT_SUPPORTED
    assert g["pcie"] == {"gen": 4, "max_gen": 5, "width": 8, "max_width": 16}
    assert len(g["nvlink"]) == 18 and g["nvlink"][0] == {"link": 0, "active": True, "remote_bus_id": None,
                                                         "remote_type": "switch"}
    assert g["fabric"] == {"state": "completed", "status": 0}


def test_gpu_without_optional_features_gives_nones():
    health = gpu_health.read_gpu_health(FakeNVML([{"name": "Tesla T4", "bus_id": "00000000:3B:00.0"}]))
    g = health["gpus"][0]
    assert g["temperature_c"] is None and g["nvlink"] == [] and g["fabric"] is None and g["throttle"] == []


def test_retired_pages_on_pre_ampere_gpus():
    retired = {"pending": 1, pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR: [0x1000, 0x2000],
               pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS: []}
    g = gpu_health.read_gpu_health(FakeNVML([{"bus_id": "0:1:0.0", "retired": retired}]))["gpus"][0]
    assert g["retired_pages"] == {"double_bit": 2, "single_bit": 0, "pending": True}


def test_p2p_status_per_pair():
    nvml = FakeNVML([hgx_gpu(i) for i in range(3)], p2p={(0, 2): pynvml.NVML_P2P_STATUS_GPU_NOT_SUPPORTED})
    assert gpu_health.read_gpu_health(nvml)["p2p"] == {"0-1": "OK", "0-2": "GPU_NOT_SUPPORTED", "1-2": "OK"}


def test_no_driver_degrades_to_unavailable():
    health = gpu_health.read_gpu_health(FakeNVML([], init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED))
    assert health == {"unavailable": "NVML: Driver Not Loaded (no NVIDIA driver, or not visible here)"}


def test_real_pynvml_without_a_gpu_is_unavailable():
    assert gpu_health.read_gpu_health()["unavailable"].startswith("NVML: ")


def test_a_hung_driver_is_bounded():
    release = threading.Event()
    try:
        health = gpu_health.read_gpu_health(FakeNVML([], hang=release), timeout=0.2)
    finally:
        release.set()
    assert "did not answer within 0.2 s" in health["unavailable"]


def test_nvlink_pairs_direct_and_through_switches():
    direct = [
        {"index": 0, "bus_id": "0000:1a:00.0", "nvlink": [
            {"link": 0, "active": True, "remote_bus_id": "0000:1b:00.0", "remote_type": "gpu"},
            {"link": 1, "active": True, "remote_bus_id": "0000:1b:00.0", "remote_type": "gpu"},
            {"link": 2, "active": False, "remote_bus_id": None, "remote_type": None}]},
        {"index": 1, "bus_id": "0000:1b:00.0", "nvlink": [
            {"link": 0, "active": True, "remote_bus_id": "0000:1a:00.0", "remote_type": "gpu"},
            {"link": 1, "active": True, "remote_bus_id": "0000:1a:00.0", "remote_type": "gpu"}]},
    ]
    assert nvlink.nvlink_pairs(direct) == {("GPU0", "GPU1"): 2, ("GPU1", "GPU0"): 2}
    health = gpu_health.read_gpu_health(FakeNVML([hgx_gpu(0), hgx_gpu(1, down=(3, 4))]))
    assert nvlink.nvlink_pairs(health["gpus"]) == {("GPU0", "GPU1"): 16, ("GPU1", "GPU0"): 16}


@pytest.mark.parametrize("raw, expected", [
    (b"00000000:3B:00.0", "0000:3b:00.0"), ("0000:86:00", "0000:86:00.0"), ("0001:0a:1f.3", "0001:0a:1f.3"),
    ("nonsense", None), (None, None),
])
def test_bus_ids_are_normalized_to_sysfs_form(raw, expected):
    assert gpu_health.normalize_bus_id(raw) == expected


def test_injected_nvml_adds_nvlink_to_the_sysfs_matrix(tmp_path):
    two_socket_node(tmp_path)
    links = [(1, "00000000:05:00.0", pynvml.NVML_NVLINK_DEVICE_TYPE_GPU)] * 4
    back = [(1, "00000000:03:00.0", pynvml.NVML_NVLINK_DEVICE_TYPE_GPU)] * 4
    nvml = FakeNVML([{"bus_id": "00000000:03:00.0", "links": links}, {"bus_id": "00000000:05:00.0", "links": back},
                     {"bus_id": "00000000:81:00.0"}])
    facts = hardware_facts(tmp_path, nvml=nvml)
    assert facts["topology"]["matrix"]["GPU0"]["GPU1"] == "NV4"
    assert facts["topology"]["matrix"]["GPU0"]["GPU2"] == "SYS"
