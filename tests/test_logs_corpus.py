"""The real-case corpus as a ratchet: every case `nccl-doctor logs` gets right stays right.

tests/fixtures/logs holds every labelled real case the project has: the early fixtures (shared, public,
heldout, heldout2), the 54 cases released from the held-out set on 2026-11-24 (released/) and 191 cases mined
from public issue threads in ten batches, each scored blind before the rules learned from it (corpus/,
bench/logs_blind.md). expected.json records, per case, whether the primary finding's category (top1) and the
first three categories (top3) were right when it was last recorded with `python bench/logs_accuracy.py
--record`. A case recorded right must stay right; a case recorded wrong is not asserted (its log holds no
evidence of the labelled cause, or the label is a judgement call): improving it means recording again.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nccl_doctor.logs import diagnose_paths

ROOT = Path(__file__).resolve().parents[1]
EXPECTED = json.loads((ROOT / "tests" / "fixtures" / "logs" / "expected.json").read_text())


def ranked(report) -> list[str]:
    findings = report.ordered()
    return list(dict.fromkeys([f.category for f in findings] + [s.category for f in findings for s in f.secondary]))


def test_every_real_case_is_recorded():
    cases = {str(p.parent.relative_to(ROOT)) for p in (ROOT / "tests" / "fixtures" / "logs").rglob("truth.json")
             if "synthetic" not in p.parts and json.loads(p.read_text()).get("category")}
    assert cases == set(EXPECTED), "run `python bench/logs_accuracy.py --record`"


@pytest.mark.parametrize("case", sorted(c for c, r in EXPECTED.items() if r["top3"]))
def test_a_case_once_right_stays_right(case):
    record = EXPECTED[case]
    inputs = [str(p) for p in sorted((ROOT / case).iterdir()) if p.name != "truth.json"]
    got = ranked(diagnose_paths(inputs))
    assert record["truth"] in got[:3], f"{case}: {record['truth']} left the top three: {got[:3]}"
    if record["top1"]:
        assert got[0] == record["truth"], f"{case}: primary {got[0]}, was {record['truth']}"


def test_the_corpus_accuracy_does_not_fall():
    """The whole corpus at a glance: the recorded figures themselves (what the note and docs quote)."""
    corpus = {c: r for c, r in EXPECTED.items() if "/corpus/" in c}
    top1 = sum(r["top1"] for r in corpus.values()) / len(corpus)
    top3 = sum(r["top3"] for r in corpus.values()) / len(corpus)
    assert len(corpus) >= 170 and top1 >= 0.65 and top3 >= 0.72, (len(corpus), top1, top3)
