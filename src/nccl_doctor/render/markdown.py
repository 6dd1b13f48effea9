"""Markdown rendering of a report, for pasting into a GitHub issue."""

from __future__ import annotations

from typing import Any

from ..model import Finding, Report, ranges
from . import literal
from .table import HEADERS, rank_rows
from .text import confidence_word

MAX_EVIDENCE = 8


def render_markdown(report: Report) -> str:
    lines = [f"### nccl-doctor {literal.md(report.command)}: {report.verdict}", ""]
    findings = report.ordered()
    if not findings:
        lines += ["No known failure signature was recognised.", ""]
        like = report.facts.get("resembles") or []
        if like:
            lines += ["If the job did fail or hang, its words are most like the labelled failures of: "
                      + ", ".join(f"`{r['category']}`" for r in like) + ".", ""]
    for i, finding in enumerate(findings, 1):
        lines += _finding(finding, f"{i}.", level=4)
    rows = rank_rows(report.facts)
    if rows:
        lines += ["#### Per-rank last state", "", "| " + " | ".join(HEADERS) + " |",
                  "|" + "---|" * len(HEADERS)]
        lines += ["| " + " | ".join(literal.md_cell(c) for c in row) + " |" for row in rows]
        lines.append("")
    lines += _inputs(report.facts)
    lines.append(f"<sub>nccl-doctor {report.to_json()['version']}</sub>")
    return "\n".join(lines) + "\n"


def _finding(finding: Finding, number: str, level: int) -> list[str]:
    head = "#" * level
    where = []
    if finding.ranks:
        where.append("ranks " + ranges(finding.ranks))
    if finding.hosts:
        where.append("hosts " + ", ".join(sorted(set(finding.hosts))))
    label = "ALTERNATIVE" if finding.alternative_to else finding.severity.value.upper()
    out = [
        f"{head} {number} {label} `{finding.cause}`: {literal.md(finding.message)}",
        "",
        f"*{finding.category}* · confidence {confidence_word(finding.confidence)} ({finding.confidence:.2f})"
        + (f" · another reading of the evidence of `{finding.alternative_to}`" if finding.alternative_to else "")
        + (" · " + literal.md_cell("; ".join(where)) if where else ""),
        "",
    ]
    if finding.reasons:
        out += [f"- because: {literal.md(r)}" for r in finding.reasons] + [""]
    if finding.evidence:
        out += literal.md_code([f"{ev.source}:{ev.line}: {ev.text}" if ev.line else f"{ev.source}: {ev.text}"
                                for ev in finding.evidence[:MAX_EVIDENCE]]) + [""]
    steps = finding.fix_steps()
    if steps:
        out += ["**Fix**", ""] + [f"- {literal.md(s)}" for s in steps] + [""]
    if finding.secondary:
        out += ["<details><summary>secondary symptoms</summary>", ""]
        for j, sub in enumerate(finding.secondary, 1):
            out += _finding(sub, f"{number}{j}.", level=min(6, level + 1))
        out += ["</details>", ""]
    return out


def _inputs(facts: dict[str, Any]) -> list[str]:
    inputs = facts.get("inputs") or {}
    out = []
    if inputs.get("read"):
        out.append(f"Read {len(inputs['read'])} input(s), {inputs.get('lines', 0)} lines.")
    for problem in inputs.get("problems") or []:
        out.append(f"- skipped: {literal.md_cell(problem)}")
    unrecognised = facts.get("unrecognized") or []
    if unrecognised:
        out += ["", "Lines that look like errors:", ""]
        out += literal.md_code([f"{e['source']}:{e['line']}: {e['text']}" for e in unrecognised])
    return out + [""] if out else []
