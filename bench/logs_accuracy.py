"""Accuracy of `nccl-doctor logs` on labelled real cases: top-1 and top-3 per category, and calibration.

A case is a folder with the log(s) and a truth.json whose `category` the thread established. Top-1: the
primary finding's category is the truth. Top-3: the truth is among the first three distinct categories of
the findings in order, then of the causes folded under them.

    python bench/logs_accuracy.py                      # every real fixture and ../shared/logs, per category
    python bench/logs_accuracy.py DIR [DIR...]         # cases under these folders
    python bench/logs_accuracy.py --summary-only DIR   # totals only (score a blind batch without reading it)
    python bench/logs_accuracy.py --misses             # also list each miss
    python bench/logs_accuracy.py --nccl-doctor /other/venv/bin/nccl-doctor DIR   # another build
    python bench/logs_accuracy.py --record         # write tests/fixtures/logs/expected.json (the test's ratchet)

Each case runs `nccl-doctor logs --json` in a subprocess, so any build can be scored the same way.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "logs"
SHARED = ROOT.parent / "shared" / "logs"
TIMEOUT_S = 300
CONFIDENCE_BINS = ((0.0, 0.3), (0.3, 0.5), (0.5, 0.7), (0.7, 0.85), (0.85, 1.01))
RECORD = FIXTURES / "expected.json"  # what tests/test_logs_corpus.py holds every case to


def cases_under(roots: list[Path]) -> list[Path]:
    found: dict[str, Path] = {}
    for root in roots:
        for truth in sorted(root.rglob("truth.json")):
            case = truth.parent
            if "synthetic" in case.parts or json.loads(truth.read_text()).get("category") is None:
                continue  # synthetic logs test the rules; they say nothing about real-world accuracy
            # a case copied into the fixtures and still in ../shared/logs counts once; two logs of one thread twice
            found.setdefault(json.loads(truth.read_text()).get("source", "") + "/" + case.name, case)
    return sorted(found.values())


def diagnose(command: list[str], case: Path) -> dict:
    inputs = [str(p) for p in sorted(case.iterdir()) if p.name != "truth.json" and p.is_file()]
    try:
        proc = subprocess.run([*command, "logs", "--json", *inputs], capture_output=True, text=True,
                              timeout=TIMEOUT_S)
        report = json.loads(proc.stdout)
    except (subprocess.TimeoutExpired, json.JSONDecodeError) as exc:
        return {"error": f"{type(exc).__name__}: {proc.stderr[-200:] if 'proc' in locals() else exc}"}
    return report


def relative(case: Path) -> str:
    try:
        return str(case.resolve().relative_to(ROOT))
    except ValueError:
        return str(case)


def ranked_categories(report: dict) -> list[str]:
    findings = report.get("findings", [])
    ordered = [f["category"] for f in findings] + [s["category"] for f in findings for s in f.get("secondary", [])]
    return list(dict.fromkeys(ordered))


def score(command: list[str], cases: list[Path], jobs: int) -> list[dict]:
    def one(case: Path) -> dict:
        truth = json.loads((case / "truth.json").read_text())
        report = diagnose(command, case)
        ranked = ranked_categories(report)
        primary = report.get("findings", [{}])[0] if report.get("findings") else {}
        return {"case": str(case.relative_to(case.parents[1])), "case_path": relative(case), "truth": truth["category"],
                "got": ranked[0] if ranked else None, "cause": primary.get("cause"),
                "confidence": primary.get("confidence", 0.0), "top1": bool(ranked) and ranked[0] == truth["category"],
                "top3": truth["category"] in ranked[:3], "error": report.get("error")}

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(one, cases))


def record(results: list[dict]) -> None:
    """The ratchet: for each fixture case, the truth and whether the primary (top1) or the top three got it."""
    rows = {r["case_path"]: {"truth": r["truth"], "got": r["got"], "top1": r["top1"], "top3": r["top3"]}
            for r in results if r["case_path"].startswith("tests/fixtures/")}
    RECORD.write_text(json.dumps(dict(sorted(rows.items())), indent=1) + "\n", encoding="utf-8")
    print(f"recorded {len(rows)} cases in {RECORD.relative_to(ROOT)}", file=sys.stderr)


def table(results: list[dict]) -> str:
    per: dict[str, list[dict]] = defaultdict(list)
    for r in results:
        per[r["truth"]].append(r)
    lines = [f"{'category':28} {'cases':>5} {'top-1':>12} {'top-3':>12}"]
    for cat in sorted(per):
        rs = per[cat]
        lines.append(f"{cat:28} {len(rs):5} {fraction(rs, 'top1'):>12} {fraction(rs, 'top3'):>12}")
    lines.append(f"{'all':28} {len(results):5} {fraction(results, 'top1'):>12} {fraction(results, 'top3'):>12}")
    return "\n".join(lines)


def calibration(results: list[dict]) -> str:
    lines = ["primary confidence   cases   right"]
    for lo, hi in CONFIDENCE_BINS:
        rs = [r for r in results if lo <= r["confidence"] < hi]
        if rs:
            lines.append(f"  {lo:.2f}-{min(hi, 1):.2f}          {len(rs):5}   {fraction(rs, 'top1')}")
    return "\n".join(lines)


def fraction(rs: list[dict], key: str) -> str:
    n = sum(r[key] for r in rs)
    return f"{n}/{len(rs)} {100 * n / len(rs):3.0f}%" if rs else "-"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="*", type=Path, help="folders holding cases (default: all real fixtures)")
    ap.add_argument("--nccl-doctor", default=shutil.which("nccl-doctor") or "nccl-doctor",
                    help="the nccl-doctor executable to score (default: the one on PATH)")
    ap.add_argument("--summary-only", action="store_true", help="print only the totals")
    ap.add_argument("--misses", action="store_true", help="list every case whose primary category is wrong")
    ap.add_argument("--json", action="store_true", help="print every case's result as JSON")
    ap.add_argument("--record", action="store_true", help=f"write the results of the real fixtures to {RECORD.name}")
    ap.add_argument("-j", "--jobs", type=int, default=2)
    args = ap.parse_args()
    cases = cases_under(args.dirs or [FIXTURES, SHARED])
    if not cases:
        print("no cases found", file=sys.stderr)
        return 2
    results = score([args.nccl_doctor], cases, args.jobs)
    if args.record:
        record(results)
    if args.json:
        print(json.dumps(results, indent=1))
        return 0
    crashed = [r for r in results if r["error"]]
    if args.summary_only:
        print(f"{len(results)} cases: top-1 {fraction(results, 'top1')}, top-3 {fraction(results, 'top3')}, "
              f"{len(crashed)} crashed")
        return 0
    print(table(results))
    print()
    print(calibration(results))
    if crashed:
        print(f"\n{len(crashed)} case(s) gave no report: " + ", ".join(r["case"] for r in crashed))
    if args.misses:
        print("\nmisses (truth <- primary):")
        for r in results:
            if not r["top1"]:
                print(f"  {r['case']:70} {r['truth']:26} <- {r['got']} ({r['cause']}, {r['confidence']:.2f})"
                      + ("  [top-3]" if r["top3"] else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
