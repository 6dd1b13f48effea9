"""NcclDoctorCallback in a real Lightning fit: DDP on CPU/Gloo, one process per rank."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("lightning")
sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "runtime"))

from ranks import HERE, Ranks  # noqa: E402


def test_lightning_ddp_runs_preflight_at_setup_and_names_a_straggler_during_fit():
    with Ranks([str(HERE / "lightning_job.py"), "--strategy", "ddp", "--straggle", "--culprit", "1"], 2) as job:
        codes = job.wait(240)
        results = [[json.loads(l) for l in job.text(r).splitlines() if l.startswith('{"rank"')] for r in range(2)]
        assert codes == [0, 0], job.text(0, "err")[-3000:]
    for (result,) in results:
        assert result["preflight"] == "ok" and result["stages"] == ["passed", "passed", "skipped", "passed"]
    assert results[0][0]["watch"] == [["straggler-rank", [1]]]
