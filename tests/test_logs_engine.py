"""The hyperscan engine looks for literal groups instead of every literal: it must report what looking for every
signature's own literals reports (the same lines, the same signatures, in the same order)."""

from __future__ import annotations

from functools import cache

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from nccl_doctor.logs.engine import (GROUP_IDS, HyperscanEngine, _expressions, _group_by_line, literal_groups,
                                     own_literals)
from nccl_doctor.logs.reading import saturating_signatures
from nccl_doctor.logs.signatures import by_id, signatures

hyperscan = pytest.importorskip("hyperscan")

SIGS = [s for s in signatures() if s.scope == "all"]
SAMPLE = saturating_signatures()
LITERALS = sorted({lit for s in SIGS if s.by_literal for lit in s.literals})


@cache
def engine() -> HyperscanEngine:
    return HyperscanEngine(SIGS, SAMPLE)


@cache
def each_literal_database(sampled: bool):
    """Every signature's own expressions (no groups), to check the engine against."""
    found, ids, flags = _expressions(hyperscan, SIGS, SAMPLE if sampled else (), [])
    each = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
    each.compile(expressions=found, ids=ids, elements=len(found), flags=flags)
    return each


def each_literal(data: bytes, sampled: bool) -> list[tuple[int, int, list[int]]]:
    hits: list[tuple[int, int]] = []
    each_literal_database(sampled).scan(
        data, match_event_handler=lambda sig, start, end, flags, ctx: hits.append((end - 1, sig)))
    return _group_by_line(data, hits)


def test_groups_cover_every_literal_and_only_their_members():
    groups = literal_groups(SIGS, SAMPLE)
    members = {i for _, ids in groups for i in ids}
    assert not members & SAMPLE  # sampled signatures keep their own expressions (one match per chunk)
    by_index = {s.index: s for s in SIGS}
    for lit, ids in groups:
        assert lit == lit.lower()
        for i in ids:  # every member has a literal holding the group's
            assert any(lit in own.lower() for own, _ in own_literals(by_index[i]))
    for s in SIGS:
        if s.index in members:  # each of its literals is found by some group it belongs to
            for own, _ in own_literals(s):
                assert any(lit in own.lower() and s.index in ids for lit, ids in groups)
    assert len(groups) < len({lit.lower() for lit in LITERALS}) / 1.5  # the point of it: fewer literals


def test_groups_are_fewer_than_their_literals_and_unique():
    groups = literal_groups(SIGS, SAMPLE)
    assert len({lit for lit, _ in groups}) == len(groups)
    assert all(ids == sorted(set(ids)) for _, ids in groups)


def _case(text: str, flips: list[bool]) -> str:
    return "".join(c.swapcase() if flip else c for c, flip in zip(text, flips + [False] * len(text)))


_PIECES = st.one_of(
    st.builds(_case, st.sampled_from(LITERALS), st.lists(st.booleans(), max_size=12)),
    st.sampled_from(LITERALS),
    st.text(alphabet="abcXYZ 0123:[]-_.", max_size=12),
    st.sampled_from([s.example for s in SIGS][:400]),
)
_LINES = st.lists(_PIECES, min_size=1, max_size=5).map(" ".join)


@settings(max_examples=300, deadline=None)
@given(st.lists(_LINES, min_size=1, max_size=8), st.booleans(), st.booleans())
def test_groups_report_what_every_literal_reports(lines, final_newline, sampled):
    data = ("\n".join(lines) + ("\n" if final_newline else "")).encode()
    assert engine().scan(data, sampled) == each_literal(data, sampled)


def test_group_ids_stay_clear_of_signature_indexes():
    assert len(signatures()) < GROUP_IDS
    assert all(ident >= GROUP_IDS for ident in engine().groups)


def test_a_literal_in_another_case_is_not_reported_for_a_case_sensitive_signature():
    strict = next(s for s in SIGS if s.by_literal and not s.caseless and "(?i" not in s.pattern and s.literals
                  and s.literals[0].swapcase() != s.literals[0] and s.index not in SAMPLE)
    line = f"x {strict.literals[0].swapcase()} y\n".encode()
    assert all(strict.index not in ids for _, _, ids in engine().scan(line))
    assert any(strict.index in ids for _, _, ids in engine().scan(f"x {strict.literals[0]} y\n".encode()))


_SLOW_AND_COMMON = [s for s in signatures() if s.id in ("pytorch:7d84391150", "channel-transport", "comm-init",
                                                       "nccl-coll-call")] + [s for s in signatures()][::97]


@settings(max_examples=400, deadline=None)
@example(by_id("cuda:6c4a284e57"), "NCCL WARN Cuda failure 'operation not \u017fupported'")  # long s: caseless s
@given(st.sampled_from(_SLOW_AND_COMMON), st.lists(st.one_of(
    st.sampled_from([s.example for s in _SLOW_AND_COMMON]), st.sampled_from(LITERALS),
    st.builds(_case, st.sampled_from([s.example for s in _SLOW_AND_COMMON]), st.lists(st.booleans(), max_size=40)),
    st.text(max_size=8), st.sampled_from(["\u017f", "\u212a", "\u0130", "\u0131", "K"])), max_size=4).map(" ".join))
def test_runs_checked_first_change_no_match(sig, text):
    """Signature.match looks for the pattern's plain runs before running the regex: the same captures, or None."""
    from nccl_doctor.logs.signatures import captures

    found = sig.regex.search(text)
    assert sig.match(text) == (captures(found) if found else None)
    assert sig.match(sig.example) is not None or sig.regex.search(sig.example) is None


def test_the_lines_every_healthy_init_prints_are_reported_for_no_signature_but_their_facts():
    """Hyperscan reports a line to Python only for signatures that may match it: a pattern loosened so far that it
    reports every 'Init COMPLETE' line (as an old-format communicator-size pattern once did) costs a Python call on
    a few million lines per GiB of INFO logs."""
    lines = (b"gpu-node00:20000:20057 [0] NCCL INFO comm 0x55d0a0000 rank 0 nranks 64 cudaDev 0 nvmlDev 0 busId 1b000 "
             b"commId 0x9f3e1c2a7b6d5e40 - Init START\n"
             b"gpu-node00:20000:20057 [0] NCCL INFO ncclCommInitRank comm 0x55d0a0000 rank 0 nranks 64 cudaDev 0 "
             b"nvmlDev 0 busId 1b000 commId 0x9f3e1c2a7b6d5e40 - Init COMPLETE\n")
    reported = {by_index.id for _, _, ids in engine().scan(lines) for i in ids if (by_index := SIGS_BY_INDEX.get(i))}
    assert reported <= {"comm-init"}, reported


SIGS_BY_INDEX = {s.index: s for s in SIGS}
