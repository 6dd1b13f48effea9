"""Generates docs/causes.md from the catalog: `python -m nccl_doctor.docs [--check]`."""

from __future__ import annotations

import sys
from pathlib import Path

from .catalog import categories, causes


def causes_markdown() -> str:
    lines = [
        "# Causes",
        "",
        "Every finding of every nccl-doctor command names one of these causes.",
        "Generated from `src/nccl_doctor/catalog/causes.toml` by `python -m nccl_doctor.docs`; do not edit by hand.",
        "",
    ]
    table = causes()
    for cat in categories().values():
        members = [c for c in table.values() if c.category == cat.id]
        lines += [f"## `{cat.id}`", "", cat.description, ""]
        for c in members:
            lines += [f"### `{c.id}`: {c.title}", "", c.explanation, ""]
            lines += [f"- Fix: {step}" for step in c.fix]
            lines += [f"- See: <{ref}>" for ref in c.references]
            lines.append("")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    target = Path(argv[argv.index("--out") + 1]) if "--out" in argv else Path("docs/causes.md")
    text = causes_markdown()
    if "--check" in argv:
        if not target.exists() or target.read_text(encoding="utf-8") != text:
            print(f"{target} is stale: run `python -m nccl_doctor.docs`", file=sys.stderr)
            return 1
        return 0
    target.write_text(text, encoding="utf-8")
    print(f"wrote {target} ({len(causes())} causes)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
