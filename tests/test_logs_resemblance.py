"""The resemblance table: generated from the labelled real cases, a weak witness only when no error line is known."""

from __future__ import annotations

import importlib.util
import io
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from nccl_doctor.catalog import categories, cause
from nccl_doctor.logs import diagnose_paths, diagnose_text, resemblance
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


def test_the_nearest_centroid_is_the_category_whose_cases_hold_the_words():
    cases = [("shm_too_small", {"bus", "shm", "docker"})] * 3 + [("p2p_peer_access", {"hang", "p2p", "docker"})] * 3
    table = resemblance.Table.train(cases)
    ranked = table.ranked({"hang", "p2p", "unknownword"})
    assert [r.category for r in ranked] == ["p2p_peer_access"]  # no word of the shm cases: not alike at all
    assert 0.9 < ranked[0].similarity < 1.001  # rounded weights
    assert set(ranked[0].deciding) == {"hang", "p2p"}
    assert table.closest({"unknownword"}) is None


def test_a_word_every_case_holds_decides_nothing():
    cases = [("shm_too_small", {"docker", "shm"})] * 3 + [("p2p_peer_access", {"docker", "p2p"})] * 3
    assert resemblance.Table.train(cases).closest({"docker"}) is None  # its weight (idf) is log(1) = 0


def test_a_word_of_fewer_cases_than_the_minimum_is_not_learned():
    cases = [("shm_too_small", {"common", "rare"})] + [("shm_too_small", {"common"})] * (resemblance.MIN_CASES - 1)
    cases += [("p2p_peer_access", {"distinct", "because"})] * resemblance.MIN_CASES
    assert set(resemblance.Table.train(cases).idf) == {"common", "distinct"}  # "because": an English function word


def test_every_category_has_a_usual_cause_of_its_own():
    for category in categories().values():
        assert cause(category.usual).category == category.id


def test_a_log_that_only_resembles_failures_gets_a_weak_named_guess_and_a_differential():
    view = view_of("all_reduce hangs forever after init, GPU at 100%\n"
                   "host:1:1 [0] NCCL INFO Channel 00 : 0[1000] -> 1[2000] via P2P/IPC\n")
    guess, *others = rule_resemblance(view)
    ranked = resemblance.table().ranked(view.words())[:resemblance.DIFFERENTIAL]
    assert guess.observation == "resembles-labelled-cases" and ranked[0].category in guess.message
    assert guess.cause == resemblance.usual_cause(ranked[0].category)
    assert [c.cause for c in others] == [resemblance.usual_cause(r.category) for r in ranked[1:]]
    assert {c.observation for c in others} == {"resembles-other-cases"}
    assert all(w in view.words() for r in ranked for w in r.deciding)


def test_no_guess_without_a_sign_of_failure():
    assert list(rule_resemblance(view_of("epoch 3 step 1200 loss 1.83 lr 3e-4 throughput 812 samples/s\n"))) == []


def test_with_an_error_line_recognised_only_a_differential():
    view = view_of("RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1269, unhandled system error, NCCL version 2.14.3\n")
    assert {c.observation for c in rule_resemblance(view)} == {"resembles-other-cases"}


def test_the_differential_shows_beside_an_unsure_primary_only():
    unsure = diagnose_text("RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1269, unhandled system error, "
                           "NCCL version 2.14.3\n")
    assert unsure[0].confidence < 0.5 and len({f.category for f in unsure}) >= 3
    sure = diagnose_text("node:1:1 [0] include/shm.h:28 NCCL WARN Call to posix_fallocate failed : No space left "
                         "on device\n")
    assert sure[0].confidence >= 0.5
    assert not any("also resemble" in f.message for f in sure)


def test_a_healthy_nccl_info_log_gets_no_finding():
    assert diagnose_paths([str(CATALOG / "healthy.log")]).findings == []


@given(st.binary(max_size=300), st.binary(max_size=300))
def test_words_are_lower_case_and_grow_with_the_text(a, b):
    seen = resemblance.words(a)
    assert seen <= resemblance.words(a + b"\n" + b)
    assert all(w == w.lower() and resemblance.WORD.fullmatch(w.encode()) for w in seen)
