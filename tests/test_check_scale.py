"""`check`'s report at 1,024 ranks (128 hosts of 8) with one bad host fits one screen and names exactly that
host and its ranks; folding is one finding per cause whatever the number of ranks (no processes: the
cross-rank rules on simulated fingerprints; bench/check_scale.py times the same at 1,024 and 8,192)."""

import copy
import io
import json
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from nccl_doctor.model import Evidence, Finding, Report, fold, ranges
from nccl_doctor.render.text import render_text
from nccl_doctor.rules.consistency import compare_fingerprints, compare_settings, interface_findings

BASE = json.loads((Path(__file__).parent / "fixtures/check/facts_cpu_host.json").read_text())
SCREEN = 50


def cluster(hosts: int, per_host: int, bad: int) -> tuple[dict[int, dict], dict[int, str]]:
    facts, host_of = {}, {}
    for rank in range(hosts * per_host):
        host = f"node{rank // per_host:04d}"
        mine = facts[rank] = copy.deepcopy(BASE)
        mine["host"]["hostname"] = host_of[rank] = host
        mine["environment"]["variables"]["GLOO_SOCKET_IFNAME"] = "eth0"
        if rank // per_host == bad:
            mine["software"]["nccl_wheels"] = [{"name": "nvidia-nccl-cu12", "version": "2.18.1", "libraries": []}]
            mine["environment"]["variables"].update(NCCL_PROTO="LL", GLOO_SOCKET_IFNAME="eth9")
    return facts, host_of


def test_a_thousand_ranks_with_one_bad_host_fit_one_screen():
    facts, host_of = cluster(128, 8, bad=37)
    per_rank = [Finding("ib-not-used", "warning", "NCCL_IB_DISABLE=1 although this host has ACTIVE RDMA ports",
                        ranks=[r], hosts=[host_of[r]], evidence=[Evidence("environment", "NCCL_IB_DISABLE=1")])
                for r in facts]  # the same lint finding on every rank
    found = fold(compare_fingerprints(facts, host_of) + compare_settings(facts, host_of)
                 + interface_findings(facts, host_of) + per_rank)
    out = io.StringIO()
    render_text(Report("check", found), out)
    lines = out.getvalue().splitlines()
    assert len(lines) <= SCREEN, out.getvalue()
    assert sorted(f.cause for f in found) == ["gloo-ifname-no-match", "ib-not-used", "nccl-setting-differs",
                                              "nccl-version-mismatch"]
    for f in found:
        if f.cause != "ib-not-used":
            assert (f.hosts, f.ranks) == (["node0037"], list(range(296, 304))), f
            assert "296-303" in f.message
    [everywhere] = [f for f in found if f.cause == "ib-not-used"]
    assert everywhere.ranks == list(range(1024)) and len(everywhere.hosts) == 128
    shown = " ".join(out.getvalue().split())  # as one line: the terminal wraps where it must
    assert "ranks 0-1023; hosts node0000, node0001, node0002, node0003, node0004, node0005, node0006, node0007 " \
           "and 120 more" in shown


@given(st.lists(st.tuples(st.sampled_from(["rank-died", "rank-hang", "slow-host"]), st.sampled_from("abc"),
                          st.integers(0, 40)), max_size=60))
def test_fold_keeps_every_rank_once_per_cause_and_message(items):
    findings = [Finding(cause, "error", f"message {m}", ranks=[r], hosts=[f"h{r % 5}"]) for cause, m, r in items]
    folded = fold(findings)
    assert len({(f.cause, f.message) for f in folded}) == len(folded)
    for f in folded:
        expected = {r for cause, m, r in items if (cause, f"message {m}") == (f.cause, f.message)}
        assert set(f.ranks) == expected and len(f.ranks) == len(expected)
    assert fold(folded) == folded  # folding twice changes nothing
    assert [f.message for f in findings] == [f"message {m}" for _, m, _ in items]  # inputs untouched


@given(st.sets(st.integers(0, 5000), max_size=200))
def test_ranges_read_back_to_the_same_ranks(values):
    text = ranges(values)
    back = set()
    for part in filter(None, text.split(",")):
        lo, _, hi = part.partition("-")
        back |= set(range(int(lo), int(hi or lo) + 1))
    assert back == values
    short = ranges(values, most=3)
    assert short == text or short.endswith(f"({len(values)} in all)")
