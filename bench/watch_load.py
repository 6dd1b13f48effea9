"""Does watch() cry wolf on an oversubscribed machine, and does it still name real stragglers and hangs?

    python bench/watch_load.py [--ranks 4] [--busy 4] [--minutes 5] [--hang-after 30] [--only healthy,slower,hang]

Three runs of the small Gloo DDP loop of tests/fixtures/runtime/train_loop.py (real CPU work each step as
well as simulated device time), each while --busy processes spin on the CPU (4 on a 2-core machine: every
rank gets well under a core, and when it runs is up to the scheduler):

- healthy: --minutes of training; every warning or error watch() reports is false.
- slower: from step --resume-at, one rank does --slow-factor times the others' work; counts how many
  steps after the slowdown the straggler was named, and what was reported before it (false).
- hang: at step --resume-at one rank stops before an all_reduce; counts the seconds from the stop to
  the rank-hang finding, and what was reported before it (false).

Targets: healthy: 0 false errors, at most 1 false warning; slower: named within 20 steps; hang: named
within hang_after + 5 s. Prints the figures, the machine's load and, for each run, the findings.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "runtime"))

from ranks import TRAIN_LOOP, Ranks  # noqa: E402

SPIN = "while True: pass"


class Busy:
    """`count` processes that spin on the CPU until the block ends (each in its own session, always reaped)."""

    def __init__(self, count: int) -> None:
        self.procs = [subprocess.Popen([sys.executable, "-c", SPIN], start_new_session=True) for _ in range(count)]

    def __enter__(self) -> Busy:
        return self

    def __exit__(self, *exc: object) -> None:
        for p in self.procs:
            p.kill()
        for p in self.procs:
            p.wait(timeout=10)


class Load:
    """The 1-minute load average, sampled while a run goes on."""

    def __init__(self) -> None:
        self.samples: list[float] = []

    def sample(self) -> None:
        self.samples.append(os.getloadavg()[0])

    def text(self) -> str:
        if not self.samples:
            return "?"
        return f"load average {statistics.median(self.samples):.1f} (min {min(self.samples):.1f}, " \
               f"max {max(self.samples):.1f}) on {os.cpu_count()} CPUs"


def job_args(args: argparse.Namespace, scenario: str) -> list[str]:
    return [str(TRAIN_LOOP), "--scenario", scenario, "--culprit", str(args.culprit), "--resume-at",
            str(args.resume_at), "--slow-factor", str(args.slow_factor), "--compute", str(args.compute),
            "--cpu-work", str(args.cpu_work), "--hang-after", str(args.hang_after), "--pg-timeout",
            str(args.pg_timeout)]


def follow(job: Ranks, load: Load, until, limit: float) -> list[dict]:
    """Rank 0's JSON lines once until(lines) holds or `limit` seconds passed; samples the load meanwhile."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        lines = job.lines(0)
        if until(lines):
            return lines
        load.sample()
        time.sleep(1.0)
    return job.lines(0)


def described(found: list[dict]) -> str:
    return "; ".join(f"{f['finding']['severity']} {f['finding']['cause']} ranks {f['finding']['ranks']} "
                     f"at step {f.get('step')}" for f in found) or "none"


def healthy(args: argparse.Namespace) -> dict:
    load = Load()
    with Busy(args.busy), Ranks(job_args(args, "healthy") + ["--duration", str(args.minutes * 60)], args.ranks) as job:
        lines = follow(job, load, lambda ls: any("steps" in line for line in ls), args.minutes * 60 + 120)
    end = next((line for line in lines if "steps" in line), {})
    live = [line for line in lines if "finding" in line]
    final = [f for f in (end.get("report") or {}).get("findings", []) if f["severity"] != "info"]
    return {"steps": end.get("steps"), "step_time": end.get("step_time"), "load": load.text(),
            "errors": sum(line["finding"]["severity"] == "error" for line in live),
            "warnings": sum(line["finding"]["severity"] == "warning" for line in live),
            "found": described(live), "final": ", ".join(f"{f['severity']} {f['cause']}" for f in final) or "none",
            "completed": bool(end)}


def slower(args: argparse.Namespace) -> dict:
    load = Load()

    def named(lines: list[dict]) -> bool:
        return any(_names_straggler(line, args.culprit) for line in lines) or any("steps" in line for line in lines)

    argv = job_args(args, "slower") + ["--steps", str(args.resume_at + args.straggler_steps)]
    with Busy(args.busy), Ranks(argv, args.ranks) as job:
        lines = follow(job, load, named, args.straggler_limit)
    live = [line for line in lines if "finding" in line]
    hit = next((line for line in live if _names_straggler(line, args.culprit)), None)
    before = live[:live.index(hit)] if hit else live
    return {"named_after_steps": hit["step"] - args.resume_at if hit and hit.get("step") is not None else None,
            "message": hit["finding"]["message"] if hit else None, "load": load.text(),
            "false_before": described(before),
            "false_errors": sum(line["finding"]["severity"] == "error" for line in before)}


def _names_straggler(line: dict, culprit: int) -> bool:
    f = line.get("finding")
    return bool(f) and f["cause"] == "straggler-rank" and f["ranks"] == [culprit]


def hang(args: argparse.Namespace) -> dict:
    load = Load()

    def named(lines: list[dict]) -> bool:
        return any(line.get("finding", {}).get("cause") == "rank-hang" for line in lines)

    argv = job_args(args, "hang") + ["--steps", str(args.resume_at + 10_000)]
    with Busy(args.busy), Ranks(argv, args.ranks) as job:
        lines = follow(job, load, named, args.hang_after + 120)
        stopped = next((line for line in job.lines(args.culprit) if "stopped" in line), None)
    live = [line for line in lines if "finding" in line]
    hit = next((line for line in live if line["finding"]["cause"] == "rank-hang"), None)
    before = live[:live.index(hit)] if hit else live
    return {"named_after_s": hit["at"] - stopped["at"] if hit and stopped else None,
            "right_rank": bool(hit) and hit["finding"]["ranks"] == [args.culprit],
            "message": hit["finding"]["message"] if hit else None, "load": load.text(),
            "false_before": described(before),
            "false_errors": sum(line["finding"]["severity"] == "error" for line in before)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--busy", type=int, default=4, help="processes spinning on the CPU during every run")
    parser.add_argument("--minutes", type=float, default=5.0, help="length of the healthy run")
    parser.add_argument("--compute", type=float, default=0.25, help="simulated device seconds per step")
    parser.add_argument("--cpu-work", type=int, default=150, help="128x128 matrix products per step")
    parser.add_argument("--culprit", type=int, default=2)
    parser.add_argument("--resume-at", type=int, default=50, help="the step at which the fault starts")
    parser.add_argument("--slow-factor", type=float, default=1.5)
    parser.add_argument("--straggler-steps", type=int, default=150, help="steps run after the slowdown")
    parser.add_argument("--straggler-limit", type=float, default=600.0, help="seconds before giving up")
    parser.add_argument("--hang-after", type=float, default=30.0)
    parser.add_argument("--pg-timeout", type=float, default=1800.0)
    parser.add_argument("--only", default="healthy,slower,hang")
    args = parser.parse_args()
    runs = args.only.split(",")
    print(f"{args.ranks} Gloo ranks, {args.busy} busy processes on {os.cpu_count()} CPUs; "
          f"step: {args.compute * 1e3:.0f} ms simulated device time + {args.cpu_work} matrix products", flush=True)
    if "healthy" in runs:
        h = healthy(args)
        rate = f"{h['step_time'] * 1e3:.0f} ms/step" if h["step_time"] else "did not complete"
        print(f"\nhealthy, {args.minutes:g} min: {h['steps']} steps ({rate}), {h['load']}\n"
              f"  false errors:   {h['errors']}   (target 0)\n"
              f"  false warnings: {h['warnings']}   (target <= 1)\n"
              f"  live findings: {h['found']}\n  final report (warnings, errors): {h['final']}", flush=True)
    if "slower" in runs:
        s = slower(args)
        print(f"\nslower: rank {args.culprit} {args.slow_factor:g}x slower from step {args.resume_at}, {s['load']}\n"
              f"  named after: {s['named_after_steps']} steps   (target <= 20)\n"
              f"  reported before it: {s['false_before']}\n  message: {s['message']}", flush=True)
    if "hang" in runs:
        g = hang(args)
        named = f"{g['named_after_s']:.1f} s" if g["named_after_s"] is not None else "never"
        print(f"\nhang: rank {args.culprit} stops at step {args.resume_at}, hang_after {args.hang_after:g} s, "
              f"{g['load']}\n"
              f"  named after: {named}   (target <= {args.hang_after + 5:g} s); right rank: {g['right_rank']}\n"
              f"  reported before it: {g['false_before']}\n  message: {g['message']}", flush=True)


if __name__ == "__main__":
    main()
