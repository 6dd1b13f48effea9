"""Benchmark: `nccl-doctor logs` against `grep -c -E` on the same files and the same signatures.

    python bench/logs_speed.py [--gib 1] [--dir /tmp/nccl-doctor-bench] [--engine auto|portable]

Generates (once) a corpus of NCCL_DEBUG=INFO(+COLL) logs, 64 ranks on 8 hosts, with planted faults
(bench/logs_generate.py), then times in one run:
  grep -c -E -e SIG1 -e SIG2 ... FILES   (every catalog signature, translated to POSIX ERE)
  nccl-doctor logs --json DIR            (full diagnosis)
and prints both times, their ratio, nccl-doctor's peak RSS, and whether the diagnosis found the planted
root cause. Targets: ratio <= 1.0, RSS <= 300 MB.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "src"))

from logs_generate import write_corpus  # noqa: E402

from nccl_doctor.logs.signatures import grep_expression, signatures  # noqa: E402


def timed(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, int, bytes]:
    """Wall seconds, peak RSS (bytes) and stdout of one child process."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    out = proc.stdout.read() if proc.stdout else b""
    _, _, usage = os.wait4(proc.pid, 0)
    proc.returncode = 0
    return time.perf_counter() - start, usage.ru_maxrss * 1024, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/nccl-doctor-bench"))
    ap.add_argument("--engine", default="auto", choices=["auto", "hyperscan", "portable"])
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--hosts", type=int, default=8)
    ap.add_argument("--utf8-grep", action="store_true",
                    help="also time grep in a UTF-8 locale (much slower with many patterns: minutes per GiB)")
    args = ap.parse_args()

    corpus = args.dir / f"{args.gib:g}gib-{args.ranks}r-{args.hosts}h"
    if not (corpus / "truth.json").exists():
        t = time.perf_counter()
        truth = write_corpus(corpus, int(args.gib * (1 << 30)), args.ranks, args.hosts)
        (corpus / "truth.json").write_text(json.dumps(truth))
        print(f"generated corpus in {time.perf_counter() - t:.1f}s")
    truth = json.loads((corpus / "truth.json").read_text())
    files = sorted(str(p) for p in corpus.rglob("*.log"))
    size = sum(os.path.getsize(f) for f in files)
    print(f"corpus: {corpus} - {len(files)} files, {size / (1 << 30):.2f} GiB")

    patterns = [grep_expression(s.pattern) for s in signatures()]
    grep_cmd = ["grep", "-c", "-E"] + [arg for p in patterns for arg in ("-e", p)] + files
    subprocess.run(["cat", *files], stdout=subprocess.DEVNULL)  # warm the page cache for both
    results = {}
    locales = ["C"] + (["C.UTF-8"] if args.utf8_grep else [])
    for label, env in ((f"grep (LC_ALL={loc})", {**os.environ, "LC_ALL": loc}) for loc in locales):
        seconds, _, out = timed(grep_cmd, env)
        matches = sum(int(line.rsplit(b":", 1)[-1]) for line in out.splitlines() if line.strip())
        results[label] = seconds
        print(f"{label:22s} {seconds:7.2f} s   {size / seconds / (1 << 20):7.0f} MiB/s   {matches} matching lines")
    doctor_cmd = [sys.executable, "-m", "nccl_doctor", "logs", "--json", "--engine", args.engine, str(corpus)]
    seconds, rss, out = timed(doctor_cmd)
    report = json.loads(out)
    primary = report["findings"][0] if report["findings"] else {}
    ok = primary.get("cause") == truth["cause"] and truth["fault_rank"] in primary.get("ranks", [])
    print(f"{'nccl-doctor logs':22s} {seconds:7.2f} s   {size / seconds / (1 << 20):7.0f} MiB/s   "
          f"peak RSS {rss / (1 << 20):.0f} MB   engine {report['facts']['inputs']['engine']}")
    for label, grep_seconds in results.items():
        print(f"ratio nccl-doctor / {label}: {seconds / grep_seconds:.2f}")
    print(f"diagnosis: {primary.get('cause')} ranks {primary.get('ranks')} - "
          f"{'planted root cause found' if ok else 'WRONG, expected ' + truth['cause']}")


if __name__ == "__main__":
    main()
