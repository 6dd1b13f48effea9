"""This host: name, OS, kernel, CPUs and whether we run inside a container (and which)."""

from __future__ import annotations

import os
import platform
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

CGROUP_MARKERS = ("docker", "kubepods", "libpod", "containerd", "lxc")
RUNTIME_WORDS = (("kubernetes", ("kubernetes", "kubepods")), ("podman", ("containerenv", "podman", "libpod")),
                 ("docker", ("docker",)), ("lxc", ("lxc",)))


def _read(path: str, limit: int = 65536) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read(limit)
    except OSError:
        return ""


def os_name() -> str:
    fields = dict(line.split("=", 1) for line in _read("/etc/os-release").splitlines() if "=" in line)
    return fields.get("PRETTY_NAME", "").strip('"') or f"{platform.system()} {platform.release()}"


def container(env: Mapping[str, str]) -> dict[str, Any]:
    """Container markers: /.dockerenv, /run/.containerenv, Kubernetes service env, cgroup paths of PID 1."""
    markers = []
    if Path("/.dockerenv").exists():
        markers.append("/.dockerenv")
    if Path("/run/.containerenv").exists():
        markers.append("/run/.containerenv")
    if env.get("KUBERNETES_SERVICE_HOST"):
        markers.append("KUBERNETES_SERVICE_HOST")
    if Path("/var/run/secrets/kubernetes.io/serviceaccount").exists():
        markers.append("/var/run/secrets/kubernetes.io")
    if env.get("container"):
        markers.append(f"container={env['container']}")
    cgroup = _read("/proc/1/cgroup")
    markers += [f"cgroup:{word}" for word in CGROUP_MARKERS if word in cgroup]
    text = " ".join(markers).lower()
    runtime = next((name for name, words in RUNTIME_WORDS if any(w in text for w in words)),
                   "container" if markers else None)
    return {"detected": bool(markers), "runtime": runtime, "markers": markers}


def probe(env: Mapping[str, str]) -> dict[str, Any]:
    uname = platform.uname()
    return {
        "hostname": socket.gethostname(),
        "os": os_name(),
        "kernel": uname.release,
        "arch": uname.machine,
        "cpu_count": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "uid": os.getuid(),
        "container": container(env),
    }
