import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest


def test_explain_prints_cause(cli):
    r = cli("explain", "shm-too-small")
    assert r.returncode == 0
    assert "--shm-size" in r.stdout and "shm_too_small" in r.stdout


def test_explain_list_and_json(cli):
    r = cli("explain", "--list")
    assert r.returncode == 0 and "duplicate-gpu" in r.stdout
    data = json.loads(cli("explain", "duplicate-gpu", "--json").stdout)
    assert data["category"] == "device_binding"


def test_unknown_cause_suggests(cli):
    r = cli("explain", "socket-ifname")
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "did you mean socket-ifname-no-match" in r.stderr
    assert "Traceback" not in r.stderr


def test_unknown_command_and_flag_are_one_line(cli):
    for args in (["no-such-command"], ["explain", "--no-such-flag"]):
        r = cli(*args)
        assert r.returncode == 2, args
        assert r.stderr.count("\n") == 1 and r.stderr.startswith("nccl-doctor: error:"), r.stderr


def test_version_and_help(cli):
    assert cli("--version").returncode == 0
    r = cli("--help")
    assert r.returncode == 0 and "explain" in r.stdout


@pytest.mark.parametrize("sig, code, word", [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")])
def test_ctrl_c_and_sigterm_end_a_command_in_one_line(sig, code, word):
    """`logs -` waits on its input: both signals end it the same clean way; SIGTERM with the conventional 143."""
    proc = subprocess.Popen([sys.executable, "-m", "nccl_doctor", "logs", "-"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdin.write("[rank0]: starting\n")
    proc.stdin.flush()
    deadline = time.monotonic() + 30
    while not _reads_stdin(proc.pid) and time.monotonic() < deadline:  # signalled during start-up, it would die
        time.sleep(0.1)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == code, (proc.returncode, err)
    assert err.strip().splitlines()[-1] == f"nccl-doctor: {word}" and "Traceback" not in err


def _reads_stdin(pid: int) -> bool:
    """The process sleeps in a read of its stdin pipe (Linux: its wait channel), so its handlers are installed."""
    try:
        return "pipe" in Path(f"/proc/{pid}/wchan").read_text()
    except OSError:
        return False
