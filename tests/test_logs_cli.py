"""`nccl-doctor logs` through the command line: exit codes, JSON contract, Markdown, text with the rank table."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema

FIXTURES = Path(__file__).parent / "fixtures" / "logs"
SCHEMA = json.loads((Path(__file__).parents[1] / "src" / "nccl_doctor" / "render" / "report.schema.json").read_text())


def test_json_contract_and_exit_code(cli):
    proc = cli("logs", "--json", str(FIXTURES / "synthetic" / "timeout-silent-rank"))
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    jsonschema.validate(report, SCHEMA)
    assert report["command"] == "logs" and report["verdict"] == "error"
    primary = report["findings"][0]
    assert primary["category"] == "collective_timeout_desync"
    assert 5 in primary["ranks"] and "node1" in primary["hosts"]
    assert primary["evidence"][0]["line"] >= 1
    assert {r["rank"] for r in report["facts"]["ranks"]} == set(range(8))


def test_text_output_has_cause_evidence_fix_and_table(cli):
    proc = cli("logs", str(FIXTURES / "synthetic" / "echo-suppression-oom"))
    assert proc.returncode == 1
    out = proc.stdout
    assert out.index("cuda-oom") < out.index("rank-died")
    assert "torchrun.log:" in out and "fix:" in out
    assert "per-rank last state" in out and "first error" in out


def test_markdown(cli):
    proc = cli("logs", "--markdown", str(FIXTURES / "shared" / "004-xgboost-docker-shm" / "log.txt"))
    assert proc.returncode == 1
    out = proc.stdout
    assert out.startswith("### nccl-doctor logs: error")
    assert "`shm-too-small`" in out and "```" in out and "**Fix**" in out


def test_nothing_recognised_exits_zero_and_shows_what_was_seen(cli):
    proc = cli("logs", str(FIXTURES / "synthetic" / "nothing-recognised"))
    assert proc.returncode == 0
    assert "no known" in proc.stdout and "KeyError: 'labels'" in proc.stdout


def test_nothing_readable_exits_two_with_one_line(cli, tmp_path):
    proc = cli("logs", str(tmp_path / "missing.log"))
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.count("nothing could be read") == 1


def test_stdin(cli):
    text = (FIXTURES / "shared" / "047-lmdeploy-driver-insufficient" / "log.txt").read_text()
    proc = cli("logs", "--json", "-", input=text)
    assert json.loads(proc.stdout)["findings"][0]["cause"] == "cuda-driver-too-old"


def test_portable_engine_option(cli):
    proc = cli("logs", "--engine", "portable", "--json", str(FIXTURES / "synthetic" / "coll-mismatch"))
    report = json.loads(proc.stdout)
    assert report["facts"]["inputs"]["engine"] == "portable"
    assert report["findings"][0]["cause"] == "collective-mismatch"
