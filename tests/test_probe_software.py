"""NCCL library discovery and version reading (fake libnccl.so built with cc), torch facts without importing torch."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from nccl_doctor.probe import software
from nccl_doctor.probe.software import decode_version, library_versions, nccl_facts

CC = shutil.which("cc") or shutil.which("gcc")
needs_cc = pytest.mark.skipif(CC is None, reason="no C compiler to build a fake libnccl.so")


@pytest.mark.parametrize("code, text", [(22105, "2.21.5"), (2708, "2.7.8"), (23004, "2.30.4"), (2408, "2.4.8"),
                                        (21903, "2.19.3"), (2905, "2.9.5")])
def test_decode_version(code, text):
    assert decode_version(code) == text


def build(directory: Path, name: str, body: str) -> Path:
    """A shared library whose ncclGetVersion has the given C body."""
    directory.mkdir(parents=True, exist_ok=True)
    source = directory / (name + ".c")
    source.write_text("#include <signal.h>\n#include <unistd.h>\nint ncclGetVersion(int* v) {" + body + "}\n")
    lib = directory / name
    subprocess.run([CC, "-shared", "-fPIC", "-o", str(lib), str(source)], check=True, capture_output=True, timeout=60)
    return lib


@needs_cc
def test_versions_read_from_the_libraries(tmp_path):
    good = build(tmp_path / "a", "libnccl.so.2", "*v = 22105; return 0;")
    old = build(tmp_path / "b", "libnccl.so.2.7.8", "*v = 2708; return 0;")
    failing = build(tmp_path / "c", "libnccl.so.2", "return 3;")
    crashing = build(tmp_path / "d", "libnccl.so.2", "raise(SIGSEGV); return 0;")
    garbage = tmp_path / "e" / "libnccl.so.2"
    garbage.parent.mkdir()
    garbage.write_text("not a library")
    results = library_versions([str(p) for p in (good, old, failing, crashing, garbage)])
    assert results[str(good)] == {"version": "2.21.5", "version_code": 22105}
    assert results[str(old)]["version"] == "2.7.8"
    assert "ncclGetVersion returned 3" in results[str(failing)]["unavailable"]
    assert "crashed" in results[str(crashing)]["unavailable"]
    assert "OSError" in results[str(garbage)]["unavailable"]


@needs_cc
def test_a_hanging_library_is_bounded(tmp_path):
    hang = build(tmp_path, "libnccl.so.2", "sleep(60); return 0;")
    result = library_versions([str(hang)], timeout=1.0)[str(hang)]
    assert "more than 1 s" in result["unavailable"]


@needs_cc
def test_discovery_and_what_torch_loads(tmp_path, monkeypatch):
    monkeypatch.setattr(software, "SYSTEM_GLOBS", ())
    monkeypatch.setattr(software, "ldconfig_libraries", lambda: [])
    system = build(tmp_path / "opt" / "nccl" / "lib", "libnccl.so.2", "*v = 21803; return 0;")
    os.symlink(system, system.parent / "libnccl.so")
    torch_dir = tmp_path / "site" / "torch"
    bundled = build(torch_dir / "lib", "libnccl.so.2", "*v = 22105; return 0;")
    torch = {"version": "2.5.1+cu124", "cuda": "12.4", "location": str(torch_dir)}
    env = {"LD_LIBRARY_PATH": f"{system.parent}:/nonexistent"}
    facts = nccl_facts(env, torch, wheels=[])
    by_path = {lib["path"]: lib for lib in facts["libraries"]}
    assert by_path[str(system)]["found_via"] == ["LD_LIBRARY_PATH"] and by_path[str(system)]["version"] == "2.18.3"
    assert by_path[str(system.parent / "libnccl.so")]["realpath"] == str(system)
    assert by_path[str(bundled)]["found_via"] == ["torch/lib"] and by_path[str(bundled)]["version"] == "2.21.5"
    # LD_LIBRARY_PATH beats torch's RUNPATH: the system NCCL shadows the bundled one
    assert facts["loaded_version"] == "2.18.3" and "LD_LIBRARY_PATH" in facts["loaded_how"]
    facts = nccl_facts({}, torch, wheels=[])
    assert facts["loaded_version"] == "2.21.5" and facts["loaded_from"] == str(bundled)


def test_cpu_torch_and_no_torch(monkeypatch):
    facts = nccl_facts({}, {"version": "2.13.0+cpu", "cuda": None, "hip": None}, wheels=[])
    assert facts["loaded_version"] is None and "CPU build" in facts["loaded_unavailable"]
    monkeypatch.setattr(software.importlib.util, "find_spec", lambda name: None)
    assert "not installed" in software.torch_facts()["unavailable"]


def test_torch_facts_without_importing_torch():
    if software._torch_dir() is None:
        pytest.skip("torch is not installed")
    facts = software.torch_facts()
    text = (Path(facts["location"]) / "version.py").read_text()
    assert f"'{facts['version']}'" in text or f'"{facts["version"]}"' in text
    if not facts["cuda"] and not facts["hip"]:
        assert "CPU build" in facts["nccl_built_with_unavailable"]


def test_ldconfig_cache_is_parsed(monkeypatch):
    out = ("3 libs found in cache `/etc/ld.so.cache'\n"
           "\tlibnccl.so.2 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libnccl.so.2\n"
           "\tlibnccl.so (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libnccl.so\n"
           "\tlibnccl-net.so (libc6,x86-64) => /usr/lib/libnccl-net.so\n")
    monkeypatch.setattr(software.subprocess, "run",
                        lambda *a, **k: subprocess.CompletedProcess(a, 0, stdout=out, stderr=""))
    assert software.ldconfig_libraries() == ["/usr/lib/x86_64-linux-gnu/libnccl.so.2",
                                             "/usr/lib/x86_64-linux-gnu/libnccl.so"]


def test_software_probe_shape():
    facts = software.probe({})
    assert set(facts) == {"python", "torch", "nccl_wheels", "nccl", "ld_library_path"}
    assert isinstance(facts["nccl"].get("libraries", []), list)
