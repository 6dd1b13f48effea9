"""The sweep's pure parts: nccl-tests' sizes, the plan both sides compute, rows, and the text table."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nccl_doctor.cluster.bench.options import BenchOptions, parse_size, sizes
from nccl_doctor.cluster.bench.sweep import average_busbw, busbw_of, combine, plan, row
from nccl_doctor.render.bench import collective_table, sweep_text, time_text


def test_sizes_walk_like_nccl_tests():
    assert sizes(8, 128, 2, 0) == [8, 16, 32, 64, 128]
    assert sizes(8, 100, 2, 0) == [8, 16, 32, 64]
    assert sizes(1 << 20, 4 << 20, 1, 1 << 20) == [1 << 20, 2 << 20, 3 << 20, 4 << 20]  # -f 1: add -i
    assert sizes(0, 64, 2, 8) == [0] and sizes(32, 16, 2, 8) == []


@given(st.integers(1, 1 << 30), st.integers(1, 1 << 31), st.integers(2, 16))
def test_sizes_grow_by_the_factor_within_the_bounds(lo, hi, factor):
    found = sizes(lo, hi, factor, 0)
    assert all(lo <= s <= hi for s in found)
    assert all(b == a * factor for a, b in zip(found, found[1:]))
    assert not found or found[-1] * factor > hi


def test_parse_size_takes_nccl_tests_units():
    assert [parse_size(x) for x in ("8", "512K", "32M", "1G", "1.5k", "64MB")] == [8, 512 << 10, 32 << 20, 1 << 30,
                                                                                  1536, 64 << 20]
    with pytest.raises(ValueError):
        parse_size("12Q")


def test_combine_is_nccl_tests_average_flag():
    times = [4.0, 1.0, 7.0]
    assert [combine(times, a) for a in (0, 1, 2, 3)] == [4.0, 4.0, 1.0, 7.0]


def test_plan_skips_sizes_that_leave_a_rank_without_elements():
    options = BenchOptions(collectives=("all_gather", "all_reduce"), minbytes=8, maxbytes=64)
    cells = plan(options, "gloo", 4)
    assert [(c.collective, c.requested, c.size) for c in cells] == [
        ("all_gather", 16, 16), ("all_gather", 32, 32), ("all_gather", 64, 64),  # 8 B = 2 floats: none per rank
        ("all_reduce", 8, 8), ("all_reduce", 16, 16), ("all_reduce", 32, 32), ("all_reduce", 64, 64)]
    assert not plan(BenchOptions(collectives=("sendrecv",)), "gloo", 1)  # no peer to send to
    assert plan(BenchOptions(collectives=("all_reduce",)), "nccl", 2)[-1].size == 256 << 20  # default -e per backend
    assert plan(BenchOptions(collectives=("all_reduce",)), "gloo", 2)[-1].size == 8 << 20


def test_row_combines_ranks_like_nccl_tests():
    options = BenchOptions(collectives=("all_gather",), minbytes=1 << 20, maxbytes=1 << 20)
    [cell] = plan(options, "gloo", 4)
    results = {r: {"out-of-place": {"us": 1000.0 * (r + 1), "wrong": 0, "detail": []},
                   "in-place": {"us": 500.0, "wrong": 1 if r == 2 else 0, "detail": ["1 of 262144 elements wrong"]}}
               for r in range(4)}
    out = row(cell, results, options, 4)
    assert (out["size"], out["count"], out["type"], out["redop"], out["root"]) == (1 << 20, 65536, "float", "none", -1)
    assert out["out-of-place"]["time_us"] == 4000.0  # the slowest rank (-a 3)
    assert out["out-of-place"]["algbw"] == pytest.approx((1 << 20) / 4000e-6 / 1e9, rel=1e-5)
    assert out["out-of-place"]["busbw"] == pytest.approx(out["out-of-place"]["algbw"] * 3 / 4, rel=1e-5)
    assert out["in-place"]["wrong"] == 1 and list(out["in-place"]["wrong_detail"]) == ["2"]
    assert busbw_of("all_reduce", 1 << 30, 1e6, 8) == pytest.approx(1.073741824 * 2 * 7 / 8)
    both = (out["out-of-place"]["busbw"] + out["in-place"]["busbw"]) / 2
    assert average_busbw([out]) == {"all_gather": pytest.approx(both)}
    mean = row(cell, results, BenchOptions(collectives=("all_gather",), average=1), 4)
    assert mean["out-of-place"]["time_us"] == 2500.0


def test_table_matches_nccl_tests_layout():
    r = {"collective": "all_reduce", "size": 33554432, "count": 8388608, "type": "float", "redop": "sum", "root": -1,
         "out-of-place": None, "in-place": {"time_us": 12345.6, "algbw": 2.718, "busbw": 4.077, "wrong": 0}}
    lines = collective_table("all_reduce", [r], 4.077)
    assert lines[2].startswith("#       size         count      type   redop    root     time   algbw   busbw #wrong")
    assert lines[4] == ("    33554432       8388608     float     sum      -1      N/A     N/A     N/A    N/A"
                        "    12346    2.72    4.08      0")
    assert lines[-3:] == ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 4.077", "#"]
    assert [time_text(x) for x in (12.345, 123.45, 12345.6)] == ["  12.35", "  123.5", "  12346"]
    sweep = {"settings": BenchOptions().settings("gloo"), "backend": "gloo", "ranks": 4, "collectives": ["all_reduce"],
             "rows": [r], "avg_busbw": {"all_reduce": 4.077}}
    assert "step: 2(factor) warmup iters: 5 iters: 20 validation: 1 time across ranks: max (-a 3)" in sweep_text(sweep)


@pytest.mark.parametrize("options", [
    BenchOptions(collectives=("all_reduce",), minbytes=1024, maxbytes=4096, iters=2, check=0, datatype="half",
                 op="avg", timeout=30.0),
    BenchOptions(collectives=(), matrix="hosts", matrix_bytes=1 << 20, matrix_time=0.3, backend="gloo"),
    BenchOptions(collectives=("sendrecv", "reduce"), matrix="ranks", root=1, average=1, stepfactor=1,
                 stepbytes=4096),
])
def test_options_travel_to_local_ranks_as_their_command_line(options):
    """A --local child parses the argv its parent gives it back into the same options object."""
    from nccl_doctor.commands.bench import bench, options_from

    assert options_from(bench.make_context("bench", options.argv()).params) == options


def test_check_options_travel_too():
    from nccl_doctor.cluster.options import Options
    from nccl_doctor.commands.check import check

    for options in (Options(), Options(backend="gloo", timeout=7.5, quick=True)):
        params = check.make_context("check", options.argv()).params
        assert Options(params["backend"], params["timeout"], params["quick"]) == options
