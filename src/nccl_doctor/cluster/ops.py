"""The collectives, one table: each entry states only what is specific to it.

As in nccl-tests, `count` is the element count of the message size S the op is benchmarked at
(all_gather: the gathered output; reduce_scatter: the input; all_to_all: each rank's whole buffer),
and the bus bandwidth is algbw * bus_factor(n) with algbw = S / time. Inputs are small integers, so
every sum is exact in any floating type and the result can be checked element by element.
`check` (and later `bench`) drive every entry through the same three calls: buffers, launch, expected.

`bench` also chooses what nccl-tests lets one choose: the reduction, the root and the data type (a
`Spec`, carried by the buffers), and the layout: out of place (separate buffers) or in place (the
smaller buffer is this rank's chunk of the larger one, as nccl-tests lays it out). `layouts` names
the forms torch runs without an extra copy: all_reduce, broadcast and reduce exist only in place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

ROOT = 0
PATTERN = 13  # values 1..13: a sum over n ranks is at most 13n, exact in float32 for any world size
OUT_OF_PLACE, IN_PLACE = "out-of-place", "in-place"
REDOPS = ("sum", "prod", "min", "max", "avg")
# Largest integer up to which every integer is exact in the type (floats), or its maximum (integers).
EXACT_UP_TO = {"float16": 2**11, "bfloat16": 2**8, "float32": 2**24, "float64": 2**53,
               "int8": 2**7 - 1, "uint8": 2**8 - 1, "int32": 2**31 - 1, "int64": 2**63 - 1}


@dataclass(frozen=True)
class Spec:
    """What a caller asks of a collective besides its size: the reduction, the root, the input range."""

    op: str = "sum"  # one of REDOPS, for the ops that reduce
    root: int = ROOT  # for broadcast and reduce
    levels: int = PATTERN  # inputs take the values 1..levels (see levels_for)


SPEC = Spec()


def levels_for(op: str, dtype: Any, world: int) -> int:
    """The widest input range 1..L (at most PATTERN) whose reduction over `world` ranks is exact in `dtype`.

    Every partial result is then an integer the type holds exactly, so any reduction order gives the
    same bits; only avg divides, and is compared with a tolerance.
    """
    limit = EXACT_UP_TO.get(str(dtype).removeprefix("torch."), 2**24)
    if op == "prod":
        return 2 if 2**world <= limit else 1
    if op in ("min", "max"):
        return min(PATTERN, limit)
    return max(1, min(PATTERN, limit // world))


def fill(rank: int, count: int, like: Any, levels: int = PATTERN) -> Any:
    """The input of `rank`: element i holds (i + rank) % levels + 1."""
    import torch

    idx = torch.arange(count, device=like.device, dtype=torch.int64)
    return ((idx + rank) % levels + 1).to(like.dtype)


def summed(world: int, count: int, like: Any, offset: int = 0) -> Any:
    """Sum over all ranks of their inputs, for elements offset..offset+count."""
    import torch

    idx = torch.arange(offset, offset + count, device=like.device, dtype=torch.int64)
    total = sum((idx + r) % PATTERN + 1 for r in range(world))
    return total.to(like.dtype)


def reduced(spec: Spec, world: int, count: int, like: Any, offset: int = 0) -> Any:
    """All ranks' inputs combined with spec.op, for elements offset..offset+count (exact: see levels_for)."""
    import torch

    idx = torch.arange(offset, offset + count, device=like.device, dtype=torch.int64)
    combine = {"sum": torch.add, "avg": torch.add, "prod": torch.mul, "min": torch.minimum,
               "max": torch.maximum}[spec.op]
    total = (idx + 0) % spec.levels + 1
    for r in range(1, world):
        total = combine(total, (idx + r) % spec.levels + 1)
    if spec.op == "avg":
        return (total.double() / world).to(like.dtype)
    return total.to(like.dtype)


@dataclass
class Buffers:
    send: Any
    recv: Any
    spec: Spec = SPEC


@dataclass(frozen=True)
class Collective:
    name: str
    bus_factor: Callable[[int], float]  # nccl-tests busBw = algBw * factor(nranks)
    counts: Callable[[int, int], tuple[int, int]]  # (count, nranks) -> (send elements, recv elements)
    launch: Callable[[Buffers, int, int, bool], Any]  # (buffers, rank, nranks, async_op) -> Work | None
    expected: Callable[..., Any]  # (rank, nranks, count, like, spec=SPEC) -> what recv must hold
    reduces: bool = False  # takes a reduction (nccl-tests' redop column)
    rooted: bool = False  # takes a root (nccl-tests' root column)
    per_rank_count: bool = False  # nccl-tests' count column is each rank's chunk, count // nranks
    layouts: tuple[str, ...] = (OUT_OF_PLACE, IN_PLACE)  # the forms torch runs without an extra copy
    min_ranks: int = 1  # below this the op has no peer to run with (Gloo cannot send to itself)

    def buffers(self, rank: int, nranks: int, count: int, like: Any, spec: Spec = SPEC,
                in_place: bool = False) -> Buffers:
        """Input filled with this rank's pattern; output filled with a value no correct result holds."""
        import torch

        send_n, recv_n = self.counts(count, nranks)
        blank = -1 if like.dtype != torch.uint8 else 0  # every correct result is at least 1
        if not in_place:
            send = fill(rank, send_n, torch.empty(0, dtype=like.dtype, device=like.device), spec.levels)
            recv = torch.full((recv_n,), blank, dtype=like.dtype, device=like.device)
            return Buffers(send, recv, spec)
        whole = torch.full((max(send_n, recv_n),), blank, dtype=like.dtype, device=like.device)
        send = whole[rank * send_n:(rank + 1) * send_n] if send_n < recv_n else whole
        recv = whole[rank * recv_n:(rank + 1) * recv_n] if recv_n < send_n else whole
        send.copy_(fill(rank, send_n, whole, spec.levels))
        return Buffers(send, recv, spec)

    def check(self, bufs: Buffers, rank: int, nranks: int, count: int) -> list[str]:
        """Element-by-element comparison; a few lines describing the first wrong elements, if any."""
        return self.verify(bufs, rank, nranks, count)[1]

    def verify(self, bufs: Buffers, rank: int, nranks: int, count: int) -> tuple[int, list[str]]:
        """(how many elements are wrong, a line describing the first ones)."""
        import torch

        want = self.expected(rank, nranks, count, bufs.recv, bufs.spec)
        if want is None:  # e.g. reduce on a non-root rank: nothing defined to check
            return 0, []
        got = bufs.recv
        if bufs.spec.op == "avg" and got.is_floating_point():  # a division: exact only up to rounding
            bad = ~torch.isclose(got.double(), want.double(), rtol=nranks * torch.finfo(got.dtype).eps, atol=0)
        else:
            bad = got != want
        wrong = bad.nonzero().flatten()
        if wrong.numel() == 0:
            return 0, []
        first = wrong[:3].tolist()
        shown = ", ".join(f"[{i}] = {got[i].item():g}, expected {want[i].item():g}" for i in first)
        return wrong.numel(), [f"{wrong.numel()} of {got.numel()} elements wrong: {shown}"]

    def param_count(self, count: int, nranks: int) -> int:
        """The count nccl-tests prints for message size `count` (elements)."""
        return count // nranks if self.per_rank_count else count

    def bus_bandwidth(self, count: int, elem_size: int, seconds: float, nranks: int) -> float:
        """Bytes per second on the bus, the figure nccl-tests prints as busbw."""
        return count * elem_size / seconds * self.bus_factor(nranks) if seconds > 0 else 0.0


def _dist() -> Any:
    import torch.distributed as dist

    return dist


def _redop(name: str) -> Any:
    ops = _dist().ReduceOp
    return {"sum": ops.SUM, "prod": ops.PRODUCT, "min": ops.MIN, "max": ops.MAX, "avg": ops.AVG}[name]


def _all_gather(b: Buffers, rank: int, n: int, async_op: bool) -> Any:
    dist = _dist()
    op = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    return op(b.recv, b.send, async_op=async_op)


def _reduce_scatter(b: Buffers, rank: int, n: int, async_op: bool) -> Any:
    dist = _dist()
    op = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    return op(b.recv, b.send, op=_redop(b.spec.op), async_op=async_op)


def _all_reduce(b: Buffers, rank: int, n: int, async_op: bool) -> Any:
    b.recv.copy_(b.send)  # in place, as applications call it (a no-op when the buffers are one)
    return _dist().all_reduce(b.recv, op=_redop(b.spec.op), async_op=async_op)


def _broadcast(b: Buffers, rank: int, n: int, async_op: bool) -> Any:
    if rank == b.spec.root:
        b.recv.copy_(b.send)
    return _dist().broadcast(b.recv, src=b.spec.root, async_op=async_op)


def _reduce(b: Buffers, rank: int, n: int, async_op: bool) -> Any:
    b.recv.copy_(b.send)
    return _dist().reduce(b.recv, dst=b.spec.root, op=_redop(b.spec.op), async_op=async_op)


def _all_to_all(b: Buffers, rank: int, n: int, async_op: bool) -> Any:
    return _dist().all_to_all_single(b.recv, b.send, async_op=async_op)


class _Works:
    """Several point-to-point works waited on as one."""

    def __init__(self, works: list) -> None:
        self.works = works

    def wait(self, *args: Any) -> bool:
        return all(w.wait(*args) is not False for w in self.works)


def _sendrecv(b: Buffers, rank: int, n: int, async_op: bool) -> Any:
    """Ring: send to rank+1, receive from rank-1, with isend/irecv."""
    dist = _dist()
    works = [dist.isend(b.send, (rank + 1) % n), dist.irecv(b.recv, (rank - 1) % n)]
    return _Works(works) if async_op else _Works(works).wait()


def _chunk_of_sum(rank: int, n: int, count: int, like: Any, spec: Spec = SPEC) -> Any:
    return reduced(spec, n, count // n, like, offset=rank * (count // n))


def _all_to_all_expected(rank: int, n: int, count: int, like: Any, levels: int = PATTERN) -> Any:
    """Chunk j of the output is chunk `rank` of rank j's input."""
    import torch

    chunk = count // n
    return torch.cat([fill(j, count, like, levels)[rank * chunk:(rank + 1) * chunk] for j in range(n)])


def _whole(count: int, n: int) -> tuple[int, int]:
    return count, count


COLLECTIVES: dict[str, Collective] = {c.name: c for c in [
    Collective("all_reduce", lambda n: 2 * (n - 1) / n, _whole, _all_reduce,
               lambda r, n, c, like, s=SPEC: reduced(s, n, c, like), reduces=True, layouts=(IN_PLACE,)),
    Collective("broadcast", lambda n: 1.0, _whole, _broadcast,
               lambda r, n, c, like, s=SPEC: fill(s.root, c, like, s.levels), rooted=True, layouts=(IN_PLACE,)),
    Collective("reduce", lambda n: 1.0, _whole, _reduce,
               lambda r, n, c, like, s=SPEC: reduced(s, n, c, like) if r == s.root else None,
               reduces=True, rooted=True, layouts=(IN_PLACE,)),
    Collective("all_gather", lambda n: (n - 1) / n, lambda c, n: (c // n, c // n * n), _all_gather,
               lambda r, n, c, like, s=SPEC: _gathered(n, c, like, s.levels), per_rank_count=True),
    Collective("reduce_scatter", lambda n: (n - 1) / n, lambda c, n: (c // n * n, c // n), _reduce_scatter,
               _chunk_of_sum, reduces=True, per_rank_count=True),
    Collective("all_to_all", lambda n: (n - 1) / n, lambda c, n: (c // n * n, c // n * n), _all_to_all,
               lambda r, n, c, like, s=SPEC: _all_to_all_expected(r, n, c // n * n, like, s.levels),
               per_rank_count=True, layouts=(OUT_OF_PLACE,)),  # aliased all_to_all is undefined (nccl-tests: unchecked)
    Collective("sendrecv", lambda n: 1.0, _whole, _sendrecv,
               lambda r, n, c, like, s=SPEC: fill((r - 1) % n, c, like, s.levels),
               layouts=(OUT_OF_PLACE,), min_ranks=2),  # so is sending from the buffer being received into
]}


def _gathered(n: int, count: int, like: Any, levels: int = PATTERN) -> Any:
    import torch

    return torch.cat([fill(j, count // n, like, levels) for j in range(n)])
