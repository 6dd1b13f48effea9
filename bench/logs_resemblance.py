"""The resemblance table of `nccl-doctor logs` (logs/resemblance.py): how well it generalises, and its generation.

The table is trained on the words of every labelled real case under tests/fixtures/logs (the words the reader
keeps: the beginnings of the inputs and every context line). Its worth is measured the only honest way, on
cases it was not trained on: each group of cases (a mined batch, the released set, each early fixture set) is
left out in turn, the table is trained on the others, and the left-out cases are diagnosed with it.

    python bench/logs_resemblance.py            # leave-one-group-out figures: the table alone, and logs with it
    python bench/logs_resemblance.py --write    # regenerate src/nccl_doctor/catalog/resemblance.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

from nccl_doctor.logs import collect_paths, resemblance
from nccl_doctor.logs.diagnose import diagnose
from nccl_doctor.logs.evidence import LogView

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "logs"
TABLE = ROOT / "src" / "nccl_doctor" / "catalog" / resemblance.TABLE


class Case:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.category = json.loads((folder / "truth.json").read_text())["category"]
        relative = folder.relative_to(FIXTURES).parts
        self.group = "/".join(relative[:2] if relative[0] == "corpus" else relative[:1])
        self.inputs = [str(p) for p in sorted(folder.iterdir()) if p.name != "truth.json" and p.is_file()]
        self.collection = collect_paths(self.inputs)
        self.words = LogView(self.collection).words()


def labelled_cases() -> list[Case]:
    """Every labelled real case of the fixtures (synthetic logs test rules; they are not real-world data)."""
    folders = sorted(t.parent for t in FIXTURES.rglob("truth.json") if "synthetic" not in t.parts)
    return [Case(f) for f in folders if json.loads((f / "truth.json").read_text()).get("category")]


def train(cases: list[Case]) -> resemblance.Table:
    return resemblance.Table.train((c.category, c.words) for c in cases)


def ranked(case: Case) -> list[str]:
    """The categories of the findings in order, then of the causes folded under them (as bench/logs_accuracy.py)."""
    found = diagnose(case.collection)
    return list(dict.fromkeys([f.category for f in found] + [s.category for f in found for s in f.secondary]))


def left_out(cases: list[Case]) -> None:
    """Each group left out in turn: the table alone, and the diagnosis with and without the resemblance rule."""
    alone = unread = unread_right = 0
    top1, top3 = Counter(), Counter()
    for group in sorted({c.group for c in cases}):
        table = train([c for c in cases if c.group != group])
        for case in (c for c in cases if c.group == group):
            likeness = table.closest(case.words)
            alone += bool(likeness) and likeness.category == case.category
            resemblance.table = lambda: resemblance.Table({}, {}, {})  # noqa: E731 - the rule finds nothing
            plain = ranked(case)
            resemblance.table = lambda table=table: table  # noqa: E731 - the left-out group's table
            guessed = ranked(case)
            for name, got in (("without", plain), ("with", guessed)):
                top1[name] += got[:1] == [case.category]
                top3[name] += case.category in got[:3]
            if not plain:
                unread += 1
                unread_right += guessed[:1] == [case.category]
    n = len(cases)
    print(f"{n} labelled real cases, {len({c.group for c in cases})} groups, each left out in turn")
    print(f"  the table alone, top-1:               {alone}/{n} ({alone / n:.0%})")
    for name in ("without", "with"):
        print(f"  logs {name} the resemblance rule: top-1 {top1[name]}/{n} ({top1[name] / n:.0%}), "
              f"top-3 {top3[name]}/{n} ({top3[name] / n:.0%})")
    print("  (the other rules learned from these cases: only the difference between the two lines is a held-out figure)")
    print(f"  logs with no finding without it:      {unread}, of which it now gets right {unread_right}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help=f"regenerate {TABLE.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    cases = labelled_cases()
    if args.write:
        table = train(cases)
        TABLE.write_text(table.to_json())
        print(f"wrote {TABLE.relative_to(ROOT)}: {len(table.idf)} words, "
              f"{dict(Counter(c.category for c in cases))}")
        return 0
    left_out(cases)
    return 0


if __name__ == "__main__":
    sys.exit(main())
