"""`nccl-doctor check --local N`: real rank processes with Gloo, real faults (NCCL_DOCTOR_FAULT, --rank-env).

Each run must end within its deadline plus a few seconds, name the right cause and rank, and leave
no process and no bound port behind.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import jsonschema
import psutil
import pytest

pytest.importorskip("torch.distributed")

SCHEMA = json.loads((Path(__file__).parents[1] / "src/nccl_doctor/render/report.schema.json").read_text())
TIMEOUT = 6  # stage deadline for these runs: short, yet generous for a loaded 2-core machine
SLACK = 20  # start-up of N Python processes importing torch on 2 shared cores, plus teardown


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def leftovers(tag: str) -> list[int]:
    """Processes still carrying this run's tag in their environment."""
    found = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if proc.environ().get("NCCL_DOCTOR_TEST_TAG") == tag:
                found.append(proc.pid)
        except (psutil.Error, OSError):
            continue
    return found


def port_is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("0.0.0.0", port))
            return True
        except OSError:
            return False


def check(*args: str, fault: str | None = None, timeout: float = TIMEOUT, limit: float | None = None,
          env: dict[str, str] | None = None) -> tuple[dict, float]:
    """Run check --local with JSON output; assert it ended in time and cleaned up after itself."""
    tag, port = uuid.uuid4().hex, free_port()
    env = {**os.environ, **(env or {}), "NCCL_DOCTOR_TEST_TAG": tag}
    env.pop("NCCL_DOCTOR_DEBUG", None)
    if fault:
        env["NCCL_DOCTOR_FAULT"] = fault
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "nccl_doctor", "check", "--json", "--timeout", str(timeout),
                           "--master-port", str(port), *args], capture_output=True, text=True, env=env,
                          timeout=(limit or 0) + timeout * 3 + SLACK)
    took = time.monotonic() - started
    assert "Traceback" not in done.stderr, done.stderr
    report = json.loads(done.stdout)
    jsonschema.validate(report, SCHEMA)
    assert done.returncode == (1 if report["verdict"] == "error" else 0)
    assert leftovers(tag) == [], "rank processes left behind"
    assert port_is_free(port), "store port still bound"
    return report, took


def stages(report: dict) -> dict[str, str]:
    return {s["name"]: s["status"] for s in report["facts"]["stages"]}


def test_healthy_run_passes_every_stage():
    report, _ = check("--local", "3")
    assert report["verdict"] in ("ok", "warning"), report["findings"]
    assert stages(report) == {"rendezvous": "passed", "fingerprints": "passed", "devices": "skipped",
                              "network": "passed", "backend": "passed", "collectives": "passed",
                              "bandwidth": "passed"}
    assert [c["op"] for c in report["facts"]["collectives"]] == [
        "barrier", "all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "all_to_all", "sendrecv"]
    assert report["facts"]["world"]["backend"] == "gloo" and len(report["facts"]["ranks"]) == 3


def test_stalled_rank_is_named_within_the_op_deadline():
    report, took = check("--local", "3", "--quick", fault="stall:rank=2:stage=collectives:op=all_reduce")
    first = report["findings"][0]
    assert (first["cause"], first["ranks"]) == ("rank-hang", [2]) and "never entered all_reduce" in first["message"]
    assert first["secondary"][0]["ranks"] == [0, 1]  # they entered and waited: echoes
    collectives = next(s for s in report["facts"]["stages"] if s["name"] == "collectives")
    assert collectives["status"] == "failed" and collectives["seconds"] < TIMEOUT + 5
    assert took < TIMEOUT + SLACK


def test_rank_dying_in_a_collective_is_named():
    report, _ = check("--local", "3", "--quick", fault="die:rank=1:op=broadcast")
    first = report["findings"][0]
    assert (first["cause"], first["ranks"]) == ("rank-died", [1])
    assert "broadcast" in first["message"] and "SIGKILL" in first["message"]
    assert stages(report)["collectives"] == "failed"


def test_frozen_rank_is_told_from_a_dead_one():
    report, took = check("--local", "3", "--quick", fault="freeze:rank=1:stage=collectives:op=all_reduce")
    first = report["findings"][0]
    assert (first["cause"], first["ranks"]) == ("rank-frozen", [1]), first
    assert "all_reduce" in first["message"] and "stopped" in first["message"]
    assert any("kill -CONT" in step for step in first["fix"]) and "py-spy dump" in first["fix"][0]
    assert first["secondary"][0]["ranks"] == [0, 2]  # they wait for it in the all_reduce: echoes
    assert took < TIMEOUT + SLACK


def test_one_bad_setting_on_six_ranks_is_one_finding():
    report, _ = check("--local", "6", "--quick", env={"GLOO_SOCKET_IFNAME": "eth9"})
    [found] = [f for f in report["findings"] if f["severity"] != "info"]
    assert (found["cause"], found["ranks"]) == ("gloo-ifname-no-match", [0, 1, 2, 3, 4, 5])
    assert "ranks 0-5" in found["message"] and len(found["hosts"]) == 1
    assert not [f for f in report["findings"] if f["cause"] == "debug-logging-off"]  # Gloo: NCCL is not used


def test_local_ranks_that_cannot_start_in_time_get_advice_about_local_and_timeout():
    """Rank r takes r x 10 s more to start (as many ranks on few CPUs do): those past the deadline (5 + 15 s)
    are named, with the measured start times and advice about --local and --timeout, not about the launcher."""
    report, _ = check("--local", "4", "--quick", fault="stagger:stage=start:seconds=10", timeout=5, limit=25)
    first = report["findings"][0]
    assert (first["cause"], first["ranks"]) == ("local-start-slow", [2, 3]), first
    assert "still starting after 20 s" in first["message"] and "the 2 that joined took" in first["message"]
    assert "--local" in first["fix"][0] and "--timeout" in first["fix"][0]
    assert "--nnodes" not in json.dumps(first)


def test_local_rank_stuck_before_joining_is_told_from_a_slow_start():
    report, _ = check("--local", "3", "--quick", fault="stall:rank=2:stage=start", timeout=2, limit=15)
    first = report["findings"][0]
    assert (first["cause"], first["ranks"]) == ("rank-hang", [2]) and "stuck before joining" in first["message"]
    assert "py-spy dump --pid" in first["fix"][0]


def test_local_needs_at_least_one_rank(cli):
    done = cli("check", "--local", "0", timeout=30)
    assert done.returncode == 2 and "at least one rank" in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_rank_that_never_starts():
    report, took = check("--local", "3", "--quick", fault="skip:rank=2")
    first = report["findings"][0]
    assert (first["cause"], first["ranks"]) == ("store-timeout", [2])
    assert stages(report)["rendezvous"] == "failed" and stages(report)["collectives"] == "skipped"


def test_settings_and_versions_that_differ_are_named_before_backend_init(tmp_path):
    fake = tmp_path / "site"
    dist_info = fake / "nvidia_nccl_cu12-2.18.1.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: nvidia-nccl-cu12\nVersion: 2.18.1\n")
    report, _ = check("--local", "4", "--quick", "--rank-env", "1:NCCL_PROTO=LL", "--rank-env", f"2:PYTHONPATH={fake}",
                      "--rank-env", "3:GLOO_SOCKET_IFNAME=nosuch0")
    by_cause = {f["cause"]: f for f in report["findings"]}
    assert by_cause["nccl-setting-differs"]["ranks"] == [1] and "NCCL_PROTO" in by_cause["nccl-setting-differs"]["message"]
    assert by_cause["nccl-version-mismatch"]["ranks"] == [2] and "2.18.1" in by_cause["nccl-version-mismatch"]["message"]
    assert by_cause["gloo-ifname-no-match"]["ranks"] == [3]
    assert stages(report)["fingerprints"] == "failed" and stages(report)["backend"] == "skipped"


def test_master_port_in_use():
    with socket.socket() as holder:
        holder.bind(("0.0.0.0", 0))
        holder.listen()
        port = holder.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "nccl_doctor", "check", "--local", "2", "--json",
                               "--master-port", str(port)], capture_output=True, text=True, timeout=60)
    report = json.loads(done.stdout)
    assert done.returncode == 1 and report["findings"][0]["cause"] == "port-in-use"
    assert f"pid {os.getpid()}" in json.dumps(report["findings"][0]["evidence"])


def test_rank_that_cannot_reach_the_store_says_why():
    report, _ = check("--local", "2", "--quick", "--rank-env", f"1:MASTER_PORT={free_port()}", timeout=3)
    first = report["findings"][0]
    assert (first["cause"], first["ranks"]) == ("master-unreachable", [1])
    assert "connection refused" in first["message"]


def terminal_screen(raw: bytes) -> list[str]:
    """What a terminal shows of `raw`: a carriage return and erase-line wipes the line being written."""
    shown = []
    for line in raw.decode(errors="replace").replace("\r\n", "\n").split("\n"):
        shown.append(line.split("\r\x1b[2K")[-1])
    return shown


def test_each_stage_is_shown_once_on_a_terminal():
    import pty

    primary, secondary = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "nccl_doctor", "check", "--local", "2", "--timeout", str(TIMEOUT),
                             "--master-port", str(free_port())], stdout=secondary, stderr=secondary,
                            stdin=subprocess.DEVNULL, env={**os.environ, "COLUMNS": "200"})
    os.close(secondary)
    raw = b""
    while True:
        try:
            chunk = os.read(primary, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        raw += chunk
    assert proc.wait(timeout=120) == 0, raw.decode(errors="replace")[-2000:]
    os.close(primary)
    screen = terminal_screen(raw)
    for title in ("Rendezvous", "Fingerprints (versions, settings)", "Collectives (verified results)",
                  "Bandwidth sample"):
        assert sum(title in line for line in screen) == 1, (title, screen)
    assert "no problems found" in screen[-2] or "no problems found" in "\n".join(screen)


def _stalled_local_check(tag: str, port: int) -> subprocess.Popen:
    """check --local 2 whose rank 1 stalls for good, once the parent and both ranks are up."""
    env = {**os.environ, "NCCL_DOCTOR_TEST_TAG": tag, "NCCL_DOCTOR_FAULT": "stall:rank=1:stage=collectives"}
    proc = subprocess.Popen([sys.executable, "-m", "nccl_doctor", "check", "--local", "2", "--timeout", "120",
                             "--master-port", str(port)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 120  # starting three interpreters with torch takes long on a loaded machine
    while len(leftovers(tag)) < 3 and time.monotonic() < deadline:  # parent and both ranks are up
        time.sleep(0.2)
    time.sleep(2)
    return proc


@pytest.mark.parametrize("sig, code, word", [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")])
def test_stalled_rank_and_ctrl_c_or_sigterm_reap_everything(sig, code, word):
    """Ctrl-C or SIGTERM to the --local parent while a rank stalls: every child is reaped, the port freed."""
    tag, port = uuid.uuid4().hex, free_port()
    proc = _stalled_local_check(tag, port)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == code and f"nccl-doctor: {word}" in err and "Traceback" not in err, err
    assert leftovers(tag) == [] and port_is_free(port)


def test_ranks_end_themselves_when_the_local_parent_is_killed():
    """SIGKILL leaves the parent no chance to reap: each rank sees its lifeline pipe close and ends itself, long
    before its own deadlines (120 s) would have ended it. bench/ is where the seconds are measured, not here."""
    tag, port = uuid.uuid4().hex, free_port()
    proc = _stalled_local_check(tag, port)
    assert len(leftovers(tag)) == 3
    proc.kill()
    proc.communicate(timeout=30)
    deadline = time.monotonic() + 60
    while leftovers(tag) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert leftovers(tag) == []


def test_check_under_torchrun_names_a_dead_rank():
    tag = uuid.uuid4().hex
    env = {**os.environ, "NCCL_DOCTOR_TEST_TAG": tag, "NCCL_DOCTOR_FAULT": "die:rank=2:op=all_gather"}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "3",
                           "--master-port", str(free_port()), "-m", "nccl_doctor", "check", "--quick", "--json",
                           "--timeout", str(TIMEOUT)], capture_output=True, text=True, env=env, timeout=90)
    report = json.loads(done.stdout)
    first = report["findings"][0]
    assert (first["cause"], first["ranks"]) == ("rank-died", [2]) and "all_gather" in first["message"]
    assert report["facts"]["world"]["launcher"] == "torchrun"
    assert done.returncode != 0 and leftovers(tag) == []
