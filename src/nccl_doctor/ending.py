"""Ending the process without the interpreter's teardown.

Teardown frees every object one by one (40 ms after `logs` has read a gigabyte) and, where torch's C++
threads still run (process groups, stores), can abort a process that already gave its report. Output is
flushed first; exit handlers run where asked (a normal end), not where threads may be stuck.
"""

from __future__ import annotations

import atexit
import os
import sys


def leave(code: int, exit_handlers: bool = False) -> None:
    """End the process now with `code`, its output flushed (and its atexit handlers run if asked)."""
    if exit_handlers:
        atexit._run_exitfuncs()  # what sys.exit would run: tempfile and weakref finalizers, multiprocessing's
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # a closed or broken stream: nothing more can be said on it
            pass
    os._exit(code)
