"""Commands that run ranks say in one line that torch is missing (exit 2), instead of failing inside."""

from __future__ import annotations

import subprocess
import sys

import pytest

HIDE_TORCH = """
import importlib.abc, importlib.util, sys
_find_spec = importlib.util.find_spec
importlib.util.find_spec = lambda name, *a: None if name.split(".")[0] == "torch" else _find_spec(name, *a)
class HideTorch(importlib.abc.MetaPathFinder):  # and any import of it fails, as where it is not installed
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"No module named {name!r}")
sys.meta_path.insert(0, HideTorch())
from nccl_doctor.cli import run
sys.exit(run(sys.argv[1:]))
"""


@pytest.mark.parametrize("args", [["check", "--local", "2"], ["bench", "--local", "2"],
                                  ["watch", "--store", "127.0.0.1:1"]])
def test_a_command_that_needs_torch_says_so_in_one_line(args):
    r = subprocess.run([sys.executable, "-c", HIDE_TORCH, *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and "install PyTorch" in r.stderr and args[0] in r.stderr, r.stderr


def test_commands_that_do_not_need_torch_still_run_without_it():
    r = subprocess.run([sys.executable, "-c", HIDE_TORCH, "explain", "rank-hang"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
