"""Software facts: Python, torch and its CUDA build, the NCCL torch was built with and loads, every libnccl.so*.

torch is never imported here (that takes seconds and may initialise CUDA). Its version and CUDA build come from
torch/version.py read as text, the NCCL it was built against from torch.cuda.nccl.version() only when torch is
already imported in this process (else from the nvidia-nccl wheel torch's metadata pins). Every libnccl.so*
reachable from torch's lib dir, the nvidia-nccl-cu* wheels, LD_LIBRARY_PATH, the ldconfig cache and the usual
system directories has its real version read from the library itself by calling ncclGetVersion through ctypes,
in a short-lived subprocess per library with a deadline: a broken library, or two NCCLs, can never crash or
hang this process. ncclGetVersion needs no GPU.
"""

from __future__ import annotations

import ast
import glob
import importlib.metadata as metadata
import importlib.util
import os
import platform
import re
import subprocess
import sys
import time
from collections.abc import Mapping
from typing import Any

NCCL_WHEELS = ("nvidia-nccl-cu11", "nvidia-nccl-cu12", "nvidia-nccl-cu13", "nvidia-nccl")
SYSTEM_GLOBS = (
    "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib",
    "/usr/local/nccl*/lib", "/usr/local/cuda*/lib64", "/usr/local/cuda*/targets/*/lib", "/opt/nccl*/lib",
    "/opt/nccl*/build/lib", "/opt/hpcx/nccl*/lib", "/opt/amazon/*/lib",
)
LIB_PATTERN = "libnccl.so*"
VERSION_TIMEOUT_S = 5.0
LDCONFIG_TIMEOUT_S = 2.0

# Run as `python -I -S -c VERSION_SCRIPT LIB`: prints "<ncclResult> <version code>".
VERSION_SCRIPT = (
    "import ctypes,sys\n"
    "lib=ctypes.CDLL(sys.argv[1],mode=ctypes.RTLD_LOCAL)\n"
    "v=ctypes.c_int(0)\n"
    "rc=lib.ncclGetVersion(ctypes.byref(v))\n"
    "print(rc,v.value)\n"
)


def decode_version(code: int) -> str:
    """ncclGetVersion's code -> '2.21.5' (major*10000+minor*100+patch since 2.9, major*1000+minor*100+patch before)."""
    if code >= 10000:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


# ------------------------------------------------------------------ python and torch

def python_facts() -> dict[str, Any]:
    return {"version": platform.python_version(), "implementation": platform.python_implementation(),
            "executable": sys.executable}


def _torch_dir() -> str | None:
    spec = importlib.util.find_spec("torch")  # locates the package without importing it
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def _version_py(torch_dir: str) -> dict[str, Any]:
    """The constants of torch/version.py (__version__, cuda, hip, git_version), parsed, not executed."""
    with open(os.path.join(torch_dir, "version.py"), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    values: dict[str, Any] = {}
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else \
            node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(target, ast.Name) and getattr(node, "value", None) is not None:
            try:
                values[target.id] = ast.literal_eval(node.value)
            except ValueError:
                pass
    return values


def _nccl_requirement() -> str | None:
    """The nvidia-nccl wheel torch's metadata pins, e.g. 'nvidia-nccl-cu12==2.21.5'."""
    try:
        requires = metadata.requires("torch") or []
    except metadata.PackageNotFoundError:
        return None
    for req in requires:
        if req.lower().startswith("nvidia-nccl"):
            return req.split(";")[0].strip()
    return None


def _built_with_from_runtime() -> str | None:
    """torch.cuda.nccl.version() (the NCCL headers torch was compiled with), only if torch is already imported."""
    torch = sys.modules.get("torch")
    if torch is None or not getattr(getattr(torch, "version", None), "cuda", None):
        return None
    try:
        import torch.cuda.nccl as tnccl
        version = tnccl.version()
    except Exception:  # a broken or CPU-only torch: just no answer
        return None
    return ".".join(map(str, version)) if isinstance(version, tuple) else decode_version(int(version))


def torch_facts() -> dict[str, Any]:
    torch_dir = _torch_dir()
    if torch_dir is None:
        return {"unavailable": "torch is not installed in this Python"}
    consts = _version_py(torch_dir)
    facts: dict[str, Any] = {
        "version": consts.get("__version__"),
        "cuda": consts.get("cuda"),
        "hip": consts.get("hip"),
        "git_version": consts.get("git_version"),
        "location": torch_dir,
        "imported": "torch" in sys.modules,
    }
    requirement = _nccl_requirement()
    built_with = _built_with_from_runtime()
    if built_with:
        facts["nccl_built_with"], facts["nccl_built_with_source"] = built_with, "torch.cuda.nccl.version()"
    elif requirement and "==" in requirement:
        facts["nccl_built_with"] = requirement.split("==", 1)[1].strip()
        facts["nccl_built_with_source"] = f"wheel metadata pins {requirement}"
    elif not facts["cuda"] and not facts["hip"]:
        facts["nccl_built_with_unavailable"] = f"torch {facts['version']} is a CPU build without NCCL"
    else:
        facts["nccl_built_with_unavailable"] = \
            "torch is not imported in this process and its metadata pins no nvidia-nccl wheel"
    return facts


# ------------------------------------------------------------------ NCCL wheels and libraries

def nccl_wheels() -> list[dict[str, Any]]:
    wheels = []
    for name in NCCL_WHEELS:
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        libs = [str(dist.locate_file(f)) for f in (dist.files or ()) if "libnccl.so" in f.name]
        wheels.append({"name": name, "version": dist.version, "libraries": sorted(libs)})
    return wheels


def ldconfig_libraries(timeout: float = LDCONFIG_TIMEOUT_S) -> list[str]:
    """libnccl entries of the dynamic loader cache (`ldconfig -p`)."""
    for exe in ("/sbin/ldconfig", "/usr/sbin/ldconfig", "ldconfig"):
        try:
            out = subprocess.run([exe, "-p"], capture_output=True, text=True, timeout=timeout,
                                 stdin=subprocess.DEVNULL).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        return [m.group(1) for m in re.finditer(r"libnccl\.so[^\s]*\s.*=>\s*(\S+)", out)]
    return []


def _dir_libs(directory: str) -> list[str]:
    return sorted(p for p in glob.glob(os.path.join(directory, LIB_PATTERN)) if os.path.isfile(p))


def candidate_libraries(env: Mapping[str, str], torch: dict[str, Any], wheels: list[dict]) -> dict[str, list[str]]:
    """Every libnccl.so* file we can find -> how it was found (several roads may lead to one file)."""
    found: dict[str, list[str]] = {}

    def add(path: str, via: str) -> None:
        if via not in found.setdefault(path, []):
            found[path].append(via)

    for path in env.get("LD_PRELOAD", "").replace(":", " ").split():
        if "libnccl" in os.path.basename(path) and os.path.isfile(path):
            add(path, "LD_PRELOAD")
    for directory in filter(None, env.get("LD_LIBRARY_PATH", "").split(":")):
        for path in _dir_libs(directory):
            add(path, "LD_LIBRARY_PATH")
    if torch.get("location"):
        for path in _dir_libs(os.path.join(torch["location"], "lib")):
            add(path, "torch/lib")
    for wheel in wheels:
        for path in wheel["libraries"]:
            add(path, f"pip:{wheel['name']}")
    for path in ldconfig_libraries():
        add(path, "ldconfig")
    prefixes = {sys.prefix, env.get("CONDA_PREFIX", "")}
    for pattern in (*SYSTEM_GLOBS, *(os.path.join(p, "lib") for p in prefixes if p)):
        for directory in glob.glob(pattern):
            for path in _dir_libs(directory):
                add(path, "system")
    return found


def library_versions(paths: list[str], timeout: float = VERSION_TIMEOUT_S) -> dict[str, dict[str, Any]]:
    """The version of each library, by ncclGetVersion in parallel subprocesses sharing one deadline."""
    procs = {}
    for path in paths:
        try:
            procs[path] = subprocess.Popen([sys.executable, "-I", "-S", "-c", VERSION_SCRIPT, path],
                                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                           stderr=subprocess.PIPE, text=True)
        except OSError as exc:
            procs[path] = exc
    deadline = time.monotonic() + timeout
    results: dict[str, dict[str, Any]] = {}
    for path, proc in procs.items():
        if isinstance(proc, OSError):
            results[path] = {"unavailable": f"cannot start the probe: {proc}"}
            continue
        try:
            out, err = proc.communicate(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            results[path] = {"unavailable": f"loading it took more than {timeout:g} s"}
            continue
        results[path] = _parse_version_output(proc.returncode, out, err)
    return results


def _parse_version_output(returncode: int, out: str, err: str) -> dict[str, Any]:
    fields = out.split()
    if returncode == 0 and len(fields) == 2 and fields[0] == "0":
        code = int(fields[1])
        return {"version": decode_version(code), "version_code": code}
    if returncode < 0:
        return {"unavailable": f"loading it crashed (signal {-returncode})"}
    last = (err.strip().splitlines() or [f"exit code {returncode}"])[-1]
    if fields and fields[0] != "0":
        last = f"ncclGetVersion returned {fields[0]}"
    return {"unavailable": last[:300]}


def mapped_libnccl() -> str | None:
    """The libnccl already mapped into this process (torch imported and NCCL loaded), from /proc/self/maps."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            for line in f:
                path = line.split()[-1] if line.strip() else ""
                if "/libnccl.so" in path:
                    return path
    except OSError:
        return None
    return None


def loaded_library(torch: dict[str, Any], found: dict[str, list[str]]) -> tuple[str | None, str]:
    """The libnccl torch loads, and how we know: mapped in this process, or the loader's search order predicted.

    The loader looks in LD_PRELOAD, then LD_LIBRARY_PATH (which beats torch's RUNPATH), then torch/lib and the
    nvidia-nccl wheel that torch's RUNPATH points to, then the ldconfig cache.
    """
    mapped = mapped_libnccl()
    if mapped:
        return mapped, "mapped in this process"
    cuda_major = str(torch.get("cuda") or "").split(".")[0]
    for road in ("LD_PRELOAD", "LD_LIBRARY_PATH", "torch/lib", f"pip:nvidia-nccl-cu{cuda_major}", "pip:", "ldconfig"):
        for path, vias in found.items():
            if any(v.startswith(road) for v in vias) and os.path.basename(path) == "libnccl.so.2":  # the soname
                return path, f"predicted: first libnccl.so.2 on the loader's path for torch ({road.rstrip(':')})"
    return None, "no libnccl.so.2 on the loader's path for torch"


def nccl_facts(env: Mapping[str, str], torch: dict[str, Any], wheels: list[dict]) -> dict[str, Any]:
    found = candidate_libraries(env, torch, wheels)
    real = {path: os.path.realpath(path) for path in found}
    versions = library_versions(sorted(set(real.values())))
    libraries = [{"path": path, "realpath": real[path], "found_via": vias, **versions[real[path]]}
                 for path, vias in found.items()]
    facts: dict[str, Any] = {"libraries": libraries}
    if "unavailable" in torch:
        facts["loaded_version"] = None
        facts["loaded_unavailable"] = "torch is not installed"
    elif not torch.get("cuda") and not torch.get("hip"):
        facts["loaded_version"] = None
        facts["loaded_unavailable"] = f"torch {torch.get('version')} is a CPU build: it loads no NCCL"
    else:
        path, how = loaded_library(torch, found)
        version = versions.get(os.path.realpath(path), {}) if path else {}
        if path and path not in real:
            version = library_versions([path])[path]
        facts["loaded_version"] = version.get("version")
        facts["loaded_from"] = path
        facts["loaded_how"] = how
        if not facts["loaded_version"]:
            facts["loaded_unavailable"] = version.get("unavailable", how)
    return facts


def probe(env: Mapping[str, str]) -> dict[str, Any]:
    torch = _isolated(torch_facts)
    wheels = nccl_wheels()
    return {
        "python": python_facts(),
        "torch": torch,
        "nccl_wheels": wheels,
        "nccl": _isolated(lambda: nccl_facts(env, torch, wheels)),
        "ld_library_path": [d for d in env.get("LD_LIBRARY_PATH", "").split(":") if d],
    }


def _isolated(fn: Any) -> dict[str, Any]:
    try:
        return fn()
    except Exception as exc:  # one failing part must not take the others down
        return {"unavailable": f"{type(exc).__name__}: {exc}"}
