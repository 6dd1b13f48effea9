"""`nccl-doctor bench --local N`: real rank processes with Gloo on this CPU, through the CLI."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest

pytest.importorskip("torch.distributed")

SCHEMA = json.loads((Path(__file__).parents[1] / "src/nccl_doctor/render/report.schema.json").read_text())
ALL = ["all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "all_to_all", "sendrecv"]
ROW = re.compile(r"^\s+(\d+)\s+(\d+)\s+float\s+(sum|none)\s+(-?\d+)(\s+(N/A|[\d.]+)){8}$")


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """One real run: every collective, 4 ranks, checked, plus the link matrix between ranks, JSON and HTML."""
    from conftest import run_cli

    html = tmp_path_factory.mktemp("bench") / "report.html"
    done = run_cli("bench", "--local", "4", "-b", "1K", "-e", "64K", "-n", "3", "-w", "1", "--matrix-ranks",
                   "--matrix-bytes", "256K", "--timeout", "30", "--html", str(html), "all", "--json", timeout=240)
    assert done.returncode in (0, 1), done.stderr[-3000:]
    return json.loads(done.stdout), html


def test_every_collective_runs_and_every_result_is_right(sweep):
    report, _ = sweep
    jsonschema.validate(report, SCHEMA)
    assert report["command"] == "bench"
    rows = report["facts"]["sweep"]["rows"]
    assert [r["collective"] for r in rows] == sorted([c for c in ALL for _ in range(7)], key=ALL.index)
    for r in rows:
        cells = [r[layout] for layout in ("out-of-place", "in-place") if r[layout]]
        assert cells and all(c["wrong"] == 0 and c["time_us"] > 0 and len(c["rank_us"]) == 4 for c in cells), r
        assert all(c["time_us"] == max(c["rank_us"]) for c in cells)  # the slowest rank, not rank 0
    stages = {s["name"]: s["status"] for s in report["facts"]["stages"]}
    assert stages["sweep"] == "passed" and stages["matrix"] == "passed"
    assert not [f for f in report["findings"] if f["category"] == "hardware_fault" and f["severity"] == "error"]


def test_link_matrix_between_ranks_of_one_host(sweep):
    report, _ = sweep
    matrix = report["facts"]["matrix"]
    assert matrix["scope"] == "ranks" and matrix["rounds"] == 3 and len(matrix["links"]) == 6
    assert all(link["ab_Bps"] > 0 and link["ba_Bps"] > 0 and link["latency_us"] > 0 for link in matrix["links"])


def test_html_report_is_written(sweep):
    _, html = sweep
    page = html.read_text()
    assert page.count('class="chart"') == 7 and 'class="heatmap"' in page and "Per-rank timings" in page


def test_text_output_speaks_nccl_tests(cli):
    done = cli("bench", "all_reduce", "all_gather", "--local", "2", "-b", "1K", "-e", "4K", "-n", "2", "-w", "1",
               timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout.splitlines()
    assert "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw" \
           "   busbw #wrong" in out
    rows = [line for line in out if ROW.match(line)]
    assert len(rows) == 6 and all(ROW.match(line).group(2) for line in rows)
    assert rows[0].split()[:5] == ["1024", "256", "float", "sum", "-1"]
    assert "N/A" in rows[0]  # all_reduce exists in place only
    assert rows[3].split()[:5] == ["1024", "128", "float", "none", "-1"]  # all_gather: count per rank
    assert out.count("# Out of bounds values : 0 OK") == 2
    assert sum(line.startswith("# Avg bus bandwidth") for line in out) == 2
    assert "Sweep (nccl-tests sizes)" in done.stderr  # stage lines on stderr


@pytest.mark.parametrize("args,ranks", [(["-d", "half", "-o", "avg"], 3),
                                        (["-d", "int32", "-o", "prod", "-r", "1"], 2)])
def test_datatypes_reductions_and_roots_check_exactly(cli, args, ranks):
    done = cli("bench", "all_reduce", "reduce", "reduce_scatter", "--local", str(ranks), "-b", "256", "-e", "2K",
               "-n", "2", "-w", "1", *args, "--json", timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(done.stdout)["facts"]["sweep"]["rows"]
    assert rows and all(r[l]["wrong"] == 0 for r in rows for l in ("out-of-place", "in-place") if r[l])
    assert {r["type"] for r in rows} == {args[1]} and {r["redop"] for r in rows} == {args[3]}
    assert {r["root"] for r in rows if r["collective"] == "reduce"} == {int(args[5]) if len(args) > 4 else 0}


@pytest.mark.parametrize("stage,args,where", [
    ("sweep", ["all_reduce", "-b", "1K", "-e", "1K", "-n", "2"], "all_reduce at 1024 B"),
    ("matrix", ["--matrix-ranks", "--matrix-bytes", "64K", "--matrix-time", "0.05"], "never entered the link matrix"),
])
def test_stalled_rank_is_named_within_the_deadline(cli, stage, args, where):
    started = time.monotonic()
    done = cli("bench", "--local", "3", *args, "--timeout", "10", "--json",
               env={"NCCL_DOCTOR_FAULT": f"stall:rank=1:stage={stage}"}, timeout=90)
    assert done.returncode == 1 and time.monotonic() - started < 60, done.stderr[-2000:]
    report = json.loads(done.stdout)
    first = [f for f in report["findings"] if f["severity"] == "error"][0]
    assert first["cause"] == "rank-hang" and first["ranks"] == [1], first
    assert where in first["message"], first["message"]


@pytest.mark.parametrize("args,words", [
    (["-b", "1M", "-e", "1K"], "invalid sizes: --minbytes 1048576 is above --maxbytes 1024"),
    (["-d", "int32", "-o", "avg"], "-o avg needs a floating-point -d"),
    (["--root", "5"], "--root 5 is not a rank of this job of 2 ranks"),
    (["-b", "12Q"], "'12Q' is not a size"),
    (["bogus_op"], "'bogus_op' is not one of"),
    (["--html", "/nonexistent/dir/x.html"], "does not exist"),
    (["-b", "0", "-e", "0"], "nothing to measure"),
    (["-b", "2", "-e", "3"], "nothing to measure"),
    (["--local", "0"], "at least one rank"),
])
def test_bad_arguments_give_one_line_and_exit_2(cli, args, words):
    done = cli("bench", "--local", "2", *args, timeout=60)
    assert done.returncode == 2 and words in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_rows_stream_as_measured_and_ctrl_c_keeps_them():
    """Rank 1 stalls before the third size: the first two rows are on stdout while the run still waits; Ctrl-C
    then ends it with what was measured, exit 130."""
    env = {**os.environ, "NCCL_DOCTOR_FAULT": "stall:rank=1:stage=sweep:op=sweep.all_reduce.4096"}
    env.pop("NCCL_DOCTOR_DEBUG", None)
    proc = subprocess.Popen([sys.executable, "-m", "nccl_doctor", "bench", "all_reduce", "--local", "2", "-b", "1K",
                             "-e", "64K", "-n", "2", "-w", "1", "--timeout", "120"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        rows = []
        for line in proc.stdout:
            if ROW.match(line.rstrip("\n")):
                rows.append(line)
            if len(rows) == 2:
                break
        assert len(rows) == 2 and proc.poll() is None  # printed while the stalled size still waits
        proc.send_signal(signal.SIGINT)
        rest, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130 and "Traceback" not in err, err[-2000:]
    assert "# interrupted: 2 sizes measured" in rest
    assert not [line for line in rest.splitlines() if ROW.match(line)]  # the rows are not printed twice


def test_matrix_on_one_host_says_why_on_stdout(cli):
    done = cli("bench", "--matrix", "--local", "2", "--timeout", "30", timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Link matrix (round robin): not measured: one host" in done.stdout
