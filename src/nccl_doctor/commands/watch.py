"""`nccl-doctor watch --store HOST:PORT`: watch a running job from outside it.

The ranks of a job that calls `nccl_doctor.watch(detect=False)` (or any watch()) publish heartbeats in
the job's store; this process reads them, runs the same detector as rank 0 would, prints each finding
as it appears, and a report at the end: when every rank has ended, the store goes away, --duration
passes, or Ctrl-C.
"""

from __future__ import annotations

import json
import sys
import time

import click

from ..model import InputError, Report
from ..render import emit, literal
from .job_options import require_torch

POLL_FIRST = 0.2


@click.command()
@click.option("--store", "address", required=True, metavar="HOST:PORT",
              help="The job's TCPStore: MASTER_ADDR:MASTER_PORT (torchrun's rendezvous endpoint).")
@click.option("--hang-after", type=click.FloatRange(min=0.5), default=None,
              help="Seconds without progress, while others wait, before a rank is reported hung "
                   "(default: what the job's watch() uses).")
@click.option("--duration", type=click.FloatRange(min=0.0), default=None,
              help="Stop after this many seconds and report (default: until the job ends).")
@click.option("--wait", "wait_s", type=click.FloatRange(min=0.0), default=60.0, show_default=True,
              help="How long to wait for the store and the first heartbeats.")
@click.option("--stop-on-error", is_flag=True, help="Stop at the first error finding (exit code 1).")
@click.option("--json", "as_json", is_flag=True, help="Print only the final report, as JSON.")
def watch(address: str, hang_after: float | None, duration: float | None, wait_s: float, stop_on_error: bool,
          as_json: bool) -> int:
    """Detect stragglers, hangs and dead ranks of a running job from its heartbeats."""
    require_torch("watch")
    from ..cluster.run import quiet_torch
    from ..runtime.monitor import Monitor, print_finding

    host, port = _address(address)
    quiet_torch()
    import torch.distributed  # noqa: F401  (seconds to import: not out of the --wait budget)

    deadline = time.monotonic() + wait_s
    root = _connect(host, port, deadline)
    run, config = _find_run(root, deadline, address)
    settings = _settings(config, hang_after)
    from ..runtime.job import keys

    monitor = Monitor(keys(root, "watch", run), settings, int(config["world_size"]))
    shown: list = []
    printer = print_finding(sys.stdout)
    show = None if as_json else (lambda f: (shown.append(f), printer(f)))
    if show:
        click.echo(literal.shown(f"nccl-doctor watch: run {run}, {config['world_size']} ranks, hang after "
                                 f"{settings.hang_after:g} s (Ctrl-C to stop)"), err=True)
    report = _follow(monitor, settings.beat, duration, show, stop_on_error)
    report.facts["run"], report.facts["store"] = run, address
    if as_json:
        return emit(report, as_json=True)
    return _summary(report, shown)


def _summary(report: Report, shown: list) -> int:
    """Findings already printed live are not printed twice; the rest (the timeout advice) is."""
    rest = [f for f in report.findings if f not in shown]
    if rest or not shown:
        click.echo()
        emit(Report("watch", rest, report.facts))
    else:
        click.echo(f"\nnccl-doctor watch: {len(shown)} finding{'s' if len(shown) != 1 else ''} (above)")
    return report.exit_code


def _address(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InputError(f"--store {address!r}: expected HOST:PORT, e.g. --store node-0:29500")
    return host.strip("[]"), int(port)


def _connect(host: str, port: int, deadline: float):
    from ..cluster.store import StoreUnreachable, connect

    try:
        return connect(host, port, deadline)
    except StoreUnreachable as exc:
        raise InputError(f"{exc}; is the job running, and is this its MASTER_ADDR:MASTER_PORT?") from None


def _find_run(root, deadline: float, address: str) -> tuple[str, dict]:
    """The run the ranks announced (`nccl-doctor/watch/current`) and its config, once published."""
    from ..runtime.job import keys

    ours = keys(root, "watch")
    while True:
        try:
            if ours.check(["current"]):
                run = ours.get("current").decode()
                if ours.check([f"{run}/config"]):
                    return run, json.loads(ours.get(f"{run}/config"))
        except Exception as exc:
            raise InputError(f"the store at {address} stopped answering: {exc}") from None
        if time.monotonic() >= deadline:
            raise InputError(f"no heartbeats in the store at {address}: the job does not call nccl_doctor.watch() "
                             "(or has not reached it yet; --wait gives it longer)")
        time.sleep(POLL_FIRST)


def _settings(config: dict, hang_after: float | None):
    from ..runtime.settings import Settings

    base = Settings.defaults()
    known = {k: v for k, v in config.get("settings", {}).items() if hasattr(base, k)}
    settings = base.with_(**known)
    return settings.with_(hang_after=hang_after) if hang_after is not None else settings


def _follow(monitor, interval: float, duration: float | None, show, stop_on_error: bool) -> Report:
    end = time.monotonic() + duration if duration is not None else None
    failures = 0
    try:
        while end is None or time.monotonic() < end:
            try:
                new = monitor.poll()
                failures = 0
            except Exception as exc:
                failures += 1
                if failures >= 3:
                    report = monitor.report()
                    report.facts["ended_because"] = f"the store stopped answering ({str(exc).splitlines()[0]})"
                    return report
                new = []
            for finding in new:
                if show:
                    show(finding)
            if monitor.all_ended() or (stop_on_error and any(f.severity == "error" for f in new)):
                break
            time.sleep(interval)
    except KeyboardInterrupt:
        pass
    return monitor.report()
