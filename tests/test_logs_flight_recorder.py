"""Flight-recorder dumps: real layouts load, hostile pickles are rejected without running anything."""

from __future__ import annotations

import json
import os
import pickle
import pickletools
from pathlib import Path

import pytest

from nccl_doctor.logs import collect_paths, diagnose_paths
from nccl_doctor.logs.flight_recorder import UnsafeDump, safe_unpickle, summarize

REAL = Path(__file__).parent / "fixtures" / "logs" / "flight_recorder" / "gloo-torch2.13"


def test_real_pickle_dump_from_torch():
    """Dumps written by torch 2.13's _dump_fr_trace (gloo, 2 ranks): protocol 2, builtins only."""
    dump = safe_unpickle((REAL / "nccl_trace_rank_0").read_bytes())
    assert dump["version"] == "2.10"
    summary = summarize(dump)
    assert summary.entries == 4
    last = summary.last["0"]
    assert (last.op, last.seq, last.state) == ("broadcast", 4, "completed")
    assert summary.first_pending == {}


def test_real_json_dump_matches_pickle():
    from_json = summarize(json.loads((REAL / "nccl_trace_rank_0.json").read_text()))
    from_pickle = summarize(safe_unpickle((REAL / "nccl_trace_rank_0").read_bytes()))
    assert from_json.last["0"].describe() == from_pickle.last["0"].describe()


class _RunsCode:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _hostile_payloads(marker: str) -> dict[str, bytes]:
    payloads = {f"reduce-proto{p}": pickle.dumps({"entries": [_RunsCode(marker)]}, protocol=p) for p in (0, 2, 4, 5)}
    payloads["global-opcode"] = b"cos\nsystem\n(S'touch " + marker.encode() + b"'\ntR."
    payloads["inst-opcode"] = b"(S'touch " + marker.encode() + b"'\nios\nsystem\n."
    payloads["ext-opcode"] = b"\x80\x02\x82\x01."
    payloads["persistent-id"] = b"\x80\x02X\x03\x00\x00\x00abcQ."
    payloads["garbage"] = b"\x80\x02}q\x00(X\x07"
    return payloads


@pytest.mark.parametrize("name", list(_hostile_payloads("x")))
def test_hostile_pickles_are_rejected(tmp_path, name):
    marker = tmp_path / "pwned"
    data = _hostile_payloads(str(marker))[name]
    with pytest.raises(UnsafeDump):
        safe_unpickle(data)
    assert not marker.exists()


def test_hostile_dump_is_one_line_and_the_rest_is_analysed(tmp_path, cli):
    marker = tmp_path / "pwned"
    (tmp_path / "nccl_trace_rank_0").write_bytes(pickle.dumps({"entries": [_RunsCode(str(marker))]}, protocol=2))
    (tmp_path / "rank-1.log").write_text("include/shm.h:48 NCCL WARN Error while creating shared memory segment "
                                         "nccl-shm-recv-1 (size 9637888)\n")
    proc = cli("logs", str(tmp_path))
    assert proc.returncode == 1
    assert not marker.exists()
    rejected = [ln for ln in proc.stderr.splitlines() if "nccl_trace_rank_0" in ln]
    assert len(rejected) == 1 and "rejected flight-recorder dump" in rejected[0] and "os.system" not in proc.stdout
    assert "shm-too-small" in proc.stdout


def test_only_builtin_opcodes_in_real_dumps():
    ops = {op.name for op, _, _ in pickletools.genops((REAL / "nccl_trace_rank_1").read_bytes())}
    assert "GLOBAL" not in ops and "REDUCE" not in ops and "STACK_GLOBAL" not in ops


def test_dumps_name_the_lagging_rank():
    report = diagnose_paths([str(Path(__file__).parent / "fixtures" / "logs" / "synthetic" / "flight-recorder-lag")])
    primary = report.ordered()[0]
    assert primary.ranks == [1] and "flight-recorder" in primary.message
    rows = {r["rank"]: r for r in report.facts["ranks"]}
    assert rows[1]["last_collective"].startswith("all_reduce #6")


def test_dump_without_entries_is_rejected(tmp_path):
    (tmp_path / "nccl_trace_rank_0").write_bytes(pickle.dumps({"nothing": 1}, protocol=2))
    col = collect_paths([str(tmp_path)])
    assert "no 'entries' list" in col.problems[0]


def test_json_lines_log_with_entries_key_is_read_as_a_log(tmp_path):
    line = '{"entries": 1, "msg": "include/shm.h:28 NCCL WARN Call to posix_fallocate failed : No space left on device"}\n'
    (tmp_path / "app.jsonl").write_text(line * 3)
    report = diagnose_paths([str(tmp_path / "app.jsonl")])
    assert report.ordered()[0].cause == "shm-too-small"
