"""`nccl-doctor lint`: this process's (or a KEY=VALUE file's) NCCL / PyTorch / rendezvous settings, judged against
what NCCL and PyTorch actually read and what this host actually has."""

from __future__ import annotations

import os
import sys

import click

from ..model import InputError, Report
from ..probe import collect
from ..probe.environment import EnvFileError, SourcedEnv, read_env_file
from ..render import emit
from ..render.env import draw_lint_header
from ..rules.lint import lint as run_rules


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON (report schema): findings and the facts used.")
@click.option("--env-file", "env_file", metavar="FILE",
              help="Judge the KEY=VALUE lines of FILE (a launcher's env, a .env) instead of this process's environment.")
def lint(as_json: bool, env_file: str | None) -> int:
    """Check NCCL / PyTorch / rendezvous settings against what NCCL reads and what this host has."""
    if env_file:
        try:
            env = read_env_file(env_file)
        except EnvFileError as exc:
            raise InputError(f"--env-file {exc}") from None
    else:
        env = SourcedEnv(os.environ, "environment")
    facts = collect(env)
    report = Report("lint", findings=run_rules(env, facts), facts=facts)
    if not as_json:
        source = f"{len(env)} variables from {env_file}" if env_file else "this process's environment"
        draw_lint_header(sys.stdout, facts, source)
    return emit(report, as_json=as_json)
