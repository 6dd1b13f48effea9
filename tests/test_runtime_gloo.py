"""preflight() and watch() for real: local Gloo ranks running a small DDP training loop.

Detection is configured small (3-4 s) and the process-group timeout large (120 s), so a hang is
named far below the timeout. Each test bounds its processes' lifetime and reaps them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "runtime"))

from ranks import TRAIN_LOOP, Ranks, final_report, findings  # noqa: E402

PREFLIGHT_JOB = str(TRAIN_LOOP.parent / "preflight_job.py")
PG_TIMEOUT = 120.0


def causes(found: list[dict]) -> list[tuple[str, tuple[int, ...]]]:
    return [(f["cause"], tuple(f["ranks"])) for f in found]


def test_healthy_run_passes_preflight_and_watch_reports_nothing():
    with Ranks([str(TRAIN_LOOP), "--scenario", "healthy", "--steps", "40", "--eval-every", "10", "--preflight",
                "--pg-timeout", str(PG_TIMEOUT)], 4) as job:
        codes = job.wait(120)
        lines = job.lines(0)
        assert codes == [0, 0, 0, 0], job.text(0, "err")[-2000:]
    preflight = next(line["preflight"] for line in lines if "preflight" in line)
    assert preflight["verdict"] != "error"
    assert [s["status"] for s in preflight["facts"]["stages"]] == ["passed", "passed", "skipped", "passed"]
    assert findings(lines) == []
    report = final_report(lines)
    assert report["findings"] == [] and report["facts"]["never_seen"] == []
    assert report["facts"]["timeout"]["pg_timeout_s"] == PG_TIMEOUT


def test_watch_names_the_rank_that_slows_down_after_resume():
    with Ranks([str(TRAIN_LOOP), "--scenario", "straggler", "--steps", "45", "--culprit", "2",
                "--pg-timeout", str(PG_TIMEOUT)], 4) as job:
        codes = job.wait(150)
        lines = job.lines(0)
        assert codes == [0, 0, 0, 0], job.text(0, "err")[-2000:]
    live = findings(lines)
    assert causes(live) == [("straggler-rank", (2,))], live
    # Whether the lag is still rising when it is named depends on when the polls fall (load moves them): the
    # trend wording is tested on made-up arrivals in test_runtime_detect.py.
    assert "reaches collectives" in live[0]["message"], live[0]
    assert causes(final_report(lines)["findings"]) == [("straggler-rank", (2,))]


def test_watch_names_the_hung_rank_with_its_stack_far_below_the_timeout():
    hang_after = 3.0
    with Ranks([str(TRAIN_LOOP), "--scenario", "hang", "--culprit", "1", "--hang-after", str(hang_after),
                "--pg-timeout", str(PG_TIMEOUT)], 4) as job:
        lines = job.wait_for(lambda ls: any("finding" in line for line in ls), timeout=90)
        stopped = [line for line in job.lines(1) if "stopped" in line]
    live = [line for line in lines if "finding" in line]
    assert live and stopped, lines
    hang = live[0]["finding"]
    assert (hang["cause"], hang["ranks"], hang["severity"]) == ("rank-hang", [1], "error"), hang
    stack = [e["text"] for e in hang["evidence"] if "stack" in e["source"]]
    assert any("wait_for_a_lock_that_never_comes" in line for line in stack), stack
    assert "phase 'train'" in hang["message"] and "wait in collective" in hang["message"]
    detected_after = live[0]["at"] - stopped[0]["at"]
    assert hang_after <= detected_after < PG_TIMEOUT / 4, detected_after  # far below the timeout, with room for load


def test_nccl_doctor_watch_cli_detects_from_outside_the_job(cli):
    with Ranks([str(TRAIN_LOOP), "--scenario", "hang", "--culprit", "3", "--hang-after", "3", "--external",
                "--pg-timeout", str(PG_TIMEOUT)], 4) as job:
        done = cli("watch", "--store", f"127.0.0.1:{job.port}", "--stop-on-error", "--json", "--wait", "60",
                   timeout=120)
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert report["command"] == "watch" and report["verdict"] == "error"
    assert causes(report["findings"])[0] == ("rank-hang", (3,))


def test_watch_cli_rejects_a_bad_address_in_one_line(cli):
    done = cli("watch", "--store", "no-port-here")
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "HOST:PORT" in done.stderr
    done = cli("watch", "--store", "127.0.0.1:1", "--wait", "0.5")
    assert done.returncode == 2 and "cannot reach the store" in done.stderr and "Traceback" not in done.stderr


def _preflight(args: list[str], count: int = 2, **kw) -> list[dict]:
    with Ranks([PREFLIGHT_JOB, *args], count, **kw) as job:
        codes = job.wait(90)
        out = [job.lines(r) for r in range(count)]
        assert codes == [0] * count, job.text(0, "err")[-2000:]
    return [lines[-1] for lines in out]


def test_preflight_before_init_process_group_leaves_the_job_free_to_start():
    results = _preflight(["--when", "before"])
    for r in results:
        assert (r["verdict"], r["raised"], r["job_sum"]) != ("error", True, None)
        assert r["job_sum"] == 2.0 and r["seconds"] < 10 + 20  # its 10 s timeout, and room for load
        assert [s["name"] for s in r["stages"]] == ["rendezvous", "fingerprints", "devices", "all_reduce"]


def test_preflight_fails_fast_on_every_rank_with_the_report():
    results = _preflight(["--when", "after"], count=3, rank_env={2: {"NCCL_SOCKET_IFNAME": "nosuch0"}})
    for r in results:
        assert r["raised"] and r["verdict"] == "error", r
        assert r["job_sum"] == 3.0  # the exception is the script's to handle; the job itself still works


def test_preflight_names_the_rank_that_never_calls_it():
    results = _preflight(["--when", "before", "--timeout", "3", "--on-failure", "warn", "--absent", "1"],
                         env={"NCCL_DOCTOR_PORT": str(__import__("ranks").free_port())})
    rank0 = results[0]
    assert rank0["verdict"] == "error" and not rank0["raised"]
    assert rank0["causes"][0] == "store-timeout" and rank0["seconds"] < 40  # bounded: a few 3 s stage deadlines


def test_preflight_and_watch_in_a_plain_python_script_without_a_launcher():
    """The README's calls, in a script debugged alone (`python train.py`): a world of one, never an exception."""
    import os
    import subprocess

    script = ("import json, nccl_doctor\n"
              "report = nccl_doctor.preflight(timeout=20)\n"
              "with nccl_doctor.watch() as w:\n"
              "    for step in range(3):\n"
              "        nccl_doctor.step(step)\n"
              "print(json.dumps({'verdict': report.verdict, 'stages': report.facts['stages'],\n"
              "                  'watch': w.stop().verdict}))\n")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RANK", "WORLD_SIZE", "LOCAL_", "MASTER_", "TORCHELASTIC_", "GROUP_RANK", "SLURM_",
                                "OMPI_", "PMI_", "NCCL_DOCTOR_"))}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["verdict"] != "error" and result["watch"] == "ok"
    stages = {s["name"]: s["status"] for s in result["stages"]}
    assert stages["rendezvous"] == "passed" and stages["all_reduce"] == "passed"  # a world of one, verified
    assert sum("watch() outside a distributed job" in line for line in done.stderr.splitlines()) == 1
