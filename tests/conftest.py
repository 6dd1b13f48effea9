import os
import subprocess
import sys

import pytest


def run_cli(*args: str, env: dict | None = None, timeout: float = 60, input: str | None = None):
    """Run `python -m nccl_doctor ARGS` in a subprocess; returns CompletedProcess (text)."""
    full_env = {**os.environ, **(env or {})}
    full_env.pop("NCCL_DOCTOR_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "nccl_doctor", *args], capture_output=True, text=True,
                          timeout=timeout, env=full_env, input=input)


@pytest.fixture
def cli():
    return run_cli
