"""`nccl-doctor logs PATH...`: the root cause of a failed or hung job from its logs and flight-recorder dumps."""

from __future__ import annotations

import sys

import click

from ..logs import diagnose_paths
from ..model import Report
from ..render import emit, literal
from ..render.progress import reading

MAX_SEEN = 12
MAX_TEXT = 200


@click.command()
@click.argument("paths", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--markdown", "as_markdown", is_flag=True, help="Print Markdown for a GitHub issue.")
@click.option("--engine", type=click.Choice(["auto", "hyperscan", "portable"]), default="auto", show_default=True,
              help="Pattern engine: hyperscan, or portable (Aho-Corasick, where hyperscan has no wheels).")
def logs(paths: tuple[str, ...], as_json: bool, as_markdown: bool, engine: str) -> int:
    """Diagnose a failed or hung job from its logs: files, directories, globs, .gz, - for stdin,
    and PyTorch flight-recorder dumps (TORCH_NCCL_DUMP_ON_TIMEOUT)."""
    with reading("reading logs") as on_start:
        report = diagnose_paths(list(paths), engine=None if engine == "auto" else engine, on_start=on_start)
    for problem in report.facts["inputs"]["problems"]:
        click.echo(f"nccl-doctor: skipped: {literal.shown(problem)}", err=True)
    if as_json:
        return emit(report, as_json=True)
    # rich, imported only here: `--json` starts without it
    from ..render.markdown import render_markdown
    from ..render.table import print_rank_table
    from ..render.text import console_for

    out = sys.stdout
    if as_markdown:
        out.write(render_markdown(report))
        return report.exit_code
    console = console_for(out)
    if report.findings:
        emit(report, out=out)
    else:
        _print_unrecognised(console, report)
    print_rank_table(console, report.facts)
    inputs = report.facts["inputs"]
    console.print(f"\n[dim]read {len(inputs['read'])} input(s), {inputs['lines']} lines "
                  f"({inputs['engine']} engine)[/dim]")
    return report.exit_code


def _print_unrecognised(console, report: Report) -> None:
    seen = report.facts.get("unrecognized") or []
    console.print("[yellow]nccl-doctor logs: no known NCCL/PyTorch failure signature was recognised.[/yellow]")
    if seen:
        console.print("Lines that look like errors:")
        for e in seen[:MAX_SEEN]:
            text = literal.markup(e["text"], MAX_TEXT)
            console.print(f"  [dim]{literal.markup(e['source'])}:{e['line']}:[/dim] {text}")
    like = report.facts.get("resembles") or []
    if like:
        console.print("If the job did fail or hang, its words are most like the labelled failures of: "
                      + ", ".join(f"{literal.markup(r['category'])} ({literal.markup(', '.join(r['words']))})"
                                  for r in like))
    last = [r for r in report.facts.get("ranks", []) if r.get("last_line")]
    if last:
        console.print("Last line of each rank/process:")
        for r in last[:MAX_SEEN]:
            ln = r["last_line"]
            console.print(f"  [dim]{literal.markup(r['label'])} ({literal.markup(ln['source'])}:{ln['line']}):[/dim] "
                          f"{literal.markup(ln['text'], MAX_TEXT)}")
