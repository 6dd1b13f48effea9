"""How fast is `nccl-doctor check`, healthy and with a hang?

1. `check --local 4 --quick` end to end (target on a 2-core machine: under 20 s), median of 3 runs,
   with the time of each stage.
2. Stall detection: rank 3 stalls before all_reduce; how long after the op deadline is it named, and
   how long does the whole run take (target: within the deadline plus 5 s), at the default deadline
   and at a short one.

    .venv/bin/python bench/check_speed.py
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time


def check(*args: str, fault: str | None = None) -> tuple[dict, float]:
    env = {**os.environ, **({"NCCL_DOCTOR_FAULT": fault} if fault else {})}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "nccl_doctor", "check", "--json", *args], capture_output=True,
                          text=True, env=env, timeout=300)
    return json.loads(done.stdout), time.perf_counter() - started


def healthy(runs: int = 3) -> None:
    results = [check("--local", "4", "--quick") for _ in range(runs)]
    assert all(r["verdict"] != "error" for r, _ in results), results[0][0]["findings"]
    walls = [t for _, t in results]
    print(f"check --local 4 --quick: median {statistics.median(walls):.2f} s "
          f"(runs: {', '.join(f'{t:.2f}' for t in walls)}; target < 20 s)")
    for stage in results[0][0]["facts"]["stages"]:
        print(f"    {stage['title']:<36} {stage['status']:<8} {stage['seconds']:.2f} s")


def stall(deadline: float) -> None:
    report, wall = check("--local", "4", "--quick", "--timeout", str(deadline),
                         fault="stall:rank=3:stage=collectives:op=all_reduce")
    first = report["findings"][0]
    assert first["cause"] == "rank-hang" and first["ranks"] == [3], first
    ops = {c["op"]: c["seconds"] for c in report["facts"]["collectives"]}
    stage = next(s for s in report["facts"]["stages"] if s["name"] == "collectives")
    named_after = stage["seconds"] - ops.get("barrier", 0.0)
    print(f"stall, deadline {deadline:g} s: rank 3 named {named_after - deadline:+.2f} s after the op deadline "
          f"(collectives stage {stage['seconds']:.2f} s); whole run {wall:.2f} s")


if __name__ == "__main__":
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}")
    healthy()
    stall(20.0)
    stall(5.0)
