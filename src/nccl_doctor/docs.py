"""Generates what is derived from the catalog: docs/causes.md and the meaning columns of the template tables
(catalog/templates/*.tsv, from catalog/template_causes.toml). `python -m nccl_doctor.docs [--check]`."""

from __future__ import annotations

import sys
from pathlib import Path

from .catalog import categories, causes
from .roads import Road, all_roads, roads_of
from .logs.templates import TABLES, render_table

CATALOG = Path(__file__).resolve().parent / "catalog"


def causes_markdown() -> str:
    lines = [
        "# Causes",
        "",
        "Every finding of every nccl-doctor command names one of these causes.",
        "Generated from `src/nccl_doctor/catalog/causes.toml` by `python -m nccl_doctor.docs`; do not edit by hand.",
        "Each cause lists its roads: the rules, check stages, detectors and log signatures that can report it.",
        "",
    ]
    table = causes()
    roads = all_roads()
    for cat in categories().values():
        members = [c for c in table.values() if c.category == cat.id]
        lines += [f"## `{cat.id}`", "", cat.description, ""]
        for c in members:
            lines += [f"### `{c.id}`: {c.title}", "", c.explanation, ""]
            lines += [f"- Fix: {step}" for step in c.fix]
            lines += [f"- To confirm: {c.confirmation}"]
            lines += [f"- Explains: {', '.join(f'`{e}`' for e in sorted(c.explains))}"] if c.explains else []
            lines += [f"- See: <{ref}>" for ref in c.references]
            lines += ["- Reached by:"] + [f"  - {road_line(r)}" for r in sorted(roads_of(c.id, roads), key=road_key)]
            lines.append("")
    return "\n".join(lines)


def road_line(road: Road) -> str:
    commands = f" ({road.commands})" if road.commands else ""
    return f"`{road.name}`{commands}: {road.doc}"


def road_key(road: Road) -> tuple[bool, str]:
    return (road.name.startswith("logs.signatures"), road.name)


def generated(docs: Path) -> dict[Path, str]:
    """Every generated file and the text it must hold."""
    out = {docs / "causes.md": causes_markdown()}
    for table in TABLES:
        out[CATALOG / "templates" / f"{table}.tsv"] = render_table(table)
    return out


def main(argv: list[str]) -> int:
    docs = Path(argv[argv.index("--docs") + 1]) if "--docs" in argv else Path("docs")
    stale = [p for p, text in generated(docs).items() if not p.exists() or p.read_text(encoding="utf-8") != text]
    if "--check" in argv:
        for path in stale:
            print(f"{path} is stale: run `python -m nccl_doctor.docs`", file=sys.stderr)
        return 1 if stale else 0
    for path, text in generated(docs).items():
        if path in stale:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
