"""Overhead of nccl_doctor.watch() on a small Gloo DDP training loop: step time with and without it.

    python bench/watch_overhead.py [--ranks 2] [--steps 300] [--rounds 3] [--compute 0.02]

Runs with and without watch() alternate (so drift of the machine hits both alike); each run is a fresh
set of local rank processes; rank 0 reports its mean step time over the loop. Prints both medians and
the overhead in percent (target: below 1%).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "runtime"))

from ranks import TRAIN_LOOP, Ranks  # noqa: E402


def one_run(ranks: int, steps: int, compute: float, watched: bool) -> float:
    argv = [str(TRAIN_LOOP), "--scenario", "healthy", "--steps", str(steps), "--compute", str(compute)]
    with Ranks(argv + ([] if watched else ["--no-watch"]), ranks) as job:
        codes = job.wait(600)
        lines = job.lines(0)
    if codes != [0] * ranks:
        raise SystemExit(f"a rank failed: exit codes {codes}")
    return next(line["step_time"] for line in lines if "step_time" in line)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--compute", type=float, default=0.02, help="simulated compute per step, seconds")
    args = parser.parse_args()
    times: dict[bool, list[float]] = {False: [], True: []}
    for round_ in range(args.rounds):
        for watched in ((False, True) if round_ % 2 == 0 else (True, False)):
            seconds = one_run(args.ranks, args.steps, args.compute, watched)
            times[watched].append(seconds)
            print(f"round {round_ + 1}: {'with   ' if watched else 'without'} watch  {seconds * 1e3:8.3f} ms/step",
                  flush=True)
    base, watched = statistics.median(times[False]), statistics.median(times[True])
    print(f"\n{args.ranks} Gloo ranks, {args.steps} steps x {args.rounds} rounds, {args.compute * 1e3:.0f} ms compute")
    print(f"step time without watch(): {base * 1e3:.3f} ms (median)")
    print(f"step time with watch():    {watched * 1e3:.3f} ms (median)")
    print(f"overhead: {(watched - base) / base * 100:+.2f}%")


if __name__ == "__main__":
    main()
