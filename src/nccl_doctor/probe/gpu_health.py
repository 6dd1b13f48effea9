"""GPU health from NVML (temperature, throttle reasons, ECC, retired and remapped memory, PCIe link,
NVLink links, fabric state, peer-to-peer status) and Xid events from the kernel log.

NVML is passed in (`nvml=`, default the `pynvml` module of nvidia-ml-py) so tests drive the readers
with a fake; without a driver every reading degrades to {"unavailable": "NVML: ..."}. All NVML work
runs in a worker thread with a deadline, since NVML can block on a GPU that fell off the bus.
"""

from __future__ import annotations

import ctypes
import os
import re
import subprocess
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ..bounded import within
from .gpus import NvmlUnavailable, nvml_session
from .topology import knowledge

NVML_TIMEOUT_S = 20.0
DMESG_TIMEOUT_S = 5.0
KERNEL_LOGS = ("var/log/kern.log", "var/log/messages")
LOG_TAIL_BYTES = 8 << 20
MAX_XID_EVENTS = 100
XID = re.compile(r"NVRM: Xid \(PCI:(?P<pci>[0-9A-Fa-f:.]+)\): (?P<code>\d+)(?:, (?P<detail>.*))?")


def load_nvml() -> Any:
    import pynvml  # nvidia-ml-py; imported late so that a missing package is one fact, not a crash

    return pynvml


def query(nvml: Any, function: str, *args: Any) -> Any:
    """Call an NVML function; None when this GPU, driver or binding does not support it."""
    fn = getattr(nvml, function, None)
    if fn is None:
        return None
    try:
        return fn(*args)
    except nvml.NVMLError:
        return None


def as_text(value: Any) -> str | None:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def normalize_bus_id(bus_id: Any) -> str | None:
    """NVML '00000000:3B:00.0' (or the kernel log's '0000:3b:00') -> sysfs form '0000:3b:00.0'."""
    text = as_text(bus_id)
    m = re.fullmatch(r"(?:([0-9A-Fa-f]+):)?([0-9A-Fa-f]{1,2}):([0-9A-Fa-f]{1,2})(?:\.([0-7]))?", (text or "").strip())
    if not m:
        return None
    domain, bus, device, function = m.groups()
    return f"{int(domain or '0', 16):04x}:{int(bus, 16):02x}:{int(device, 16):02x}.{function or '0'}"


def run_bounded(work: Callable[[], dict[str, Any]], timeout: float, what: str) -> dict[str, Any]:
    """Run `work` in a daemon thread; a hung driver call leaves the thread behind, not the tool."""
    try:
        return within(timeout, work, name=what)
    except TimeoutError:
        return {"unavailable": f"{what} did not answer within {timeout:g} s "
                               "(a GPU may have fallen off the bus: check `dmesg | grep -i xid`)"}
    except Exception as exc:  # noqa: BLE001 - any driver failure is one fact
        return {"unavailable": f"{what}: {type(exc).__name__}: {exc}"}


def throttle_names(mask: int | None) -> list[str]:
    if mask is None:
        return []
    return [r["name"] for r in knowledge()["gpu"]["throttle"] if mask & r["bit"]]


def read_ecc(nvml: Any, handle: Any) -> dict[str, Any]:
    def total(error_type: int, counter_type: int) -> int | None:
        return query(nvml, "nvmlDeviceGetTotalEccErrors", handle, error_type, counter_type)

    uncorrected, corrected = nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED
    return {
        "volatile_uncorrected": total(uncorrected, nvml.NVML_VOLATILE_ECC),
        "aggregate_uncorrected": total(uncorrected, nvml.NVML_AGGREGATE_ECC),
        "volatile_corrected": total(corrected, nvml.NVML_VOLATILE_ECC),
    }


def read_retired_pages(nvml: Any, handle: Any) -> dict[str, Any] | None:
    """Page retirement (pre-Ampere); Ampere and later remap rows instead and answer NOT_SUPPORTED."""
    pending = query(nvml, "nvmlDeviceGetRetiredPagesPendingStatus", handle)
    if pending is None:
        return None
    pages = "nvmlDeviceGetRetiredPages"
    double = query(nvml, pages, handle, nvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
    single = query(nvml, pages, handle, nvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)
    return {"double_bit": len(double or []), "single_bit": len(single or []), "pending": bool(pending)}


def read_remapped_rows(nvml: Any, handle: Any) -> dict[str, Any] | None:
    rows = query(nvml, "nvmlDeviceGetRemappedRows", handle)
    if rows is None:
        return None
    correctable, uncorrectable, pending, failure = rows
    return {"correctable": correctable, "uncorrectable": uncorrectable, "pending": bool(pending),
            "failure": bool(failure)}


def read_pcie(nvml: Any, handle: Any) -> dict[str, Any]:
    return {
        "gen": query(nvml, "nvmlDeviceGetCurrPcieLinkGeneration", handle),
        "max_gen": query(nvml, "nvmlDeviceGetMaxPcieLinkGeneration", handle),  # of GPU and slot together
        "width": query(nvml, "nvmlDeviceGetCurrPcieLinkWidth", handle),
        "max_width": query(nvml, "nvmlDeviceGetMaxPcieLinkWidth", handle),
    }


def remote_type_name(nvml: Any, value: int | None) -> str | None:
    names = {getattr(nvml, f"NVML_NVLINK_DEVICE_TYPE_{n.upper()}", None): n for n in ("gpu", "switch", "ibmnpu")}
    return names.get(value, "unknown") if value is not None else None


def read_nvlinks(nvml: Any, handle: Any) -> list[dict[str, Any]]:
    """Every NVLink the GPU has (links it lacks answer NOT_SUPPORTED): active or not, and what is on
    the other end (a GPU's bus id, or an NVSwitch)."""
    links = []
    for link in range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)):
        state = query(nvml, "nvmlDeviceGetNvLinkState", handle, link)
        if state is None:
            continue
        remote = query(nvml, "nvmlDeviceGetNvLinkRemotePciInfo", handle, link) if state else None
        links.append({
            "link": link,
            "active": bool(state),
            "remote_bus_id": normalize_bus_id(getattr(remote, "busId", None)) if remote else None,
            "remote_type": remote_type_name(nvml, query(nvml, "nvmlDeviceGetNvLinkRemoteDeviceType", handle, link))
            if state else None,
        })
    return links


def read_fabric_info(nvml: Any, handle: Any) -> dict[str, Any] | None:
    """NVSwitch fabric registration (Hopper and later): state and status, None where unsupported."""
    struct_type = getattr(nvml, "c_nvmlGpuFabricInfo_t", None)
    if struct_type is None:
        return None
    info = struct_type()
    if query(nvml, "nvmlDeviceGetGpuFabricInfo", handle, ctypes.byref(info)) is None:
        return None
    states = knowledge()["fabric"]["states"]
    return {"state": states.get(str(info.state), str(info.state)), "status": int(info.status)}


def read_gpu(nvml: Any, index: int, handle: Any) -> dict[str, Any]:
    pci = query(nvml, "nvmlDeviceGetPciInfo", handle)
    reasons = query(nvml, "nvmlDeviceGetCurrentClocksEventReasons", handle)
    if reasons is None:
        reasons = query(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", handle)
    return {
        "index": index,
        "name": as_text(query(nvml, "nvmlDeviceGetName", handle)),
        "bus_id": normalize_bus_id(getattr(pci, "busId", None)),
        "uuid": as_text(query(nvml, "nvmlDeviceGetUUID", handle)),
        "temperature_c": query(nvml, "nvmlDeviceGetTemperature", handle, nvml.NVML_TEMPERATURE_GPU),
        "slowdown_temp_c": query(nvml, "nvmlDeviceGetTemperatureThreshold", handle,
                                 nvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN),
        "clock_event_reasons": reasons,
        "throttle": throttle_names(reasons),
        "ecc": read_ecc(nvml, handle),
        "retired_pages": read_retired_pages(nvml, handle),
        "remapped_rows": read_remapped_rows(nvml, handle),
        "pcie": read_pcie(nvml, handle),
        "nvlink": read_nvlinks(nvml, handle),
        "fabric": read_fabric_info(nvml, handle),
    }


P2P_STATUSES = ("OK", "CHIPSET_NOT_SUPPORTED", "GPU_NOT_SUPPORTED", "IOH_TOPOLOGY_NOT_SUPPORTED",
                "DISABLED_BY_REGKEY", "NOT_SUPPORTED", "UNKNOWN")


def p2p_status_names(nvml: Any) -> dict[int, str]:
    return {value: name for name in P2P_STATUSES
            if isinstance(value := getattr(nvml, f"NVML_P2P_STATUS_{name}", None), int)}


def read_p2p(nvml: Any, handles: list[Any]) -> dict[str, str]:
    """Peer-to-peer read capability for every GPU pair, as NVML reports it ('OK', 'NOT_SUPPORTED', ...)."""
    names = p2p_status_names(nvml)
    status = {}
    for i, a in enumerate(handles):
        for j in range(i + 1, len(handles)):
            value = query(nvml, "nvmlDeviceGetP2PStatus", a, handles[j], nvml.NVML_P2P_CAPS_INDEX_READ)
            if value is not None:
                status[f"{i}-{j}"] = names.get(value, str(value))
    return status


def read_with_nvml(nvml: Any) -> dict[str, Any]:
    try:
        with nvml_session(nvml):
            count = nvml.nvmlDeviceGetCount()
            handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            return {
                "driver": as_text(query(nvml, "nvmlSystemGetDriverVersion")),
                "gpus": [read_gpu(nvml, i, h) for i, h in enumerate(handles)],
                "p2p": read_p2p(nvml, handles),
            }
    except NvmlUnavailable as exc:
        return {"unavailable": str(exc)}


def read_gpu_health(nvml: Any = None, timeout: float = NVML_TIMEOUT_S) -> dict[str, Any]:
    """Health of every GPU NVML sees; {"unavailable": "NVML: ..."} without driver or library."""
    if nvml is None:
        try:
            nvml = load_nvml()
        except ImportError:
            return {"unavailable": "NVML: nvidia-ml-py is not installed (pip install nvidia-ml-py)"}
    return run_bounded(lambda: read_with_nvml(nvml), timeout, "NVML")


# ---------------------------------------------------------------- Xid events

def parse_xid_events(lines: Iterable[str], source: str) -> list[dict[str, Any]]:
    """'NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the bus.' -> events."""
    events = []
    for number, line in enumerate(lines, 1):
        if m := XID.search(line):
            events.append({"source": source, "line": number, "bus_id": normalize_bus_id(m["pci"]),
                           "xid": int(m["code"]), "text": line.strip()[:300]})
    return events[-MAX_XID_EVENTS:]


def read_dmesg(timeout: float = DMESG_TIMEOUT_S) -> list[str] | str:
    """Kernel ring buffer lines, or why it cannot be read (kernel.dmesg_restrict, no dmesg)."""
    try:
        proc = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, errors="replace")
    except FileNotFoundError:
        return "dmesg not installed"
    except subprocess.TimeoutExpired:
        return f"dmesg did not finish within {timeout:g} s"
    except OSError as exc:
        return f"dmesg: {exc.strerror}"
    if proc.returncode != 0:
        return "dmesg: " + (proc.stderr.strip().splitlines() or ["failed"])[0]
    return proc.stdout.splitlines()


def read_log_tail(path: Path, limit: int = LOG_TAIL_BYTES) -> list[str] | None:
    try:
        with path.open("rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - limit))
            return f.read().decode(errors="replace").splitlines()
    except OSError:
        return None


def read_xid_events(root: str | os.PathLike[str] = "/", live: bool = True,
                    timeout: float = DMESG_TIMEOUT_S) -> dict[str, Any]:
    """Xid events from dmesg (this boot; live host only) or else the syslog kernel log under ROOT."""
    why = []
    if live:
        lines = read_dmesg(timeout)
        if isinstance(lines, list):
            return {"source": "dmesg", "since_boot": True, "events": parse_xid_events(lines, "dmesg")}
        why.append(lines)
    for name in KERNEL_LOGS:
        path = Path(root, name)
        lines = read_log_tail(path)
        if lines is not None:
            return {"source": str(path), "since_boot": False, "events": parse_xid_events(lines, str(path))}
    why.append("no readable " + " or ".join(str(Path(root, n)) for n in KERNEL_LOGS))
    return {"unavailable": "; ".join(why)}
