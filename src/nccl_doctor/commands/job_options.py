"""The command line shared by the commands that run ranks (`check`, `bench`): where the ranks come from,
the backend, the deadline, the output; and the one line that says torch is missing."""

from __future__ import annotations

import importlib.util
from typing import Any, Callable

import click

from ..model import InputError


def require_torch(command: str) -> None:
    """One clear line instead of an import error deep inside, when torch is not installed."""
    if importlib.util.find_spec("torch") is None:
        raise InputError(f"{command} needs torch.distributed: install PyTorch "
                         "(`pip install 'nccl-doctor[torch]'`)")


class LocalCount(click.ParamType):
    """`--local N`: N ranks (at least one); `--local` alone: one per GPU, or 2 without GPUs."""

    name = "N"

    def convert(self, value: Any, param: Any, ctx: Any) -> int:
        if value == "auto" or value == 0 and param is None:
            return 0
        try:
            count = int(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number of ranks", param, ctx)
        if count < 1:
            self.fail(f"{count}: at least one rank (or --local alone: one per GPU, 2 without GPUs)", param, ctx)
        return count


def job_options(default_timeout: float) -> Callable[[Callable], Callable]:
    """The options every command that runs ranks takes, in one place."""
    options = [
        click.option("--local", "local", type=LocalCount(), is_flag=False, flag_value="auto", default=None,
                     help="Start N ranks on this host (--local alone: one per GPU, or 2 without GPUs)."),
        click.option("--backend", type=click.Choice(["auto", "nccl", "gloo"]), default="auto", show_default=True,
                     help="auto: NCCL when every rank has a GPU, else Gloo."),
        click.option("--timeout", type=click.FloatRange(min=1.0), default=default_timeout, show_default=True,
                     help="Deadline in seconds of each stage and of each collective."),
        click.option("--master-addr", default="127.0.0.1", show_default=True,
                     help="With --local: address ranks connect to."),
        click.option("--master-port", type=click.IntRange(0, 65535), default=0,
                     help="With --local: store port (default: a free one)."),
        click.option("--json", "as_json", is_flag=True, help="Print JSON."),
    ]

    def decorate(fn: Callable) -> Callable:
        for option in reversed(options):
            fn = option(fn)
        return fn

    return decorate
