"""The `nccl-doctor` command line: one group, one module per command under commands/.

Errors follow one rule: bad input or arguments print one line on stderr and exit 2;
a bug in nccl-doctor prints one line (traceback with NCCL_DOCTOR_DEBUG=1) and exits 3.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
import threading

import click

from . import __version__
from .ending import leave
from .model import InputError, Terminated
from .commands import COMMANDS
from .render.literal import shown

EXIT_USAGE = 2
EXIT_INTERNAL = 3
EXIT_INTERRUPTED = 128 + signal.SIGINT
EXIT_TERMINATED = 128 + signal.SIGTERM


class Commands(click.Group):
    """The commands of commands/, each imported when it is asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module = importlib.import_module(f".commands.{name}", __package__)
        return getattr(module, name)


@click.group(cls=Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="nccl-doctor")
def cli() -> None:
    """Find out why a distributed PyTorch job's communication fails."""


def fail(message: str, code: int) -> int:
    click.echo(f"nccl-doctor: {shown(message)}", err=True)
    return code


def run(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit code (never raises)."""
    terminated = threading.Event()

    def on_sigterm(*_: object) -> None:  # the same clean shutdown as Ctrl-C, then exit 143
        terminated.set()
        raise Terminated

    previous = signal.signal(signal.SIGTERM, on_sigterm) if threading.current_thread() is threading.main_thread() \
        else None
    try:
        result = cli.main(args=argv, prog_name="nccl-doctor", standalone_mode=False)
        return EXIT_TERMINATED if terminated.is_set() else result if isinstance(result, int) else 0
    except click.exceptions.Exit as exc:  # --help, --version
        return exc.exit_code
    except (click.exceptions.Abort, KeyboardInterrupt):  # click turns KeyboardInterrupt (Terminated too) into Abort
        if terminated.is_set():
            return fail("terminated", EXIT_TERMINATED)
        return fail("interrupted", EXIT_INTERRUPTED)
    except click.ClickException as exc:
        hint = " (see nccl-doctor --help)" if isinstance(exc, click.UsageError) else ""
        return fail(f"error: {exc.format_message()}{hint}", EXIT_USAGE)
    except InputError as exc:
        return fail(f"error: {exc}", EXIT_USAGE)
    except BrokenPipeError:
        return 0
    except Exception as exc:  # a bug: one line, traceback only on request
        if os.environ.get("NCCL_DOCTOR_DEBUG"):
            raise
        return fail(f"internal error: {type(exc).__name__}: {exc} (rerun with NCCL_DOCTOR_DEBUG=1 for a traceback)",
                    EXIT_INTERNAL)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def main() -> None:
    code = run()
    # torch's C++ threads (process groups, stores) can still run at interpreter teardown, where destroying them
    # aborts the process now and then ('terminate called without an active exception', exit -6) after the
    # report was given: a rank leaves as its watchdog does, no exit handler waiting on them. Otherwise the exit
    # handlers run and only the teardown is skipped.
    leave(code, exit_handlers="torch.distributed" not in sys.modules)
