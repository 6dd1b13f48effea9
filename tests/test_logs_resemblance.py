"""The resemblance table: generated from the labelled real cases, a weak witness only when no error line is known."""

from __future__ import annotations

import importlib.util
import io
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from nccl_doctor.catalog import categories, cause
from nccl_doctor.logs import diagnose_paths, resemblance
from nccl_doctor.logs.evidence import LogView
from nccl_doctor.logs.reading import Collector
from nccl_doctor.logs.rules.lines import rule_resemblance
from nccl_doctor.logs.sources import Source

ROOT = Path(__file__).resolve().parents[1]
CATALOG = ROOT / "src" / "nccl_doctor" / "catalog"


def bench_module():
    spec = importlib.util.spec_from_file_location("logs_resemblance", ROOT / "bench" / "logs_resemblance.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def view_of(text: str) -> LogView:
    collector = Collector()
    collector.add_source(Source(name="paste", stream=io.BytesIO(text.encode())))
    return LogView(collector.finish())


def test_the_stored_table_is_what_the_labelled_cases_give():
    bench = bench_module()
    assert bench.train(bench.labelled_cases()).to_json() == (CATALOG / resemblance.TABLE).read_text(), \
        "run `python bench/logs_resemblance.py --write`"


def test_naive_bayes_picks_the_category_whose_cases_hold_the_words():
    cases = [("shm_too_small", {"bus", "shm", "docker"})] * 3 + [("p2p_peer_access", {"hang", "p2p", "docker"})] * 3
    table = resemblance.Table.train(cases)
    likeness = table.closest({"hang", "p2p", "unknownword"})
    assert likeness.category == "p2p_peer_access"
    assert likeness.probability > 0.5
    assert set(likeness.deciding) == {"hang", "p2p"}  # "docker" is in both: it decides nothing
    assert table.closest({"unknownword"}) is None


def test_a_word_of_fewer_cases_than_the_minimum_is_not_learned():
    cases = [("shm_too_small", {"common", "rare"})] + [("shm_too_small", {"common"})] * (resemblance.MIN_CASES - 1)
    assert set(resemblance.Table.train(cases).holding) == {"common"}


def test_every_category_has_a_usual_cause_of_its_own():
    for category in categories().values():
        assert cause(category.usual).category == category.id


def test_a_log_that_only_resembles_failures_gets_a_weak_named_guess():
    view = view_of("all_reduce hangs forever after init, GPU at 100%\n"
                   "host:1:1 [0] NCCL INFO Channel 00 : 0[1000] -> 1[2000] via P2P/IPC\n")
    (clue,) = rule_resemblance(view)
    likeness = resemblance.table().closest(view.words())
    assert clue.cause == resemblance.usual_cause(likeness.category)
    assert all(w in view.words() for w in likeness.deciding)
    assert likeness.category in clue.message


def test_no_guess_without_a_sign_of_failure():
    assert list(rule_resemblance(view_of("epoch 3 step 1200 loss 1.83 lr 3e-4 throughput 812 samples/s\n"))) == []


def test_no_guess_when_an_error_line_is_recognised():
    view = view_of("RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1269, unhandled system error, NCCL version 2.14.3\n"
                   "the job hangs\n")
    assert list(rule_resemblance(view)) == []


def test_a_healthy_nccl_info_log_gets_no_finding():
    assert diagnose_paths([str(CATALOG / "healthy.log")]).findings == []


@given(st.binary(max_size=300), st.binary(max_size=300))
def test_words_are_lower_case_and_grow_with_the_text(a, b):
    seen = resemblance.words(a)
    assert seen <= resemblance.words(a + b"\n" + b)
    assert all(w == w.lower() and resemblance.WORD.fullmatch(w.encode()) for w in seen)
