"""`nccl-doctor env`: what is true on this host (versions, NCCL libraries, GPUs, interfaces, IB, hardware,
limits, env).

Facts only: options -> facts (probe.collect()) -> Report -> render. `--json` prints the Report contract with
the facts and no findings; the text form (render/env.py) lays the same facts out in sections. Judging them
is `nccl-doctor lint`'s job.
"""

from __future__ import annotations

import os
import sys
import time

import click

from ..model import Report
from ..probe import collect
from ..render import emit
from ..render.env import render_facts


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the facts as JSON (report schema, no findings).")
def env(as_json: bool) -> int:
    """Show what is true on this host: versions, NCCL libraries, GPUs, interfaces, IB, hardware, limits, environment."""
    start = time.perf_counter()
    process_env = dict(os.environ)
    facts = collect(process_env)
    seconds = time.perf_counter() - start
    if as_json:
        return emit(Report("env", facts=facts), as_json=True)
    render_facts(facts, process_env, seconds, sys.stdout)
    return 0
