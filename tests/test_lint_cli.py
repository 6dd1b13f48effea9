"""`nccl-doctor lint` through a subprocess: findings, JSON schema, exit codes, bad input."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import jsonschema
import pytest

FIXTURES = Path(__file__).parent / "fixtures" / "env"
SCHEMA = json.loads((Path(__file__).parents[1] / "src" / "nccl_doctor" / "render" / "report.schema.json").read_text())


def one_line_error(r, fragment: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("nccl-doctor: error:"), r.stderr
    assert fragment in r.stderr and "Traceback" not in r.stderr


def test_lint_env_file_json(cli):
    r = cli("lint", "--json", "--env-file", str(FIXTURES / "broken.env"))
    assert r.returncode == 1, r.stderr
    report = json.loads(r.stdout)
    jsonschema.validate(report, SCHEMA)
    assert report["command"] == "lint" and report["verdict"] == "error"
    causes = {f["cause"] for f in report["findings"]}
    assert causes >= {"env-unknown-variable", "env-removed-variable", "env-deprecated-variable", "env-invalid-value",
                      "socket-ifname-no-match", "gloo-ifname-no-match", "rank-config-invalid",
                      "master-addr-unresolvable", "master-port-invalid", "perf-setting"}
    assert report["findings"][0]["severity"] == "error"
    typo = next(f for f in report["findings"] if f["cause"] == "env-unknown-variable")
    assert typo["evidence"] == [{"source": str(FIXTURES / "broken.env"), "line": 2, "text": "NCCL_DEBG=INFO"}]
    assert set(report["facts"]) >= {"host", "software", "network", "limits", "environment"}
    assert "aBcDeFgHiJ" not in r.stdout and "0123456789abcdef0123" not in r.stdout


def test_lint_env_file_text(cli):
    r = cli("lint", "--env-file", str(FIXTURES / "broken.env"))
    assert r.returncode == 1
    assert "did you mean NCCL_DEBUG?" in r.stdout and "fix:" in r.stdout
    assert "NCCL_SOCKET_IFNAME=eth9 selects no interface" in r.stdout


def test_lint_clean_file_exits_zero(cli):
    r = cli("lint", "--env-file", str(FIXTURES / "clean.env"))
    assert r.returncode == 0, r.stdout
    assert "error" not in r.stdout.lower().split("nccl-doctor lint:")[-1].split("\n")[0]


def test_lint_process_environment(cli):
    r = cli("lint", "--json", env={"NCCL_DEBUG": "INFO", "NCCL_P2P_LEVEL": "sys"})
    report = json.loads(r.stdout)
    jsonschema.validate(report, SCHEMA)
    bad = [f for f in report["findings"] if f["cause"] == "env-invalid-value"]
    assert any("NCCL_P2P_LEVEL=sys" in f["message"] and f["evidence"][0]["source"] == "environment" for f in bad)


def test_lint_sees_a_bound_master_port(cli):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        r = cli("lint", "--json", env={"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "NCCL_DEBUG": "WARN"})
    findings = json.loads(r.stdout)["findings"]
    assert any(f["cause"] == "port-in-use" and str(port) in f["message"] for f in findings), findings
    assert r.returncode == 1


@pytest.mark.parametrize("make, fragment", [
    (lambda d: d / "missing.env", "no such file"),
    (lambda d: d, "is a directory"),
    (lambda d: _write(d / "bin.env", b"\x7fELF\x00\x01"), "binary file"),
    (lambda d: _write(d / "huge.env", b"A=" + b"x" * (1024 * 1024 + 1)), "larger than"),
    (lambda d: FIXTURES / "malformed.env", "malformed.env:3: not a KEY=VALUE line"),
])
def test_bad_env_files(cli, tmp_path, make, fragment):
    one_line_error(cli("lint", "--env-file", str(make(tmp_path))), fragment)


def test_bad_flags(cli):
    one_line_error(cli("lint", "--no-such-flag"), "no-such-flag")
    one_line_error(cli("lint", "--env-file"), "requires an argument")


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path
