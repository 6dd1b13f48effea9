"""Renderers: one report, several faces (rich text, JSON, Markdown, HTML).

Every string a renderer did not write itself goes through literal.py (redacted, control characters made
visible, escaped for the form); JSON keeps strings as data (json escapes control characters) but redacted.
"""

from __future__ import annotations

import json
import sys
from typing import TextIO

from ..model import Report
from ..redact import redact_json


def render_json(report: Report) -> str:
    return json.dumps(redact_json(report.to_json()), indent=2, default=str)


def emit(report: Report, *, as_json: bool = False, out: TextIO | None = None) -> int:
    """Print the report in the chosen form and return the exit code it calls for."""
    out = out or sys.stdout
    if as_json:
        out.write(render_json(report) + "\n")
    else:
        from .text import render_text  # rich, imported only to draw

        render_text(report, out)
    return report.exit_code
