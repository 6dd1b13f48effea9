"""`nccl-doctor bench`: nccl-tests' bandwidth sweeps and a pairwise link matrix, with findings.

Flags and output speak nccl-tests' language (-b -e -f -i -n -w -c -d -o -r -a; size, count, type,
redop, root, time, algbw, busbw, #wrong). Run it under the job's launcher or with `--local N`, like
`check`: the same rendezvous, stages and deadlines carry it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ..cluster.bench.options import DATATYPES, BenchOptions, parse_size
from ..cluster.collectives import COLLECTIVES, REDOPS
from ..model import InputError, Report
from ..render import emit
from .launching import require_torch, run_job

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
@click.option("--local", "local", type=int, is_flag=False, flag_value=0, default=None, metavar="N",
              help="Start N ranks on this host (default: one per GPU, or 2 without GPUs).")
@click.option("--backend", type=click.Choice(["auto", "nccl", "gloo"]), default="auto", show_default=True,
              help="auto: NCCL when every rank has a GPU, else Gloo.")
@click.option("-b", "--minbytes", type=SIZE, default="8", show_default=True, help="Smallest message size.")
@click.option("-e", "--maxbytes", type=SIZE, default=None,
              help="Largest message size [default: 256M with NCCL, 8M with Gloo].")
@click.option("-f", "--stepfactor", type=click.IntRange(min=0), default=2, show_default=True,
              help="Multiply the size by this each step (1: add --stepbytes instead).")
@click.option("-i", "--stepbytes", type=SIZE, default="1M", show_default=True, help="Size increment when -f is 1.")
@click.option("-n", "--iters", type=click.IntRange(min=1), default=20, show_default=True, help="Timed iterations.")
@click.option("-w", "--warmup_iters", type=click.IntRange(min=0), default=5, show_default=True,
              help="Untimed iterations before each size (the first is the one checked).")
@click.option("-c", "--check", type=click.IntRange(0, 1), default=1, show_default=True,
              help="Check every result element by element (#wrong).")
@click.option("-d", "--datatype", type=click.Choice(list(DATATYPES)), default="float", show_default=True)
@click.option("-o", "--op", type=click.Choice(list(REDOPS)), default="sum", show_default=True,
              help="Reduction of all_reduce, reduce, reduce_scatter.")
@click.option("-r", "--root", type=click.IntRange(min=0), default=0, show_default=True,
              help="Root of broadcast and reduce.")
@click.option("-a", "--average", type=click.IntRange(0, 3), default=3, show_default=True,
              help="Time across ranks: 0 rank 0's, 1 mean, 2 min, 3 max.")
@click.option("--matrix", is_flag=True, help="Measure bandwidth and latency between every pair of hosts.")
@click.option("--matrix-ranks", is_flag=True, help="The link matrix between every pair of ranks (GPUs in a host too).")
@click.option("--matrix-bytes", type=SIZE, default=None, help="Message size of the link matrix [default: 64M "
                                                               "with NCCL, 4M with Gloo].")
@click.option("--matrix-time", type=click.FloatRange(min=0.01), default=0.5, show_default=True,
              help="Seconds of streaming per direction of each pair of the link matrix.")
@click.option("--timeout", type=click.FloatRange(min=1.0), default=60.0, show_default=True,
              help="Deadline in seconds of each stage, each measured size and each matrix round.")
@click.option("--html", "html_file", type=click.Path(dir_okay=False), default=None,
              help="Also write a self-contained HTML report (charts, heatmap) to this file.")
@click.option("--master-addr", default="127.0.0.1", show_default=True, help="With --local: address ranks connect to.")
@click.option("--master-port", type=click.IntRange(0, 65535), default=0,
              help="With --local: store port (default: a free one).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def bench(collectives: tuple[str, ...], local: int | None, backend: str, minbytes: int, maxbytes: int | None,
          stepfactor: int, stepbytes: int, iters: int, warmup_iters: int, check: int, datatype: str, op: str,
          root: int, average: int, matrix: bool, matrix_ranks: bool, matrix_bytes: int | None, matrix_time: float,
          timeout: float, html_file: str | None, master_addr: str, master_port: int, as_json: bool) -> int:
    """Measure collectives as nccl-tests does (and the link matrix); name slow hosts and links.

    COLLECTIVE: all_reduce, all_gather, reduce_scatter, broadcast, reduce, all_to_all, sendrecv, or all.
    Without one, all are swept, unless --matrix alone was asked for.
    """
    require_torch("bench")
    scope = "ranks" if matrix_ranks else "hosts" if matrix else None
    chosen = _collectives(collectives, scope)
    options = BenchOptions(backend=backend, timeout=timeout, collectives=chosen, minbytes=minbytes,
                           maxbytes=maxbytes, stepfactor=stepfactor, stepbytes=stepbytes, iters=iters,
                           warmup_iters=warmup_iters, datatype=datatype, op=op, root=root, check=bool(check),
                           average=average, matrix=scope, matrix_bytes=matrix_bytes, matrix_time=matrix_time,
                           show_progress=not as_json and sys.stderr.isatty())
    _validate(options, html_file)
    from ..cluster.bench import stages

    return run_job("bench", options, local=local, deliver=_deliverer(as_json, html_file), as_json=as_json,
                   rank_args=rank_args(options), master_addr=master_addr, master_port=master_port,
                   stages=stages(), check_world=lambda world_size: _validate_root(options, world_size))


def _collectives(named: tuple[str, ...], scope: str | None) -> tuple[str, ...]:
    if "all" in named or (not named and scope is None):
        return tuple(COLLECTIVES)
    return tuple(dict.fromkeys(named))


def _validate(options: BenchOptions, html_file: str | None) -> None:
    if options.maxbytes is not None and options.minbytes > options.maxbytes:
        raise InputError(f"invalid sizes: --minbytes {options.minbytes} is above --maxbytes {options.maxbytes}")
    if options.op == "avg" and options.datatype in INTEGER_TYPES:
        raise InputError(f"-o avg needs a floating-point -d (half, float, double, bfloat16), not {options.datatype}")
    if html_file and not Path(html_file).resolve().parent.is_dir():
        raise InputError(f"--html {html_file}: the folder {Path(html_file).resolve().parent} does not exist")


def _validate_root(options: BenchOptions, world_size: int) -> None:
    if options.root >= world_size:
        raise InputError(f"--root {options.root} is not a rank of this job of {world_size} ranks")


def rank_args(options: BenchOptions) -> list[str]:
    """The command line each --local child runs `bench` with: the same options as the parent."""
    args = [*options.collectives, "--backend", options.backend, "--timeout", str(options.timeout),
            "-b", str(options.minbytes), "-f", str(options.stepfactor), "-i", str(options.stepbytes),
            "-n", str(options.iters), "-w", str(options.warmup_iters), "-c", str(int(options.check)),
            "-d", options.datatype, "-o", options.op, "-r", str(options.root), "-a", str(options.average),
            "--matrix-time", str(options.matrix_time)]
    if options.maxbytes is not None:
        args += ["-e", str(options.maxbytes)]
    if options.matrix_bytes is not None:
        args += ["--matrix-bytes", str(options.matrix_bytes)]
    if options.matrix:
        args.append("--matrix-ranks" if options.matrix == "ranks" else "--matrix")
    return args


def _deliverer(as_json: bool, html_file: str | None):
    def deliver(report: Report) -> int:
        report.command = "bench"
        if html_file:
            from ..render.html import render_html

            Path(html_file).write_text(render_html(report), encoding="utf-8")
        if as_json:
            return emit(report, as_json=True)
        render_results(report, sys.stdout)
        return emit(report)

    return deliver


def render_results(report: Report, out) -> None:
    """nccl-tests' tables and the link matrix (the stages went to stderr as they ran)."""
    from ..cluster.bench.table import matrix_text, sweep_text

    facts = report.facts
    if facts.get("sweep", {}).get("rows"):
        out.write(sweep_text(facts["sweep"]) + "\n")
    if facts.get("matrix", {}).get("links"):
        out.write(matrix_text(facts["matrix"]) + "\n")
    out.write("\n")

