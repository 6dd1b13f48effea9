"""GPUs as NVML sees them (nvidia-ml-py): model, UUID, PCI bus id, memory, driver and CUDA driver version.

NVML lists every GPU of the host whatever CUDA_VISIBLE_DEVICES says; rules apply that mask themselves.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
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


class NvmlUnavailable(Exception):
    """NVML cannot start here; str() is the fact's `unavailable` text."""


@contextmanager
def nvml_session(nvml: Any) -> Iterator[Any]:
    """NVML initialised for the block and shut down after it. The one place that opens NVML, for `env`/`lint`
    (below) and for `topo`'s health readings (probe/gpu_health.py)."""
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        raise NvmlUnavailable(f"NVML: {exc} (no NVIDIA driver, or not visible here)") from None
    try:
        yield nvml
    finally:
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError:
            pass


def probe(env: Mapping[str, str]) -> dict[str, Any]:
    try:
        import pynvml as nvml
    except ImportError:
        return {"unavailable": "nvidia-ml-py (pynvml) is not installed"}
    try:
        with nvml_session(nvml):
            count = nvml.nvmlDeviceGetCount()
            return {
                "driver_version": _text(nvml.nvmlSystemGetDriverVersion()),
                "cuda_driver_version": cuda_version(nvml.nvmlSystemGetCudaDriverVersion()),
                "count": count,
                "devices": [device_facts(nvml, i) for i in range(count)],
            }
    except NvmlUnavailable as exc:
        return {"unavailable": str(exc)}
    except nvml.NVMLError as exc:
        return {"unavailable": f"NVML: {exc}"}
