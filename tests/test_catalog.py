import json
import re
from pathlib import Path

import jsonschema
import pytest

from nccl_doctor.catalog import categories, causes
from nccl_doctor.docs import generated
from nccl_doctor.model import Evidence, Finding, Report, Severity
from nccl_doctor.render import render_json

ROOT = Path(__file__).resolve().parents[1]
TAXONOMY = ROOT.parent / "shared" / "taxonomy.md"
SCHEMA = json.loads((ROOT / "src/nccl_doctor/render/report.schema.json").read_text())


def test_categories_match_taxonomy():
    if not TAXONOMY.exists():
        pytest.skip("shared/taxonomy.md is not beside this checkout")
    ids = re.findall(r"^\| `(\w+)` \|", TAXONOMY.read_text(), re.M)
    assert ids == list(categories())


def test_schema_categories_match_catalog():
    assert SCHEMA["$defs"]["finding"]["properties"]["category"]["enum"] == list(categories())


def test_every_category_has_causes_and_every_cause_is_complete():
    table = causes()
    assert 50 <= len(table) <= 120
    for cat in categories():
        assert any(c.category == cat for c in table.values()), cat
    for c in table.values():
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", c.id)
        assert c.title and c.explanation and c.fix, c.id
        assert all(step.strip() for step in c.fix)


def test_generated_files_are_current():
    for path, text in generated(ROOT / "docs").items():
        assert path.read_text(encoding="utf-8") == text, f"{path} is stale: run `python -m nccl_doctor.docs`"


def test_unknown_cause_is_a_programming_error():
    with pytest.raises(KeyError):
        Finding("no-such-cause", Severity.ERROR, "x")


def test_report_orders_and_validates():
    report = Report("test", findings=[
        Finding("debug-logging-off", "info", "NCCL_DEBUG unset"),
        Finding("perf-setting", "warning", "NCCL_P2P_DISABLE=1", confidence=0.5),
        Finding("socket-ifname-no-match", "error", "eth9 missing", evidence=[Evidence("env", "NCCL_SOCKET_IFNAME=eth9")],
                secondary=[Finding("rank-died", "error", "echo", confidence=0.3)]),
    ])
    data = json.loads(render_json(report))
    jsonschema.validate(data, SCHEMA)
    assert [f["cause"] for f in data["findings"]] == ["socket-ifname-no-match", "perf-setting", "debug-logging-off"]
    assert data["verdict"] == "error" and report.exit_code == 1
    assert data["findings"][0]["category"] == "network_interface"
    assert data["findings"][0]["secondary"][0]["cause"] == "rank-died"
    assert Report("x", findings=[Finding("perf-setting", "warning", "w")]).exit_code == 0


def test_every_cause_has_a_road_and_every_road_says_what_it_checks():
    from nccl_doctor.roads import all_roads, roads_of

    roads = all_roads()
    assert [c for c in causes() if not roads_of(c, roads)] == []
    assert [r.name for r in roads if not r.doc] == []


def test_a_road_cannot_emit_a_cause_it_does_not_declare():
    from nccl_doctor.roads import emits

    @emits("shm-too-small")
    def rule():
        """A test road."""
        yield Finding("ulimit-nofile", Severity.ERROR, "not declared")

    with pytest.raises(ValueError, match="does not declare"):
        list(rule())
