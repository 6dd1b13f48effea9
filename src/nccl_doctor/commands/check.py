"""`nccl-doctor check`: the staged, bounded health check across all ranks and hosts.

Run it under the job's launcher (torchrun, srun, mpirun) or let it start ranks on this host with
`--local N`. Rank 0 (or the --local parent) prints live progress on stderr and the report on stdout.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.table import Table

from ..model import InputError, Report
from ..render import emit, literal, render_json
from ..render.text import console_for
from .launching import require_torch, run_job

STATUS_STYLE = {"passed": "green", "failed": "bold red", "skipped": "yellow"}


@click.command()
@click.option("--local", "local", type=int, is_flag=False, flag_value=0, default=None, metavar="N",
              help="Start N ranks on this host (default: one per GPU, or 2 without GPUs).")
@click.option("--backend", type=click.Choice(["auto", "nccl", "gloo"]), default="auto", show_default=True,
              help="auto: NCCL when every rank has a GPU, else Gloo.")
@click.option("--timeout", type=click.FloatRange(min=1.0), default=20.0, show_default=True,
              help="Deadline in seconds of each stage and of each collective.")
@click.option("--quick", is_flag=True, help="Skip the bandwidth sample.")
@click.option("--master-addr", default="127.0.0.1", show_default=True, help="With --local: address ranks connect to.")
@click.option("--master-port", type=click.IntRange(0, 65535), default=0,
              help="With --local: store port (default: a free one).")
@click.option("--report", "report_file", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Also write the JSON report to this file.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--rank-env", "rank_env", multiple=True, hidden=True,
              help="TEST-ONLY, with --local: RANK:NAME=VALUE sets a variable for one rank.")
def check(local: int | None, backend: str, timeout: float, quick: bool, master_addr: str, master_port: int,
          report_file: str | None, as_json: bool, rank_env: tuple[str, ...]) -> int:
    """Check that every rank can communicate: versions, devices, network, backend, collectives."""
    require_torch("check")
    from ..cluster.judge import Options

    rank_args = ["--backend", backend, "--timeout", str(timeout), *(["--quick"] if quick else [])]
    return run_job("check", Options(backend=backend, timeout=timeout, quick=quick), local=local,
                   deliver=_deliverer(as_json, report_file), as_json=as_json, rank_args=rank_args,
                   master_addr=master_addr, master_port=master_port,
                   rank_env=lambda count: _parse_rank_env(rank_env, count))


def _deliverer(as_json: bool, report_file: str | None):
    def deliver(report: Report) -> int:
        if report_file:
            Path(report_file).write_text(render_json(report) + "\n")
        if as_json:
            return emit(report, as_json=True)
        render_stages(report, sys.stdout)
        return emit(report)

    return deliver


def render_stages(report: Report, out) -> None:
    """The stage table: passed / failed / skipped, with timing and what each stage saw."""
    console = console_for(out)
    console.print("[bold]nccl-doctor check[/bold]")
    table = Table(show_edge=False, pad_edge=False)
    for column in ("stage", "status", "time", "detail"):
        table.add_column(column, overflow="fold")
    for stage in report.facts.get("stages", []):
        style = STATUS_STYLE.get(stage["status"], "")
        seconds = f"{stage['seconds']:.1f} s" if stage["status"] != "skipped" else ""
        table.add_row(stage["title"], f"[{style}]{stage['status']}[/{style}]", seconds, literal.text(stage["detail"]))
    console.print(table)
    console.print()


def _parse_rank_env(items: tuple[str, ...], count: int) -> dict[int, dict[str, str]]:
    parsed: dict[int, dict[str, str]] = {}
    for item in items:
        rank, sep, assignment = item.partition(":")
        name, eq, value = assignment.partition("=")
        if not (sep and eq and rank.isdigit() and name) or int(rank) >= count:
            raise InputError(f"--rank-env {item!r}: expected RANK:NAME=VALUE with RANK below {count}")
        parsed.setdefault(int(rank), {})[name] = value
    return parsed
