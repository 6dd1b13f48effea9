"""NcclDoctorTrainerCallback in a real Hugging Face Trainer run on CPU/Gloo, one process per rank."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("accelerate")
sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "runtime"))

from ranks import HERE, Ranks  # noqa: E402


def test_hf_trainer_runs_preflight_and_watch_and_a_healthy_run_reports_nothing():
    with Ranks([str(HERE / "hf_job.py")], 2) as job:
        codes = job.wait(240)
        results = [[json.loads(l) for l in job.text(r).splitlines() if l.startswith('{"rank"')] for r in range(2)]
        assert codes == [0, 0], job.text(0, "err")[-3000:]
    for (result,) in results:
        assert result["preflight"] == "ok" and result["stages"] == ["passed", "passed", "skipped", "passed"]
    rank0 = results[0][0]
    assert rank0["watch"] == [] and rank0["steps"] == [20, 20]
