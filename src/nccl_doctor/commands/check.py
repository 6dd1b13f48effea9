"""`nccl-doctor check`: the staged, bounded health check across all ranks and hosts.

Run it under the job's launcher (torchrun, srun, mpirun) or let it start ranks on this host with
`--local N`. Options -> run (cluster/run.py) -> Report -> render: rank 0 (or the --local parent) draws
each stage as it runs on stderr, and the report on stdout.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ..cluster.options import Options
from ..model import InputError, Report
from ..render import emit, render_json
from ..render.stages import StageEvents, render_stages
from .job_options import job_options, require_torch


@click.command()
@job_options(default_timeout=Options.timeout)
@click.option("--quick", is_flag=True, help="Skip the bandwidth sample.")
@click.option("--report", "report_file", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Also write the JSON report to this file.")
@click.option("--rank-env", "rank_env", multiple=True, hidden=True,
              help="TEST-ONLY, with --local: RANK:NAME=VALUE sets a variable for one rank.")
def check(local: int | None, backend: str, timeout: float, quick: bool, master_addr: str, master_port: int,
          report_file: str | None, as_json: bool, rank_env: tuple[str, ...]) -> int:
    """Check that every rank can communicate: versions, devices, network, backend, collectives."""
    require_torch("check")
    from ..cluster.run import run_job
    from ..cluster.stages import STAGES

    return run_job(Options(backend=backend, timeout=timeout, quick=quick), STAGES, local=local,
                   deliver=_deliverer(as_json, report_file), events=None if as_json else StageEvents(sys.stderr),
                   master_addr=master_addr, master_port=master_port,
                   rank_env=lambda count: _parse_rank_env(rank_env, count))


def _deliverer(as_json: bool, report_file: str | None):
    def deliver(report: Report) -> int:
        if report_file:
            Path(report_file).write_text(render_json(report) + "\n")
        if as_json:
            return emit(report, as_json=True)
        if not sys.stdout.isatty():  # a file or a pipe saw no stage lines: the table keeps them
            render_stages(report, sys.stdout, "nccl-doctor check")
        return emit(report)

    return deliver


def _parse_rank_env(items: tuple[str, ...], count: int) -> dict[int, dict[str, str]]:
    parsed: dict[int, dict[str, str]] = {}
    for item in items:
        rank, sep, assignment = item.partition(":")
        name, eq, value = assignment.partition("=")
        if not (sep and eq and rank.isdigit() and name) or int(rank) >= count:
            raise InputError(f"--rank-env {item!r}: expected RANK:NAME=VALUE with RANK below {count}")
        parsed.setdefault(int(rank), {})[name] = value
    return parsed
