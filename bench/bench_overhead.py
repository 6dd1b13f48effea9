"""Does `nccl-doctor bench` distort what it measures? Its all_reduce busbw against a hand-written loop.

The hand-written loop is a minimal torch.distributed program: init_process_group, warm-up, barrier,
ITERS timed all_reduce, barrier, max across ranks. Two comparisons, over the same sizes and iterations:

  tool    `nccl-doctor bench all_reduce --local N --json` (the whole tool: rendezvous, stages, heartbeats,
          store traffic between sizes) against the loop as its own program; whole runs interleaved
          (tool, loop, loop, tool, ...) so that load from elsewhere hits both alike; medians per size.
  inline  in one process group, per size and repetition, the harness' own timing call (what the
          sweep stage runs) and the loop back to back, in alternating order; medians per size. On a
          shared, loaded machine this is the sharper test: both see the same moment's load.
  cost    (always printed first) the fixed cost the harness adds to each timed iteration: its launch
          call against a bare dist.all_reduce in one process, fastest of alternating blocks. Divided by
          an iteration's time it bounds the distortion where load makes the side-by-side figures scatter.

The ratio is the median of the ratios of measurements taken next to each other in time (paired), which
cancels load that drifts over seconds; the busbw columns are plain medians; `best` compares each
side's best run (load only ever slows a run down).
Target: at 1 MiB and above the two busbw figures agree within 5 %.

    .venv/bin/python bench/bench_overhead.py [--mode both|tool|inline|cost] [--ranks 4] [--reps 5] [--maxbytes 67108864]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

TARGET = 0.05
MIN_SIZE = 1 << 20


def hand_loop(sizes: list[int], iters: int, warmup: int) -> None:
    """One rank of the minimal program (RANK, WORLD_SIZE, MASTER_* in the environment)."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    n, rank = dist.get_world_size(), dist.get_rank()
    results = {}
    for size in sizes:
        t = torch.ones(size // 4)
        for _ in range(warmup):
            dist.all_reduce(t)
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(t)
        elapsed = torch.tensor([(time.perf_counter() - start) / iters])
        dist.barrier()
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)  # the slowest rank's time, as the tool reports
        results[size] = size / elapsed.item() / 1e9 * 2 * (n - 1) / n
    if rank == 0:
        print(json.dumps({str(k): v for k, v in results.items()}), flush=True)
    dist.destroy_process_group()


def inline_pairs(sizes: list[int], iters: int, warmup: int, reps: int) -> None:
    """One rank: per size and repetition, the harness' timing call and the hand loop, order alternating."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    from nccl_doctor.cluster.bench.harness import time_op
    from nccl_doctor.cluster.bench.sweep import busbw_of
    from nccl_doctor.cluster.ops import COLLECTIVES, Spec

    dist.init_process_group("gloo")
    n, rank = dist.get_world_size(), dist.get_rank()
    entry, like, spec = COLLECTIVES["all_reduce"], torch.empty(0), Spec()

    def slowest(seconds: float) -> float:
        t = torch.tensor([seconds])
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.item()

    def harness(size: int) -> float:
        us = time_op(entry, size // 4, rank, n, like, spec, in_place=True, iters=iters, warmup=warmup,
                     check=False, wait=timedelta(seconds=300))["us"]
        return busbw_of("all_reduce", size, slowest(us * 1e-6) * 1e6, n)

    def hand(size: int) -> float:
        t = torch.ones(size // 4)
        for _ in range(warmup):
            dist.all_reduce(t)
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(t)
        elapsed = time.perf_counter() - start
        dist.barrier()
        return size / (slowest(elapsed) / iters) / 1e9 * 2 * (n - 1) / n

    found: dict[str, dict[int, list[float]]] = {"tool": {s: [] for s in sizes}, "hand": {s: [] for s in sizes}}
    for rep in range(reps):
        for size in sizes:
            for name in (("tool", "hand") if rep % 2 == 0 else ("hand", "tool")):
                found[name][size].append(harness(size) if name == "tool" else hand(size))
    if rank == 0:
        print(json.dumps(found), flush=True)
    dist.destroy_process_group()


def call_cost(calls: int, blocks: int) -> dict[str, float]:
    """One process, world size 1: the harness' launch call against a bare dist.all_reduce, in alternating
    blocks; the fastest block of each estimates its fixed cost per call, which load cannot shrink."""
    import torch
    import torch.distributed as dist

    from nccl_doctor.cluster.ops import COLLECTIVES, Spec

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    entry = COLLECTIVES["all_reduce"]
    bufs = entry.buffers(0, 1, 256, torch.empty(0), Spec(), in_place=True)
    bare = torch.ones(256)
    best = {"tool": float("inf"), "hand": float("inf")}
    for block in range(blocks):
        for name in (("tool", "hand") if block % 2 == 0 else ("hand", "tool")):
            start = time.perf_counter()
            for _ in range(calls):
                if name == "tool":
                    entry.launch(bufs, 0, 1, False)
                else:
                    dist.all_reduce(bare)
            best[name] = min(best[name], (time.perf_counter() - start) / calls * 1e6)
    dist.destroy_process_group()
    return best


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(ranks: int, worker: str, *args: str) -> str:
    """Run `worker` on `ranks` processes of this script; rank 0's last stdout line."""
    port = free_port()
    procs = []
    for rank in range(ranks):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": str(ranks), "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": str(port), "TORCH_CPP_LOG_LEVEL": "ERROR"}
        procs.append(subprocess.Popen([sys.executable, __file__, worker, *args], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL, text=True))
    try:
        out = procs[0].communicate(timeout=1800)[0]
        for p in procs[1:]:
            p.wait(timeout=60)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return out.strip().splitlines()[-1]


def run_hand(ranks: int, sizes: list[int], iters: int, warmup: int) -> dict[int, float]:
    line = spawn(ranks, "--worker", json.dumps(sizes), str(iters), str(warmup))
    return {int(k): v for k, v in json.loads(line).items()}


def run_tool(ranks: int, minbytes: int, maxbytes: int, iters: int, warmup: int) -> dict[int, float]:
    argv = [sys.executable, "-m", "nccl_doctor", "bench", "all_reduce", "--local", str(ranks), "--backend", "gloo",
            "-b", str(minbytes), "-e", str(maxbytes), "-f", "2", "-n", str(iters), "-w", str(warmup), "-c", "0",
            "--json"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    report = json.loads(done.stdout)
    return {r["size"]: r["in-place"]["busbw"] for r in report["facts"]["sweep"]["rows"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=["both", "tool", "inline", "cost"], default="both")
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--minbytes", type=int, default=MIN_SIZE)
    parser.add_argument("--maxbytes", type=int, default=64 << 20)
    args = parser.parse_args()
    sizes = []
    size = args.minbytes
    while size <= args.maxbytes:
        sizes.append(size)
        size *= 2
    worst = 0.0
    cost = call_cost(500, 20)
    extra = cost["tool"] - cost["hand"]
    print(f"cost per call, world size 1 (fastest of 10 blocks of 500): harness launch {cost['tool']:.2f} us, "
          f"bare dist.all_reduce {cost['hand']:.2f} us: the harness adds {extra:.2f} us per timed iteration\n")
    if args.mode == "cost":
        return 0
    if args.mode in ("both", "inline"):
        started = time.monotonic()
        found = json.loads(spawn(args.ranks, "--inline", json.dumps(sizes), str(args.iters), str(args.warmup),
                                 str(args.reps)))
        tool = {int(k): v for k, v in found["tool"].items()}
        hand = {int(k): v for k, v in found["hand"].items()}
        title = f"inline: harness timing call vs hand loop, one process group, {args.reps} alternating pairs per size"
        worst = max(worst, report(title, args, sizes, tool, hand, time.monotonic() - started))
    if args.mode in ("both", "tool"):
        started = time.monotonic()
        tool, hand = {s: [] for s in sizes}, {s: [] for s in sizes}
        for rep in range(args.reps):
            order = ("tool", "hand") if rep % 2 == 0 else ("hand", "tool")
            for name in order:
                got = run_tool(args.ranks, args.minbytes, args.maxbytes, args.iters, args.warmup) if name == "tool" \
                    else run_hand(args.ranks, sizes, args.iters, args.warmup)
                for s in sizes:
                    (tool if name == "tool" else hand)[s].append(got[s])
        title = f"tool: `nccl-doctor bench all_reduce --local {args.ranks}` vs hand-loop program, {args.reps} " \
                f"interleaved runs each"
        worst = max(worst, report(title, args, sizes, tool, hand, time.monotonic() - started))
    return 0 if worst <= TARGET else 1


def report(title: str, args: argparse.Namespace, sizes: list[int], tool: dict[int, list[float]],
           hand: dict[int, list[float]], seconds: float) -> float:
    print(f"{title}\nall_reduce, gloo, {args.ranks} ranks on {os.cpu_count()} CPUs (load average "
          f"{os.getloadavg()[0]:.1f}), {args.iters} iterations, medians ({seconds:.0f} s)")
    print(f"{'size':>10}  {'nccl-doctor busbw':>18}  {'hand loop busbw':>16}  {'ratio':>6}  {'best':>6}  paired ratios")
    worst = 0.0
    for s in sizes:
        a, b = statistics.median(tool[s]), statistics.median(hand[s])
        pairs = sorted(x / y for x, y in zip(tool[s], hand[s]) if y)  # measured next to each other in time
        ratio = statistics.median(pairs) if pairs else float("nan")
        best = max(tool[s]) / max(hand[s])  # each side's least disturbed run
        worst = max(worst, abs(ratio - 1)) if s >= MIN_SIZE else worst
        print(f"{s:>10}  {a:>13.4f} GB/s  {b:>11.4f} GB/s  {ratio:>6.3f}  {best:>6.3f}  "
              f"{' '.join(f'{x:.2f}' for x in pairs)}")
    verdict = "within" if worst <= TARGET else "OUTSIDE"
    print(f"largest deviation at >= 1 MiB: {worst:.1%} ({verdict} the {TARGET:.0%} target)\n")
    return worst


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        hand_loop(json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
    elif len(sys.argv) > 1 and sys.argv[1] == "--inline":
        inline_pairs(json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    else:
        sys.exit(main())
