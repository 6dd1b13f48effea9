"""Rich terminal rendering of a report: verdict, then findings with evidence and fix."""

from __future__ import annotations

from typing import TextIO

from rich.console import Console
from rich.text import Text

from ..model import Finding, Report, Severity, names, ranges
from . import literal

STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}
MAX_EVIDENCE = 6
MAX_EVIDENCE_ALTERNATIVE = 2
MAX_RUNS, MAX_HOSTS = 8, 8  # a finding names every rank and host, in ranges; past these, a count


def confidence_word(confidence: float) -> str:
    return "high" if confidence >= 0.8 else "medium" if confidence >= 0.5 else "low"


def console_for(out: TextIO) -> Console:
    """The one console every command prints with: no guessing (highlighting, :emoji: codes) in what it prints."""
    return Console(file=out, highlight=False, emoji=False, soft_wrap=False, width=None if out.isatty() else 120)


def render_finding(console: Console, finding: Finding, number: str, indent: str = "") -> None:
    head = Text(f"{indent}{number} ")
    if finding.alternative_to:
        head.append("ALTERNATIVE", style="magenta")
    else:
        head.append(finding.severity.value.upper(), style=STYLE[finding.severity])
    head.append(f" [{finding.cause}] ", style="bold")
    head.append(literal.text(finding.message))
    console.print(head)
    where = []
    if finding.ranks:
        where.append(f"rank{'s' if len(set(finding.ranks)) > 1 else ''} {ranges(finding.ranks, most=MAX_RUNS)}")
    if finding.hosts:
        where.append(f"host{'s' if len(set(finding.hosts)) > 1 else ''} {names(finding.hosts, most=MAX_HOSTS)}")
    pad = indent + "   "
    meta = f"{finding.category} · confidence {confidence_word(finding.confidence)}"
    if finding.alternative_to:
        meta += f" · another reading of the evidence of {finding.alternative_to}"
    console.print(f"{pad}[dim]{literal.markup(meta + ('  · ' + '; '.join(where) if where else ''))}[/dim]")
    for reason in finding.reasons:
        console.print(f"{pad}[cyan]because:[/cyan] {literal.markup(reason)}")
    shown = MAX_EVIDENCE_ALTERNATIVE if finding.alternative_to else MAX_EVIDENCE
    for ev in finding.evidence[:shown]:
        loc = f"{ev.source}:{ev.line}" if ev.line else ev.source
        console.print(f"{pad}[dim]{literal.markup(loc)}:[/dim] {literal.markup(ev.text)}")
    if len(finding.evidence) > shown:
        console.print(f"{pad}[dim]... {len(finding.evidence) - shown} more lines of evidence[/dim]")
    if finding.severity != Severity.INFO or finding.fix:
        for step in finding.fix_steps():
            console.print(f"{pad}[green]fix:[/green] {literal.markup(step)}")
    for i, sub in enumerate(finding.secondary, 1):
        render_finding(console, sub, f"{number}{i}.", indent + "   ")


def render_text(report: Report, out: TextIO) -> None:
    console = console_for(out)
    findings = report.ordered()
    if not findings:
        console.print(f"[bold green]nccl-doctor {literal.markup(report.command)}: no problems found[/bold green]")
        return
    problems = [f for f in findings if not f.alternative_to]
    counts = {s: sum(f.severity == s for f in problems) for s in Severity}
    summary = ", ".join(f"{n} {s.value}{'s' if n != 1 else ''}" for s, n in counts.items() if n)
    alternatives = len(findings) - len(problems)
    summary += f" ({alternatives} alternative reading{'s' if alternatives != 1 else ''})" if alternatives else ""
    style = "bold red" if report.verdict == "error" else "yellow" if report.verdict == "warning" else "green"
    console.print(f"[{style}]nccl-doctor {literal.markup(report.command)}: {summary}[/{style}]")
    for i, finding in enumerate(findings, 1):
        console.print()
        render_finding(console, finding, f"{i}.")
