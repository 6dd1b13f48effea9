"""OS limits NCCL runs into: open files (ulimit -n), locked memory (ulimit -l), /dev/shm size and free space."""

from __future__ import annotations

import os
import resource
from collections.abc import Mapping
from typing import Any

UNLIMITED = "unlimited"


def _limit(value: int) -> int | str:
    return UNLIMITED if value == resource.RLIM_INFINITY else value


def rlimit(which: int) -> dict[str, int | str]:
    soft, hard = resource.getrlimit(which)
    return {"soft": _limit(soft), "hard": _limit(hard)}


def shm(path: str = "/dev/shm") -> dict[str, Any]:
    try:
        st = os.statvfs(path)
    except OSError as exc:
        return {"path": path, "unavailable": f"cannot stat {path}: {exc.strerror or exc}"}
    return {"path": path, "total_bytes": st.f_blocks * st.f_frsize, "free_bytes": st.f_bavail * st.f_frsize}


def probe(env: Mapping[str, str]) -> dict[str, Any]:
    return {
        "nofile": rlimit(resource.RLIMIT_NOFILE),
        "memlock": rlimit(resource.RLIMIT_MEMLOCK),  # bytes, not the kB that `ulimit -l` prints
        "nproc": rlimit(resource.RLIMIT_NPROC),
        "shm": shm(),
    }
