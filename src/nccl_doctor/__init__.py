"""nccl-doctor: finds out why a distributed PyTorch job's communication fails.

Inside a training script: `nccl_doctor.preflight()`, `nccl_doctor.watch()`, `nccl_doctor.phase("eval")`,
`nccl_doctor.step()`. They are loaded on first use, so importing nccl_doctor never imports torch.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_LAZY = {"preflight": "runtime.preflight", "PreflightFailed": "runtime.preflight", "watch": "runtime.watch",
         "phase": "runtime.progress", "step": "runtime.progress"}
__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'nccl_doctor' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f".{_LAZY[name]}", __name__), name)
    globals()[name] = value
    return value
