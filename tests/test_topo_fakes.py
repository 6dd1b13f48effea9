"""Fakes for the topology/health tests: a sysfs tree builder and an NVML stand-in (no tests here)."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml

FIXTURES = Path(__file__).parent / "fixtures" / "topo"
SMI = FIXTURES / "smi"


class FakeHost:
    """Builds ROOT/sys/devices/pciDDDD:BB/<bridges>/<function> with sys/bus/pci/devices links, RDMA
    devices under sys/class/infiniband, /dev nodes and kernel logs, as the kernel lays them out."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "sys" / "bus" / "pci" / "devices").mkdir(parents=True, exist_ok=True)

    def write(self, path: Path, text: str | bytes) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text) if isinstance(text, bytes) else path.write_text(text)

    def pci(self, *chain: str, host: str = "pci0000:00", vendor: str = "0x8086", cls: str = "0x060400",
            numa: int = 0, speed: str = "16.0 GT/s PCIe", width: int = 16, max_speed: str | None = None,
            max_width: int | None = None, iommu: str | None = None, cpus: str = "0-15") -> Path:
        """Create the function at the end of `chain` (bridges before it must exist or are made bare)."""
        path = self.root / "sys" / "devices" / host
        for bdf in chain:
            path = path / bdf
            path.mkdir(parents=True, exist_ok=True)
            link = self.root / "sys" / "bus" / "pci" / "devices" / bdf
            if not link.is_symlink():
                os.symlink(path, link)
        attrs = {"vendor": vendor, "class": cls, "numa_node": str(numa), "local_cpulist": cpus,
                 "current_link_speed": speed, "current_link_width": str(width),
                 "max_link_speed": max_speed or speed, "max_link_width": str(max_width or width)}
        for name, value in attrs.items():
            self.write(path / name, value + "\n")
        if iommu:
            group = self.root / "sys" / "kernel" / "iommu_groups" / chain[-1].replace(":", "_")
            self.write(group / "type", iommu + "\n")
            os.symlink(group, path / "iommu_group")
        return path

    def gpu(self, *chain: str, **kw: Any) -> Path:
        return self.pci(*chain, vendor="0x10de", cls="0x030200", **kw)

    def acs(self, bdf: str, control: int) -> None:
        """A 4 KiB config space with an ACS extended capability at 0x100 (as root sees it)."""
        config = bytearray(4096)
        config[0x100:0x104] = (0x000D | 1 << 16).to_bytes(4, "little")  # id ACS, version 1, next 0
        config[0x106:0x108] = control.to_bytes(2, "little")
        self.write(self.root / "sys" / "bus" / "pci" / "devices" / bdf / "config", bytes(config))

    def rdma(self, name: str, bdf: str, ports: dict[int, dict[str, Any]], hca_type: str = "MT4129") -> None:
        dev = self.root / "sys" / "class" / "infiniband" / name
        dev.mkdir(parents=True, exist_ok=True)
        os.symlink(self.root / "sys" / "bus" / "pci" / "devices" / bdf, dev / "device")
        self.write(dev / "hca_type", hca_type + "\n")
        self.write(dev / "fw_ver", "28.39.1002\n")
        for num, spec in ports.items():
            self.port(name, num, **spec)

    def port(self, dev: str, num: int, state: str = "4: ACTIVE", phys: str = "5: LinkUp",
             rate: str = "400 Gb/sec (4X NDR)", layer: str = "InfiniBand", gids: dict[int, tuple] | None = None,
             counters: dict[str, int] | None = None, hw_counters: dict[str, int] | None = None) -> None:
        port = self.root / "sys" / "class" / "infiniband" / dev / "ports" / str(num)
        for name, value in {"state": state, "phys_state": phys, "rate": rate, "link_layer": layer,
                            "lid": "0x1a", "sm_lid": "0x1"}.items():
            self.write(port / name, value + "\n")
        for index in range(4):
            self.write(port / "gids" / str(index), "0000:0000:0000:0000:0000:0000:0000:0000\n")
        for index, (gid, kind, ndev) in (gids or {}).items():
            self.write(port / "gids" / str(index), gid + "\n")
            self.write(port / "gid_attrs" / "types" / str(index), kind + "\n")
            self.write(port / "gid_attrs" / "ndevs" / str(index), ndev + "\n")
        self.counters(dev, num, counters or {"symbol_error": 0, "link_downed": 0, "port_rcv_errors": 0},
                      hw_counters or {})

    def counters(self, dev: str, num: int, counters: dict[str, int], hw_counters: dict[str, int] | None = None) -> None:
        port = self.root / "sys" / "class" / "infiniband" / dev / "ports" / str(num)
        for folder, values in (("counters", counters), ("hw_counters", hw_counters or {})):
            for name, value in values.items():
                self.write(port / folder / name, f"{value}\n")

    def dev_infiniband(self, *names: str) -> None:
        (self.root / "dev" / "infiniband").mkdir(parents=True, exist_ok=True)
        for name in names:
            (self.root / "dev" / "infiniband" / name).touch()

    def kern_log(self, *lines: str) -> None:
        self.write(self.root / "var" / "log" / "kern.log", "\n".join(lines) + "\n")


def two_socket_node(tmp_path: Path) -> FakeHost:
    """Two sockets; socket 0: GPU0 and mlx5_0 under one PCIe switch, GPU1 on another root port;
    socket 1: GPU2 alone (its nearest NIC is on the other socket). mlx5_1 on socket 0 is RoCE."""
    host = FakeHost(tmp_path)
    host.pci("0000:00:01.0")
    host.pci("0000:00:01.0", "0000:01:00.0")                       # switch upstream port
    host.pci("0000:00:01.0", "0000:01:00.0", "0000:02:08.0")       # switch downstream ports
    host.pci("0000:00:01.0", "0000:01:00.0", "0000:02:10.0")
    host.gpu("0000:00:01.0", "0000:01:00.0", "0000:02:08.0", "0000:03:00.0", iommu="identity")
    host.pci("0000:00:01.0", "0000:01:00.0", "0000:02:10.0", "0000:04:00.0", vendor="0x15b3", cls="0x020700")
    host.pci("0000:00:02.0")
    host.gpu("0000:00:02.0", "0000:05:00.0", iommu="identity")
    host.pci("0000:00:03.0")
    host.pci("0000:00:03.0", "0000:06:00.0", vendor="0x15b3", cls="0x020000", width=8, max_width=16)
    host.pci("0000:80:01.0", host="pci0000:80", numa=1)
    host.gpu("0000:80:01.0", "0000:81:00.0", host="pci0000:80", numa=1, cpus="16-31", iommu="identity")
    host.rdma("mlx5_0", "0000:04:00.0", {1: {}})
    host.rdma("mlx5_1", "0000:06:00.0", {1: {"layer": "Ethernet", "rate": "100 Gb/sec (4X EDR)", "gids": {
        0: ("fe80:0000:0000:0000:5aa2:e1ff:feda:e626", "IB/RoCE v1", "ens1f0np0"),
        1: ("fe80:0000:0000:0000:5aa2:e1ff:feda:e626", "RoCE v2", "ens1f0np0"),
        2: ("0000:0000:0000:0000:0000:ffff:0a00:0001", "IB/RoCE v1", "ens1f0np0"),
        3: ("0000:0000:0000:0000:0000:ffff:0a00:0001", "RoCE v2", "ens1f0np0")}}}, hca_type="MT4125")
    host.dev_infiniband("uverbs0", "uverbs1", "rdma_cm")
    return host


class FakeNVML:
    """Stands in for the pynvml module: the real constants, NVMLError and structs, fake devices.

    Each GPU is a dict of readings; a missing key answers NVML_ERROR_NOT_SUPPORTED like a GPU
    without that feature.
    """

    def __init__(self, gpus: list[dict[str, Any]], init_error: int | None = None,
                 hang: threading.Event | None = None, p2p: dict[tuple[int, int], int] | None = None) -> None:
        self.gpus, self.init_error, self.hang, self.p2p = gpus, init_error, hang, p2p or {}
        self.shut_down = False

    def __getattr__(self, name: str) -> Any:
        if name.startswith(("NVML_", "NVMLError", "c_nvml")):
            return getattr(pynvml, name)
        raise AttributeError(name)

    def _get(self, handle: int, key: str) -> Any:
        value = self.gpus[handle].get(key)
        if value is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return value

    def nvmlInit(self) -> None:
        if self.hang:
            self.hang.wait(30)
        if self.init_error is not None:
            raise pynvml.NVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        self.shut_down = True

    def nvmlSystemGetDriverVersion(self) -> str:
        return "550.54.15"

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetName(self, h: int) -> bytes:
        return self._get(h, "name").encode()

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return f"GPU-{h:08d}"

    def nvmlDeviceGetPciInfo(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(busId=self._get(h, "bus_id").encode())

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        return self._get(h, "temp")

    def nvmlDeviceGetTemperatureThreshold(self, h: int, kind: int) -> int:
        assert kind == pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
        return self._get(h, "slowdown")

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: int) -> int:
        return self._get(h, "reasons")

    def nvmlDeviceGetTotalEccErrors(self, h: int, error_type: int, counter_type: int) -> int:
        return self._get(h, "ecc").get((error_type, counter_type), 0)

    def nvmlDeviceGetRemappedRows(self, h: int) -> tuple[int, int, int, int]:
        return self._get(h, "remap")

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h: int) -> int:
        return self._get(h, "retired")["pending"]

    def nvmlDeviceGetRetiredPages(self, h: int, cause: int) -> list[int]:
        return self._get(h, "retired")[cause]

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: int) -> int:
        return self._get(h, "pcie")[0]

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h: int) -> int:
        return self._get(h, "pcie")[1]

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: int) -> int:
        return self._get(h, "pcie")[2]

    def nvmlDeviceGetMaxPcieLinkWidth(self, h: int) -> int:
        return self._get(h, "pcie")[3]

    def _link(self, h: int, link: int) -> tuple[int, str | None, int]:
        links = self.gpus[h].get("links") or []
        if link >= len(links):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return links[link]

    def nvmlDeviceGetNvLinkState(self, h: int, link: int) -> int:
        return self._link(h, link)[0]

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h: int, link: int) -> SimpleNamespace:
        return SimpleNamespace(busId=(self._link(h, link)[1] or "").encode())

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, h: int, link: int) -> int:
        return self._link(h, link)[2]

    def nvmlDeviceGetGpuFabricInfo(self, h: int, ref: Any) -> int:
        state, status = self._get(h, "fabric")
        ref._obj.state, ref._obj.status = state, status
        return pynvml.NVML_SUCCESS

    def nvmlDeviceGetP2PStatus(self, a: int, b: int, index: int) -> int:
        return self.p2p.get((a, b), pynvml.NVML_P2P_STATUS_OK)


def hgx_gpu(index: int, switch_links: int = 18, down: tuple[int, ...] = (), **extra: Any) -> dict[str, Any]:
    """An HGX H100 GPU as the fake NVML shows it: links to NVSwitches, some possibly down."""
    links = [(0 if link in down else 1, None, pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH) for link in range(switch_links)]
    reading = {"name": "NVIDIA H100 80GB HBM3", "bus_id": f"00000000:{0x18 + index * 0x10:02X}:00.0", "temp": 41,
               "slowdown": 87, "reasons": 0x1, "ecc": {}, "remap": (0, 0, 0, 0), "pcie": (5, 5, 16, 16),
               "links": links, "fabric": (pynvml.NVML_GPU_FABRIC_STATE_COMPLETED, pynvml.NVML_SUCCESS)}
    return reading | extra
