"""Coverage derived from the sources: every message template of NCCL, RCCL, aws-ofi-nccl, Gloo, PyTorch c10d, the
CUDA/HIP error strings and the wrappers (accelerate, DeepSpeed, Lightning, vLLM, sglang, Ray, Horovod, XGBoost, RAFT, JAX) is claimed by a rule (a cause or an explicit 'not a failure'), and every WARN template of
the NCCL reference (../shared/reference) is recognised when it appears in a log."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from nccl_doctor.catalog import load_toml
from nccl_doctor.logs import diagnose_text
from nccl_doctor.logs.engine import make_engine
from nccl_doctor.logs.signatures import signatures
from nccl_doctor.logs.templates import (MIN_FIXED, Template, fixed_text, meaning, pattern, printed_line, printf_regex,
                                         templates)

REFERENCE = Path(__file__).resolve().parents[2] / "shared" / "reference" / "nccl_warn_templates.tsv"
PROJECTS = {"nccl", "rccl", "aws-ofi-nccl", "gloo", "pytorch", "cuda", "accelerate", "deepspeed", "lightning", "vllm",
            "sglang", "ray", "horovod", "xgboost", "raft", "jax"}


def test_every_project_is_in_the_tables():
    counts = Counter(t.project for t in templates())
    assert set(counts) == PROJECTS
    assert counts["nccl"] > 1000 and counts["pytorch"] > 1000 and counts["cuda"] > 100
    assert counts["deepspeed"] > 50 and counts["lightning"] > 30 and counts["accelerate"] > 10
    assert counts["vllm"] > 100 and counts["sglang"] > 40 and counts["ray"] > 40
    assert counts["horovod"] > 200 and counts["xgboost"] > 200 and counts["raft"] > 30 and counts["jax"] > 50


def test_every_template_is_claimed_by_a_rule():
    unclaimed = [f"{t.project}: {t.text}" for t in templates() if meaning(t) is None]
    assert not unclaimed, unclaimed[:10]


def test_every_template_carries_its_provenance():
    for t in templates():
        assert t.file and t.first and t.last, t
        assert t.project in t.provenance and t.file.split(";")[0] in t.provenance


def _line(template: str) -> str:
    """What a reference template prints: placeholders filled in, source escapes undone."""
    text = template.replace('\\"', '"').replace("\\n", " ")
    filled = re.sub(r"%[-+ #0]*\d*(?:\.\d+)?(?:hh|h|ll|l|z|j|t)?([diouxXcspfgm%])",
                    lambda m: {"s": "mlx5_0", "c": "x", "p": "0x7f3a", "%": "%"}.get(m.group(1), "3"), text)
    return f"node-1:1234:1235 [0] misc/file.cc:42 NCCL WARN {filled}"


def _recognised(lines: list[str]) -> list[bool]:
    """Per line: does a signature that is not a mere 'unrecognised line' hint recognise it?"""
    sigs = signatures()
    data = "\n".join(lines).encode()
    hits = make_engine([s for s in sigs if s.scope == "all"]).scan(data)
    line_of = {0: 0}
    for number, pos in enumerate((i for i, byte in enumerate(data) if byte == 0x0A), 1):
        line_of[pos + 1] = number
    seen = [False] * len(lines)
    for start, end, ids in hits:
        text = data[start:end].decode()
        if any(not sigs[i].unclaimed and sigs[i].regex.search(text) for i in ids):
            seen[line_of[start]] = True
    return seen


@pytest.mark.skipif(not REFERENCE.exists(), reason="../shared/reference is not beside this checkout")
def test_every_reference_warn_template_is_recognised_or_marked_vague():
    lines = REFERENCE.read_text().splitlines()
    rows = [line.split("\t", 1) for line in lines if "\t" in line and not line.startswith("#")]
    not_printed = load_toml("template_causes.toml")["not_printed"]
    vague = {i for i, (_, tpl) in enumerate(rows) if len(fixed_text(tpl)) < MIN_FIXED or tpl in not_printed}
    seen = _recognised([_line(tpl) for _, tpl in rows])
    missed = [f"{loc}: {tpl}" for i, (loc, tpl) in enumerate(rows) if not seen[i] and i not in vague]
    assert not missed, f"{len(missed)} reference templates no signature recognises: {missed[:8]}"


def test_wording_is_matched_whatever_the_case():
    upper = "misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 10.0.0.2<45763> failed : No route to host"
    lower = "include/socket.h:360 NCCL WARN connect to 10.0.0.2<45763> failed : No route to host"
    for line in (upper, lower):
        assert diagnose_text(line)[0].category == "network_interface", line


@given(st.lists(st.one_of(st.text(alphabet=st.characters(blacklist_characters="%\n\r\\", codec="ascii"), max_size=12),
                          st.sampled_from(["%s", "%d", "%lx", "%p", "%zu", "%.2f", "%c", "%%", "%ld"])), max_size=8))
def test_printf_regex_matches_what_printf_prints(parts):
    template = "".join(parts)
    assume(fixed_text(template))  # templates without fixed text are never compiled
    fill = {"%s": "word", "%d": "-12", "%lx": "1f", "%p": "0x7f3a", "%zu": "9", "%.2f": "1.50", "%c": "x", "%%": "%",
            "%ld": "42"}
    printed = "".join(fill.get(p, p) for p in parts)
    assert re.search(printf_regex(template), printed), (template, printed)


def test_a_vague_template_is_not_turned_into_a_signature():
    from nccl_doctor.logs.templates import pattern

    assert pattern(Template("nccl", "x.cc", "", "WARN", "%s: %s", "v2.4", "v2.30")) is None


def test_a_message_printed_over_several_lines_is_recognised_by_its_first_specific_line():
    received = next(t for t in templates() if t.text.startswith("[Rank %s] Received NCCL errors for communicators"))
    assert re.search(pattern(received), "[Rank 3] Received NCCL errors for communicators in the cache: ")
    assert printed_line("[%s]:\\n  rank: %s (local_rank: %s)\\n  exitcode: %s") == "  rank: %s (local_rank: %s)"
    assert printed_line("no newline here at all") == "no newline here at all"

