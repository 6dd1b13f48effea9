"""How long `--local` ranks outlive a parent that is SIGKILLed (no chance to reap them): target below 5 s.

    python bench/local_orphans.py [--runs 5] [--ranks 2]

Each run starts `nccl-doctor check --local N --timeout 120` with one rank stalled for good (so nothing but the
parent's death ends the ranks before 120 s), waits until every rank is up, SIGKILLs the parent and measures
until no process of the run is left. Prints each run and the worst.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
import uuid

import psutil


def tagged(tag: str) -> list[int]:
    found = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if proc.environ().get("NCCL_DOCTOR_BENCH_TAG") == tag:
                found.append(proc.pid)
        except psutil.Error:
            continue
    return found


def one_run(ranks: int) -> float:
    tag = uuid.uuid4().hex
    env = {**os.environ, "NCCL_DOCTOR_BENCH_TAG": tag, "NCCL_DOCTOR_FAULT": "stall:rank=1:stage=collectives"}
    parent = subprocess.Popen([sys.executable, "-m", "nccl_doctor", "check", "--local", str(ranks), "--timeout", "120"],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 90
    while len(tagged(tag)) < ranks + 1 and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(3)  # every rank inside its stages
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    killed = time.monotonic()
    while tagged(tag) and time.monotonic() - killed < 150:
        time.sleep(0.05)
    took = time.monotonic() - killed
    for pid in tagged(tag):  # never leave anything behind, whatever the result
        os.kill(pid, signal.SIGKILL)
    return took


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--ranks", type=int, default=2)
    args = parser.parse_args()
    times = []
    for run in range(args.runs):
        times.append(one_run(args.ranks))
        print(f"run {run + 1}: ranks gone {times[-1]:.2f} s after the parent was killed", flush=True)
    print(f"\n{args.ranks} ranks, {args.runs} runs, load average {os.getloadavg()[0]:.1f}: worst {max(times):.2f} s "
          f"(target < 5 s)")


if __name__ == "__main__":
    main()
