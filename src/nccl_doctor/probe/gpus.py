"""GPUs as NVML sees them (nvidia-ml-py): model, UUID, PCI bus id, memory, driver and CUDA driver version.

NVML lists every GPU of the host whatever CUDA_VISIBLE_DEVICES says; rules apply that mask themselves.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def cuda_version(code: int) -> str:
    """NVML's CUDA driver version code 12020 -> '12.2'."""
    return f"{code // 1000}.{code % 1000 // 10}"


def device_facts(nvml: Any, index: int) -> dict[str, Any]:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    return {
        "index": index,
        "name": _text(nvml.nvmlDeviceGetName(handle)),
        "uuid": _text(nvml.nvmlDeviceGetUUID(handle)),
        "bus_id": _text(nvml.nvmlDeviceGetPciInfo(handle).busId),
        "memory_total_mib": nvml.nvmlDeviceGetMemoryInfo(handle).total // (1024 * 1024),
    }


def probe(env: Mapping[str, str]) -> dict[str, Any]:
    try:
        import pynvml as nvml
    except ImportError:
        return {"unavailable": "nvidia-ml-py (pynvml) is not installed"}
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        return {"unavailable": f"NVML: {exc} (no NVIDIA driver, or not visible here)"}
    try:
        count = nvml.nvmlDeviceGetCount()
        return {
            "driver_version": _text(nvml.nvmlSystemGetDriverVersion()),
            "cuda_driver_version": cuda_version(nvml.nvmlSystemGetCudaDriverVersion()),
            "count": count,
            "devices": [device_facts(nvml, i) for i in range(count)],
        }
    except nvml.NVMLError as exc:
        return {"unavailable": f"NVML: {exc}"}
    finally:
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError:
            pass
