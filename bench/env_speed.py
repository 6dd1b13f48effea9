"""How long `nccl-doctor env` takes: probe.collect() in-process and the whole command, median of N runs.

    python bench/env_speed.py [--runs 15]

The target is well under a second on a host without GPUs. Prints one line per measurement.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time


def median_seconds(fn, runs: int) -> tuple[float, float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), max(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    runs = parser.parse_args().runs

    from nccl_doctor.probe import DERIVED, SECTION_TIMEOUT_S, SECTIONS, collect

    collect()  # warm the imports once
    med, worst = median_seconds(collect, runs)
    print(f"collect()                 median {med * 1000:7.1f} ms   max {worst * 1000:7.1f} ms   ({runs} runs)")
    for name, probe in SECTIONS.items():
        med, worst = median_seconds(lambda: probe(os.environ), runs)
        print(f"  {name:23} median {med * 1000:7.1f} ms   max {worst * 1000:7.1f} ms")
    for name, (probe, needs) in DERIVED.items():
        base = SECTIONS[needs](os.environ)
        med, worst = median_seconds(lambda: probe(os.environ, base, SECTION_TIMEOUT_S), runs)
        print(f"  {name:23} median {med * 1000:7.1f} ms   max {worst * 1000:7.1f} ms   (given the {needs} section)")
    for args in (["env"], ["env", "--json"], ["lint"]):
        command = [sys.executable, "-m", "nccl_doctor", *args]
        med, worst = median_seconds(lambda: subprocess.run(command, capture_output=True, timeout=60), runs)
        print(f"nccl-doctor {' '.join(args):13} median {med * 1000:7.1f} ms   max {worst * 1000:7.1f} ms   "
              f"(whole process: interpreter start, imports, probes, output)")


if __name__ == "__main__":
    main()
