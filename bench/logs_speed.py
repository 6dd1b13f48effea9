"""Benchmark: `nccl-doctor logs` against grep on the same files, its memory, and its start-up time.

    python bench/logs_speed.py [--gib 1 10] [--dir /tmp/nccl-doctor-bench] [--engine auto|hyperscan|portable]
                               [--no-all-patterns]

Generates (once per size) a corpus of NCCL_DEBUG=INFO(+COLL) logs, 64 ranks on 8 hosts, mostly the channel and
init lines of communicators made as the job goes, training lines and COLL calls, with planted faults
(bench/logs_generate.py: rank 37's IB completion error, the last host on another NCCL release). Then, per
size, on the warm page cache and in one run:
  grep (anchor)         LC_ALL=C grep -c -E 'A1|...|A14' FILES: the 14 messages a user would grep for
  grep (all patterns)   LC_ALL=C grep -c -i -E -e SIG1 -e SIG2 ... FILES: every catalog signature as POSIX ERE
  nccl-doctor logs      nccl-doctor logs --json DIR, as installed (full diagnosis)
and prints the times (grep's anchor and nccl-doctor: the median of three runs), the ratios, nccl-doctor's
peak RSS (its processes together, sampled every 20 ms in a run of its own: on two cores the sampler would slow
the timed run) and whether both planted faults are named. Last, start-up: `nccl-doctor logs --json` on a one-line file with an
empty cache directory (compiles the signature database) and again (loads it).
Targets: ratio to the anchor <= 1.0 (stretch 0.5), RSS <= 300 MB.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "src"))

from logs_generate import write_corpus  # noqa: E402

from nccl_doctor.logs.signatures import grep_expression, signatures  # noqa: E402

RUNS = 3  # timed runs of grep (anchor) and nccl-doctor: their median is printed
ANCHOR = ["NCCL WARN", "Watchdog caught collective operation timeout", "NCCL error", "ncclInternalError",
          "ncclSystemError", "ncclUnhandledCudaError", "ncclInvalidUsage", "ncclRemoteError",
          "Connection closed by remote peer", "Got completion from peer", "CUDA error", "out of memory",
          "NCCL version", "Init COMPLETE"]


def timed(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, bytes]:
    """Wall seconds and stdout of one command, with nothing else running here."""
    start = time.perf_counter()
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env).stdout
    return time.perf_counter() - start, out


def median_time(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, bytes]:
    """The median of RUNS timed runs (a 2-core machine's timings wander by a tenth)."""
    runs = [timed(cmd, env) for _ in range(RUNS)]
    return sorted(t for t, _ in runs)[len(runs) // 2], runs[-1][1]


def peak_rss(cmd: list[str], env: dict[str, str] | None = None) -> int:
    """Peak RSS in bytes of a command, its processes together, sampled every 20 ms. A run of its own: on two
    cores the sampler's own work would slow a command that keeps both busy, so it is not the timed one."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        try:
            root = psutil.Process(proc.pid)
            while not done.is_set():
                try:
                    rss = sum(p.memory_info().rss for p in [root, *root.children(recursive=True)])
                    peak[0] = max(peak[0], rss)
                except psutil.Error:
                    pass
                done.wait(0.02)
        except psutil.Error:
            pass

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, _, usage = os.wait4(proc.pid, 0)
    done.set()
    sampler.join()
    proc.returncode = 0
    return max(peak[0], usage.ru_maxrss * 1024)


def grep_lines(out: bytes) -> int:
    return sum(int(line.rsplit(b":", 1)[-1]) for line in out.splitlines() if line.strip())


def corpus_for(args: argparse.Namespace, gib: float) -> Path:
    corpus = args.dir / f"{gib:g}gib-{args.ranks}r-{args.hosts}h"
    if not (corpus / "truth.json").exists():
        t = time.perf_counter()
        truth = write_corpus(corpus, int(gib * (1 << 30)), args.ranks, args.hosts)
        (corpus / "truth.json").write_text(json.dumps(truth))
        print(f"generated {corpus} in {time.perf_counter() - t:.0f} s")
    return corpus


def run_size(args: argparse.Namespace, gib: float, doctor: list[str]) -> None:
    corpus = corpus_for(args, gib)
    truth = json.loads((corpus / "truth.json").read_text())
    files = sorted(str(p) for p in corpus.rglob("*.log"))
    size = sum(os.path.getsize(f) for f in files)
    mib = size / (1 << 20)
    print(f"\n== {gib:g} GiB: {corpus} - {len(files)} files, {size / (1 << 30):.2f} GiB, {psutil.cpu_count()} CPUs")
    subprocess.run(["cat", *files], stdout=subprocess.DEVNULL)  # warm the page cache for all
    c_locale = {**os.environ, "LC_ALL": "C"}
    times = {}
    seconds, out = median_time(["grep", "-c", "-E", "|".join(ANCHOR), *files], c_locale)
    times["grep (anchor, 14)"] = seconds
    print(f"{'grep (anchor, 14)':26s} {seconds:7.2f} s  {mib / seconds:6.0f} MiB/s  {grep_lines(out)} lines")
    if not args.no_all_patterns:
        patterns = [grep_expression(s.pattern) for s in signatures()]
        cmd = ["grep", "-c", "-i", "-E", *[a for p in patterns for a in ("-e", p)], *files]
        seconds, out = timed(cmd, c_locale)  # once: it takes several times as long
        times[f"grep (all {len(patterns)})"] = seconds
        print(f"{f'grep (all {len(patterns)})':26s} {seconds:7.2f} s  {mib / seconds:6.0f} MiB/s  {grep_lines(out)} lines")
    seconds, out = median_time([*doctor, str(corpus)])
    rss = peak_rss([*doctor, str(corpus)])
    report = json.loads(out)
    inputs = report["facts"]["inputs"]
    print(f"{'nccl-doctor logs':26s} {seconds:7.2f} s  {mib / seconds:6.0f} MiB/s  peak RSS {rss / 1e6:.0f} MB  "
          f"({inputs['engine']} engine, {inputs['lines']} lines)")
    for label, grep_seconds in times.items():
        print(f"ratio nccl-doctor / {label}: {seconds / grep_seconds:.2f}")
    named = {f["cause"]: f for f in report["findings"]}
    named.update({s["cause"]: s for f in report["findings"] for s in f.get("secondary", [])})
    ib = named.get(truth["cause"], {})
    mismatch = named.get(truth["also"], {})
    ok = truth["fault_rank"] in ib.get("ranks", []) and set(truth["also_hosts"]) <= set(mismatch.get("hosts", []))
    print(f"diagnosis: primary {report['findings'][0]['cause'] if report['findings'] else None}; "
          f"{truth['cause']} ranks {ib.get('ranks')}; {truth['also']} on {truth['also_hosts']}: "
          f"{'both planted faults named' if ok else 'MISSED'}")


def start_up(doctor: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "rank-0.log"
        log.write_text("node-1:1:1 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n")
        env = {**os.environ, "NCCL_DOCTOR_CACHE_DIR": str(Path(tmp) / "cache")}
        cold, _ = timed([*doctor, str(log)], env)
        warm = min(timed([*doctor, str(log)], env)[0] for _ in range(3))
        bare, _ = timed([sys.executable, "-c", "pass"])
    print(f"\nstart-up (`logs --json` on a one-line file): cold cache {cold:.2f} s, warm cache {warm:.2f} s "
          f"(python itself {bare:.2f} s)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gib", type=float, nargs="+", default=[1.0])
    ap.add_argument("--dir", type=Path, default=Path("/tmp/nccl-doctor-bench"))
    ap.add_argument("--engine", default="auto", choices=["auto", "hyperscan", "portable"])
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--hosts", type=int, default=8)
    ap.add_argument("--no-all-patterns", action="store_true", help="skip grep with every catalog pattern (slow)")
    args = ap.parse_args()
    doctor = [sys.executable, "-m", "nccl_doctor", "logs", "--json", "--engine", args.engine]
    for gib in args.gib:
        run_size(args, gib, doctor)
    start_up(doctor)


if __name__ == "__main__":
    main()
