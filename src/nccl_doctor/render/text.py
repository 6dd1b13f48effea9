"""Rich terminal rendering of a report: verdict, then findings with evidence and fix."""

from __future__ import annotations

from typing import TextIO

from rich.console import Console
from rich.markup import escape
from rich.text import Text

from ..model import Finding, Report, Severity, names, ranges

STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}
MAX_EVIDENCE = 6
MAX_RUNS, MAX_HOSTS = 8, 8  # a finding names every rank and host, in ranges; past these, a count


def confidence_word(confidence: float) -> str:
    return "high" if confidence >= 0.8 else "medium" if confidence >= 0.5 else "low"


def console_for(out: TextIO) -> Console:
    return Console(file=out, highlight=False, soft_wrap=False, width=None if out.isatty() else 120)


def render_finding(console: Console, finding: Finding, number: str, indent: str = "") -> None:
    head = Text(f"{indent}{number} ")
    head.append(finding.severity.value.upper(), style=STYLE[finding.severity])
    head.append(f" [{finding.cause}] ", style="bold")
    head.append(finding.message)
    console.print(head)
    where = []
    if finding.ranks:
        where.append(f"rank{'s' if len(set(finding.ranks)) > 1 else ''} {ranges(finding.ranks, most=MAX_RUNS)}")
    if finding.hosts:
        where.append(f"host{'s' if len(set(finding.hosts)) > 1 else ''} {names(finding.hosts, most=MAX_HOSTS)}")
    pad = indent + "   "
    meta = f"{finding.category} · confidence {confidence_word(finding.confidence)}"
    console.print(f"{pad}[dim]{escape(meta + ('  · ' + '; '.join(where) if where else ''))}[/dim]")
    for ev in finding.evidence[:MAX_EVIDENCE]:
        loc = f"{ev.source}:{ev.line}" if ev.line else ev.source
        console.print(f"{pad}[dim]{escape(loc)}:[/dim] {escape(ev.text)}")
    if len(finding.evidence) > MAX_EVIDENCE:
        console.print(f"{pad}[dim]... {len(finding.evidence) - MAX_EVIDENCE} more lines of evidence[/dim]")
    if finding.severity != Severity.INFO or finding.fix:
        for step in finding.fix_steps():
            console.print(f"{pad}[green]fix:[/green] {escape(step)}")
    for i, sub in enumerate(finding.secondary, 1):
        render_finding(console, sub, f"{number}{i}.", indent + "   ")


def render_text(report: Report, out: TextIO) -> None:
    console = console_for(out)
    findings = report.ordered()
    if not findings:
        console.print(f"[bold green]nccl-doctor {report.command}: no problems found[/bold green]")
        return
    counts = {s: sum(f.severity == s for f in findings) for s in Severity}
    summary = ", ".join(f"{n} {s.value}{'s' if n != 1 else ''}" for s, n in counts.items() if n)
    style = "bold red" if report.verdict == "error" else "yellow" if report.verdict == "warning" else "green"
    console.print(f"[{style}]nccl-doctor {report.command}: {summary}[/{style}]")
    for i, finding in enumerate(findings, 1):
        console.print()
        render_finding(console, finding, f"{i}.")
