"""`nccl-doctor bench`: nccl-tests' bandwidth sweeps and a pairwise link matrix, with findings.

Flags and output speak nccl-tests' language (-b -e -f -i -n -w -c -d -o -r -a; size, count, type,
redop, root, time, algbw, busbw, #wrong). Run it under the job's launcher or with `--local N`, like
`check`: the same rendezvous, stages and deadlines carry it. Each row of nccl-tests' table is printed as
soon as it is measured; Ctrl-C prints what was measured and exits 130.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ..cluster.bench.options import DATATYPES, ELEMENT_BYTES, BenchOptions, parse_size, sizes
from ..cluster.ops import COLLECTIVES, REDOPS
from ..model import InputError, Report
from ..render import emit
from ..render.bench import SweepStream, render_bench
from ..render.stages import StageEvents
from .job_options import job_options, require_torch

INTEGER_TYPES = ("int8", "uint8", "int32", "int64")


class Size(click.ParamType):
    name = "SIZE"

    def convert(self, value, param, ctx):  # type: ignore[no-untyped-def]
        if isinstance(value, int):
            return value
        try:
            return parse_size(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


SIZE = Size()


@click.command()
@click.argument("collectives", nargs=-1, type=click.Choice([*COLLECTIVES, "all"]), metavar="[COLLECTIVE]...")
@job_options(default_timeout=BenchOptions.timeout)
@click.option("-b", "--minbytes", type=SIZE, default=str(BenchOptions.minbytes), show_default=True,
              help="Smallest message size.")
@click.option("-e", "--maxbytes", type=SIZE, default=None,
              help="Largest message size [default: 256M with NCCL, 8M with Gloo].")
@click.option("-f", "--stepfactor", type=click.IntRange(min=0), default=BenchOptions.stepfactor, show_default=True,
              help="Multiply the size by this each step (1: add --stepbytes instead).")
@click.option("-i", "--stepbytes", type=SIZE, default="1M", show_default=True, help="Size increment when -f is 1.")
@click.option("-n", "--iters", type=click.IntRange(min=1), default=BenchOptions.iters, show_default=True,
              help="Timed iterations.")
@click.option("-w", "--warmup_iters", type=click.IntRange(min=0), default=BenchOptions.warmup_iters, show_default=True,
              help="Untimed iterations before each size (the first is the one checked).")
@click.option("-c", "--check", type=click.IntRange(0, 1), default=BenchOptions.check, show_default=True,
              help="Check every result element by element (#wrong).")
@click.option("-d", "--datatype", type=click.Choice(list(DATATYPES)), default=BenchOptions.datatype, show_default=True)
@click.option("-o", "--op", type=click.Choice(list(REDOPS)), default=BenchOptions.op, show_default=True,
              help="Reduction of all_reduce, reduce, reduce_scatter.")
@click.option("-r", "--root", type=click.IntRange(min=0), default=BenchOptions.root, show_default=True,
              help="Root of broadcast and reduce.")
@click.option("-a", "--average", type=click.IntRange(0, 3), default=BenchOptions.average, show_default=True,
              help="Time across ranks: 0 rank 0's, 1 mean, 2 min, 3 max.")
@click.option("--matrix", is_flag=True, help="Measure bandwidth and latency between every pair of hosts.")
@click.option("--matrix-ranks", is_flag=True, help="The link matrix between every pair of ranks (GPUs in a host too).")
@click.option("--matrix-bytes", type=SIZE, default=None, help="Message size of the link matrix [default: 64M "
                                                               "with NCCL, 4M with Gloo].")
@click.option("--matrix-time", type=click.FloatRange(min=0.01), default=BenchOptions.matrix_time, show_default=True,
              help="Seconds of streaming per direction of each pair of the link matrix.")
@click.option("--html", "html_file", type=click.Path(dir_okay=False), default=None,
              help="Also write a self-contained HTML report (charts, heatmap) to this file.")
def bench(collectives: tuple[str, ...], local: int | None, backend: str, minbytes: int, maxbytes: int | None,
          stepfactor: int, stepbytes: int, iters: int, warmup_iters: int, check: int, datatype: str, op: str,
          root: int, average: int, matrix: bool, matrix_ranks: bool, matrix_bytes: int | None, matrix_time: float,
          timeout: float, html_file: str | None, master_addr: str, master_port: int, as_json: bool) -> int:
    """Measure collectives as nccl-tests does (and the link matrix); name slow hosts and links.

    COLLECTIVE: all_reduce, all_gather, reduce_scatter, broadcast, reduce, all_to_all, sendrecv, or all.
    Without one, all are swept, unless --matrix alone was asked for.
    """
    require_torch("bench")
    options = options_from(click.get_current_context().params)
    _validate(options, html_file)
    from ..cluster.bench import stages
    from ..cluster.run import run_job

    stream = None if as_json else SweepStream(sys.stdout)
    events = None if stream is None else StageEvents(sys.stderr, results=stream.measured)
    return run_job(options, stages(), local=local, deliver=_deliverer(as_json, html_file, stream), events=events,
                   master_addr=master_addr, master_port=master_port,
                   check_world=lambda world_size: _validate_root(options, world_size))


def options_from(params: dict) -> BenchOptions:
    """The options object of a parsed command line (a --local child's parses back to its parent's)."""
    scope = "ranks" if params["matrix_ranks"] else "hosts" if params["matrix"] else None
    fields = {k: params[k] for k in ("backend", "timeout", "minbytes", "maxbytes", "stepfactor", "stepbytes", "iters",
                                     "warmup_iters", "datatype", "op", "root", "check", "average", "matrix_bytes",
                                     "matrix_time")}
    return BenchOptions(collectives=_collectives(params["collectives"], scope), matrix=scope, **fields)


def _collectives(named: tuple[str, ...], scope: str | None) -> tuple[str, ...]:
    if "all" in named or (not named and scope is None):
        return tuple(COLLECTIVES)
    return tuple(dict.fromkeys(named))


def _validate(options: BenchOptions, html_file: str | None) -> None:
    if options.maxbytes is not None and options.minbytes > options.maxbytes:
        raise InputError(f"invalid sizes: --minbytes {options.minbytes} is above --maxbytes {options.maxbytes}")
    elem = ELEMENT_BYTES[options.datatype]
    upper = options.max_bytes("gloo") if options.maxbytes is None else options.maxbytes
    if options.collectives and not any(size >= elem for size in sizes(options.minbytes, upper, options.stepfactor,
                                                                      options.stepbytes)):
        raise InputError(f"invalid sizes: -b {options.minbytes} -e {upper} holds no message of one {options.datatype} "
                         f"({elem} B): nothing to measure")
    if options.op == "avg" and options.datatype in INTEGER_TYPES:
        raise InputError(f"-o avg needs a floating-point -d (half, float, double, bfloat16), not {options.datatype}")
    if html_file and not Path(html_file).resolve().parent.is_dir():
        raise InputError(f"--html {html_file}: the folder {Path(html_file).resolve().parent} does not exist")


def _validate_root(options: BenchOptions, world_size: int) -> None:
    if options.root >= world_size:
        raise InputError(f"--root {options.root} is not a rank of this job of {world_size} ranks")


def _deliverer(as_json: bool, html_file: str | None, stream: SweepStream | None):
    def deliver(report: Report) -> int:
        if html_file:
            from ..render.html import render_html

            Path(html_file).write_text(render_html(report), encoding="utf-8")
        if as_json:
            return emit(report, as_json=True)
        render_bench(report, sys.stdout, streamed=bool(stream and stream.rows))
        return emit(report)

    return deliver
