"""What every lint rule looks at: the settings (environment plus NCCL config files, with where each came from)
and convenient views of the host facts that `probe.collect()` returned.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache, cached_property
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from ..catalog import read_text
from ..catalog.env_vars import version_tuple
from ..model import Evidence
from ..redact import redact
from ..probe.infiniband import port_usable


@dataclass(frozen=True)
class Setting:
    """One variable as NCCL or PyTorch will see it, and where it was set."""

    name: str
    value: str
    source: str = "environment"
    line: int | None = None

    @property
    def shown(self) -> str:
        return f"{self.name}={redact(self.name, self.value)}"

    def evidence(self, note: str = "") -> Evidence:
        return Evidence(self.source, self.shown + (f"  ({note})" if note else ""), self.line)


@cache
def thresholds() -> dict[str, Any]:
    return tomllib.loads(read_text("lint_thresholds.toml"))


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


class Context:
    """The inputs of one lint run. `env` is what the process (or the --env-file) sets; `facts` is collect()."""

    def __init__(self, env: Mapping[str, str], facts: dict[str, Any]) -> None:
        self.env = env
        self.facts = facts
        self.limits = thresholds()
        where = getattr(env, "where", None)
        self.settings: dict[str, Setting] = {}
        for name, value in env.items():
            source, line = where(name) if where else ("environment", None)
            self.settings[name] = Setting(name, value, source, line)
        for conf in self.confs:  # NCCL's config files: the environment and earlier files win
            for entry in conf.get("entries", ()):
                if "name" in entry and entry["name"] not in self.settings:
                    self.settings[entry["name"]] = Setting(entry["name"], entry["value"], conf["path"], entry["line"])

    # -------------------------------------------------------------- settings

    def get(self, name: str) -> Setting | None:
        return self.settings.get(name)

    def value(self, name: str) -> str | None:
        setting = self.settings.get(name)
        return setting.value if setting else None

    def int_value(self, name: str) -> int | None:
        return _int(self.value(name))

    @cached_property
    def effective_env(self) -> SettingsEnv:
        """The settings as the name -> value mapping NCCL ends up with, for rules written over a plain env."""
        return SettingsEnv(self.settings)

    @property
    def confs(self) -> list[dict[str, Any]]:
        env_facts = self.facts.get("environment", {})
        return [c for c in env_facts.get("nccl_conf", ()) if isinstance(c, dict)]

    # -------------------------------------------------------------- facts

    def section(self, name: str) -> dict[str, Any] | None:
        """A facts section, or None when it is missing or unavailable."""
        data = self.facts.get(name)
        return data if isinstance(data, dict) and "unavailable" not in data else None

    @cached_property
    def nccl_version(self) -> tuple[int, ...] | None:
        """The NCCL this job will run: the loaded library, else the one torch was built with."""
        software = self.section("software") or {}
        nccl = software.get("nccl") or {}
        torch = software.get("torch") or {}
        return version_tuple(nccl.get("loaded_version")) or version_tuple(torch.get("nccl_built_with"))

    @property
    def nccl_version_text(self) -> str:
        return ".".join(map(str, self.nccl_version)) if self.nccl_version else "unknown"

    @property
    def interfaces(self) -> list[dict[str, Any]] | None:
        network = self.section("network")
        return network.get("interfaces") if network else None

    @cached_property
    def would_use(self) -> dict[str, dict[str, Any]]:
        """Which interfaces NCCL and Gloo would pick under these settings (probe.network.would_use)."""
        from ..probe.network import would_use

        return would_use(self.effective_env, self.section("network") or {})

    @property
    def active_ib_ports(self) -> list[tuple[str, dict[str, Any]]]:
        """(device, port) of every InfiniBand/RoCE port NCCL could use (ACTIVE, IB or Ethernet link layer)."""
        ib = self.section("infiniband") or {}
        return [(d["name"], p) for d in ib.get("devices", ()) for p in d.get("ports", ()) if port_usable(p)]

    @property
    def in_container(self) -> bool:
        host = self.section("host") or {}
        return bool((host.get("container") or {}).get("detected"))

    @property
    def physical_gpus(self) -> int | None:
        gpus = self.section("gpus")
        return gpus.get("count", len(gpus.get("devices", ()))) if gpus else None

    @cached_property
    def visible_gpus(self) -> int | None:
        """GPUs this process can use: CUDA_VISIBLE_DEVICES applied to what NVML sees (None when unknown)."""
        mask = self.value("CUDA_VISIBLE_DEVICES")
        if mask is None:
            return self.physical_gpus
        return count_visible(mask, self.physical_gpus)

    # -------------------------------------------------------------- job shape

    @property
    def world_size(self) -> int | None:
        return self.int_value("WORLD_SIZE")

    @property
    def local_world_size(self) -> int | None:
        """Ranks on this node, from the launcher's variables (torchrun, Open MPI, SLURM)."""
        for name in ("LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"):
            text = self.value(name)
            if text:
                number = _int(text.split("(")[0])  # SLURM writes "8(x2)"
                if number:
                    return number
        return None

    @property
    def nodes(self) -> int | None:
        for name in ("GROUP_WORLD_SIZE", "SLURM_NNODES", "SLURM_JOB_NUM_NODES", "PET_NNODES"):
            number = _int((self.value(name) or "").split(":")[-1] or None)
            if number:
                return number
        if self.world_size and self.local_world_size:
            return -(-self.world_size // self.local_world_size)
        return None

    @property
    def multi_node(self) -> bool | None:
        return None if self.nodes is None else self.nodes > 1

    @property
    def master_route(self) -> dict[str, Any] | None:
        network = self.section("network") or {}
        master = network.get("master") or {}
        return master.get("route")


class SettingsEnv(dict):
    """Settings as name -> value that still say where each was set (file and line), like SourcedEnv."""

    def __init__(self, settings: Mapping[str, Setting]) -> None:
        super().__init__({name: s.value for name, s in settings.items()})
        self.settings = settings

    def where(self, name: str) -> tuple[str, int | None]:
        found = self.settings[name]
        return found.source, found.line


def count_visible(mask: str, physical: int | None) -> int:
    """How many devices CUDA exposes for CUDA_VISIBLE_DEVICES: it stops at the first invalid entry."""
    count = 0
    seen: set[str] = set()
    for entry in mask.split(","):
        entry = entry.strip()
        if entry.lstrip("-").isdigit():
            index = int(entry)
            if index < 0 or (physical is not None and index >= physical) or entry in seen:
                break
        elif not entry.startswith(("GPU-", "MIG-")):
            break
        seen.add(entry)
        count += 1
    return count
