"""The collectives table as bench uses it: reductions, roots, data types and in-place layouts.

Each collective's outcome is simulated here from the ranks' inputs, independently of the table's own
`expected`, and must pass the table's check; a corrupted element must not. Reducing in the data type
itself, in any order, must give the same bits as the exact result: that is what `levels_for` promises.
"""

import random

import pytest

torch = pytest.importorskip("torch")

from nccl_doctor.cluster.ops import (COLLECTIVES, IN_PLACE, OUT_OF_PLACE, REDOPS, SPEC, Spec,  # noqa: E402
                                             levels_for)

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int8, torch.uint8, torch.int32,
          torch.int64]
COMBINE = {"sum": torch.add, "avg": torch.add, "prod": torch.mul, "min": torch.minimum, "max": torch.maximum}


def reduce_exactly(op, tensors, n):
    total = tensors[0].double()
    for t in tensors[1:]:
        total = COMBINE[op](total, t.double())
    return total / n if op == "avg" else total


def simulate(name, op, root, sends, r, n, count):
    """What rank r's output holds after the collective, from everyone's inputs (float64)."""
    chunk = count // n
    if name == "all_reduce" or (name == "reduce" and r == root):
        return reduce_exactly(op, sends, n)
    if name == "reduce":
        return None
    if name == "broadcast":
        return sends[root].double()
    if name == "all_gather":
        return torch.cat([s.double() for s in sends])
    if name == "reduce_scatter":
        return reduce_exactly(op, sends, n)[r * chunk:(r + 1) * chunk]
    if name == "all_to_all":
        return torch.cat([s.double()[r * chunk:(r + 1) * chunk] for s in sends])
    return sends[(r - 1) % n].double()  # sendrecv: from the previous rank of the ring


def cases():
    for name, entry in COLLECTIVES.items():
        for op in (REDOPS if entry.reduces else ["sum"]):
            for dtype in DTYPES:
                if op == "avg" and not dtype.is_floating_point:
                    continue
                for layout in entry.layouts:
                    yield name, op, dtype, layout


@pytest.mark.parametrize("name,op,dtype,layout", list(cases()))
@pytest.mark.parametrize("n", [1, 3, 4])
def test_simulated_outcome_passes_the_check_and_corruption_does_not(name, op, dtype, layout, n):
    entry = COLLECTIVES[name]
    root = n - 1 if entry.rooted else 0
    spec = Spec(op, root, levels_for(op, dtype, n))
    count, like = 6 * n, torch.empty(0, dtype=dtype)
    bufs = [entry.buffers(r, n, count, like, spec, in_place=layout == IN_PLACE) for r in range(n)]
    sends = [b.send.clone() for b in bufs]
    for r, b in enumerate(bufs):
        outcome = simulate(name, op, root, sends, r, n, count)
        if outcome is None:
            assert entry.verify(b, r, n, count) == (0, [])  # nothing defined on a non-root rank
            continue
        b.recv.copy_(outcome.to(dtype))
        assert entry.verify(b, r, n, count) == (0, []), (r, b.recv, outcome)
        b.recv[count // n // 2] += 1  # one element off by one is caught
        wrong, [line] = entry.verify(b, r, n, count)
        assert wrong == 1 and line.startswith(f"1 of {b.recv.numel()} elements wrong")


@pytest.mark.parametrize("op", ["sum", "prod", "min", "max"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [2, 7, 16, 40])
def test_reducing_in_the_type_in_any_order_is_exact(op, dtype, n):
    spec = Spec(op, 0, levels_for(op, dtype, n))
    like = torch.empty(0, dtype=dtype)
    inputs = [COLLECTIVES["all_reduce"].buffers(r, n, 64, like, spec).send for r in range(n)]
    want = COLLECTIVES["all_reduce"].expected(0, n, 64, like, spec)
    order = list(range(n))
    for _ in range(3):
        random.shuffle(order)
        total = inputs[order[0]].clone()
        for r in order[1:]:
            total = COMBINE[op](total, inputs[r]).to(dtype)
        assert torch.equal(total, want)


def test_levels_keep_results_exact():
    assert levels_for("sum", torch.float32, 4) == 13 and levels_for("sum", "float32", 4) == 13
    assert levels_for("sum", torch.bfloat16, 32) == 8 and levels_for("sum", torch.bfloat16, 300) == 1
    assert levels_for("prod", torch.float16, 11) == 2 and levels_for("prod", torch.float16, 12) == 1
    assert levels_for("prod", torch.int8, 6) == 2 and levels_for("prod", torch.int8, 7) == 1
    assert levels_for("max", torch.int8, 1000) == 13
    assert SPEC == Spec("sum", 0, 13)  # check's calls, unchanged


def test_in_place_layouts_are_nccl_tests_ones():
    like, n, count = torch.empty(0), 4, 32
    ag = COLLECTIVES["all_gather"].buffers(2, n, count, like, in_place=True)
    assert ag.send.data_ptr() == ag.recv.data_ptr() + 2 * 8 * 4 and ag.recv.numel() == 32  # chunk 2 of the output
    rs = COLLECTIVES["reduce_scatter"].buffers(1, n, count, like, in_place=True)
    assert rs.recv.data_ptr() == rs.send.data_ptr() + 1 * 8 * 4 and rs.send.numel() == 32  # chunk 1 of the input
    ar = COLLECTIVES["all_reduce"].buffers(0, n, count, like, in_place=True)
    assert ar.send is ar.recv
    out = COLLECTIVES["all_gather"].buffers(2, n, count, like)
    assert out.send.data_ptr() != out.recv.data_ptr()


def test_layouts_and_columns_follow_torch_and_nccl_tests():
    forms = {name: entry.layouts for name, entry in COLLECTIVES.items()}
    assert forms["all_reduce"] == forms["broadcast"] == forms["reduce"] == (IN_PLACE,)  # torch has no other
    assert forms["all_to_all"] == forms["sendrecv"] == (OUT_OF_PLACE,)  # aliasing them is undefined
    assert forms["all_gather"] == forms["reduce_scatter"] == (OUT_OF_PLACE, IN_PLACE)
    assert {n for n, e in COLLECTIVES.items() if e.reduces} == {"all_reduce", "reduce", "reduce_scatter"}
    assert {n for n, e in COLLECTIVES.items() if e.rooted} == {"broadcast", "reduce"}
    assert [COLLECTIVES[n].param_count(1000, 8) for n in ("all_gather", "reduce_scatter", "all_to_all")] == [125] * 3
    assert COLLECTIVES["all_reduce"].param_count(1000, 8) == 1000


@pytest.mark.parametrize("n", [2, 3, 8, 64])
def test_bus_factors_are_nccl_tests_formulas(n):
    factor = {name: entry.bus_factor(n) for name, entry in COLLECTIVES.items()}
    assert factor["all_reduce"] == 2 * (n - 1) / n
    assert factor["all_gather"] == factor["reduce_scatter"] == factor["all_to_all"] == (n - 1) / n
    assert factor["broadcast"] == factor["reduce"] == factor["sendrecv"] == 1.0
