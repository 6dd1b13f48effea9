"""The signature catalog is data: every category covered, every cause real, every example matched by every engine."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from nccl_doctor.catalog import categories, causes
from nccl_doctor.logs.engine import PortableEngine, make_engine
from nccl_doctor.logs.signatures import (
    common_text,
    grep_expression,
    hyperscan_expression,
    required_literals,
    scan_expression,
    signatures,
)

SIGS = signatures()


def test_every_category_has_a_signature():
    covered = {causes()[s.cause].category for s in SIGS if s.cause}
    assert set(categories()) - covered == set()


def test_error_signatures_name_existing_causes():
    for s in SIGS:
        if s.role in ("root", "generic", "echo", "timeout"):
            assert s.cause in causes(), s.id
        if s.role == "fact":
            assert s.fact, s.id
        if s.role == "hint":
            assert s.hint, s.id


@pytest.mark.parametrize("sig", SIGS, ids=[s.id for s in SIGS])
def test_example_matches_its_pattern(sig):
    assert sig.match(sig.example) is not None


@pytest.mark.parametrize("sig", SIGS, ids=[s.id for s in SIGS])
def test_literals_are_in_the_example(sig):
    assert sig.literals, f"{sig.id}: no pre-filter literal; add `literal` to the catalog"
    example = sig.example.lower() if sig.caseless else sig.example
    assert any(lit in example for lit in sig.literals)
    assert min(len(lit) for lit in sig.literals) >= 2


@pytest.mark.parametrize("engine", ["hyperscan", "portable"])
def test_engines_report_every_example(engine):
    pytest.importorskip("hyperscan") if engine == "hyperscan" else None
    sigs = [s for s in SIGS if s.scope == "all"]
    eng = make_engine(sigs, engine)
    for s in sigs:
        data = ("unrelated line\n" + s.example + "\nanother line\n").encode()
        hits = eng.scan(data)
        lines = {data[a:b].decode(): ids for a, b, ids in hits}
        assert s.index in lines.get(s.example, []), f"{engine} misses {s.id}"


def test_portable_engine_does_not_report_plain_lines():
    eng = PortableEngine([s for s in SIGS if s.scope == "all"])
    assert eng.scan(b"epoch 3 step 100 loss 1.234\n\n" * 50) == []


def test_required_literals():
    assert required_literals(r"Bootstrap ?: no socket interface found") == (": no socket interface found",)
    assert set(required_literals(r"(?:foo bar|baz qux) \d+")) == {"foo bar", "baz qux"}
    assert required_literals(r"(?i)Fabric Manager") == ("fabric manager",)
    assert required_literals(r"\d+|x") == ()


def test_hyperscan_expression_drops_named_groups_and_tails():
    assert hyperscan_expression(r"Call to (?P<call>\S+) failed: (?P<err>.*)") == r"Call to (?:\S+) failed: "
    assert hyperscan_expression(r"a(?P<x>b)c") == "a(?:b)c"


def test_scan_expression_starts_where_healthy_logs_stop():
    teardown = next(s for s in SIGS if s.id == "comm-teardown")  # 'comm 0x.. rank 0 ... - Destroy COMPLETE'
    assert scan_expression(teardown.pattern, common_text()) == "(?:Destroy|Abort) COMPLETE"
    assert scan_expression(r"(?i)timeout\s+from|x", common_text()) == r"(?i)timeout\s+from|x"  # one branch: no cut


def test_scan_expressions_find_every_example():
    """What hyperscan looks for finds a superset of the lines: every example of every signature looked for so."""
    import re

    for s in SIGS:
        if not s.by_literal:
            expr = scan_expression(s.pattern, common_text())
            assert re.search(expr, s.example, re.MULTILINE), (s.id, expr)


@pytest.mark.skipif(shutil.which("grep") is None, reason="grep not installed")
def test_grep_expressions_match_examples():
    for s in SIGS:
        expr = grep_expression(s.pattern)
        example = s.example
        proc = subprocess.run(["grep", "-c", "-E", "-i" if s.caseless else "-e", expr] if s.caseless
                              else ["grep", "-c", "-E", "-e", expr], input=example, capture_output=True, text=True)
        assert proc.returncode in (0, 1), (s.id, proc.stderr)
        assert proc.stdout.strip() == "1", f"grep -E misses {s.id}: {expr}"


def test_portable_engine_when_hyperscan_is_missing(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "hyperscan", None)  # import hyperscan -> ImportError
    assert make_engine([s for s in SIGS if s.scope == "all"]).name == "portable"


def test_logs_never_imports_torch():
    code = ("import sys, nccl_doctor.logs as l; l.diagnose_text('NCCL WARN Cuda failure \\'out of memory\\''); "
            "assert 'torch' not in sys.modules")
    assert subprocess.run([__import__("sys").executable, "-c", code]).returncode == 0


def test_signature_table_round_trips_through_the_disk_cache(tmp_path, monkeypatch):
    """The cached table is the table: written once, read back equal, and made again when damaged."""
    import json

    from nccl_doctor.logs import signatures as module

    monkeypatch.setenv("NCCL_DOCTOR_CACHE_DIR", str(tmp_path))
    module.signatures.cache_clear()
    try:
        built = module.signatures()  # built, then written
        (entry,) = tmp_path.glob("signature-table-*.json")
        module.signatures.cache_clear()
        assert module.signatures() == built  # read back
        entry.write_text(json.dumps([{"index": "nonsense"}]))
        module.signatures.cache_clear()
        assert module.signatures() == built  # damaged: made again
    finally:
        module.signatures.cache_clear()
