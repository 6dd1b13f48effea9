"""Untrusted text is data: the one rule by which every renderer draws a string it did not write.

Log lines, environment values, host, interface and file names come from users' clusters and from strangers.
Whatever the output form, such a string is first `shown()`: secrets redacted (nccl_doctor/redact.py) and
control characters made visible as escapes (ESC -> `\\x1b`, a bidi override -> `\\u202e`), so nothing reaches a
terminal, a page or an issue that could move the cursor, clear the screen, plant a link or reorder text.
Then it is escaped for the form it goes into: rich markup, Markdown (and the HTML inside Markdown), HTML.
Only newlines and tabs stay, where the form allows them.
"""

from __future__ import annotations

import html as _html
import re
from typing import TYPE_CHECKING, Any

from ..redact import redact_text

if TYPE_CHECKING:
    from rich.text import Text

# C0 and C1 controls but tab and newline, DEL, soft hyphen, zero-width and bidi controls, line/paragraph
# separators, lone surrogates (undecodable input), interlinear annotations, Unicode tag characters.
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f"
                     "\ufeff\ufff9-\ufffb\ud800-\udfff\U000e0000-\U000e007f]")
# What Markdown (CommonMark and GitHub's extensions) could read as syntax mid-line: emphasis, code, links and
# images, HTML and entities, tables, math, mentions; and the colon or dot that would start an autolink
# (`http://`, `www.`) or an :emoji: code. A backslash makes each one literal. (Line-start syntax, # - + 1.,
# never applies: what we write puts these strings mid-line.)
MARKDOWN_SPECIAL = re.compile(r"[\\`*_\[\]<>&|~!$@#]|:(?=//|[\w+-]+:)|(?<=www)\.", re.IGNORECASE)
CODE_SPAN = re.compile(r"`([^`\n]+)`")


def visible(text: Any) -> str:
    """The text with every control character written as a Python-style escape; tabs and newlines kept."""
    return CONTROL.sub(_escape_char, str(text))


def shown(text: Any) -> str:
    """The one rule: redacted, then control characters made visible. Plain text (a one-line error, a log)."""
    return visible(redact_text("" if text is None else str(text)))


def cut(value: Any, limit: int) -> str:
    """Redacted and cut to `limit` characters, still raw: a value that a renderer shows() later (once: shown
    twice, an escaped control character could read as the shape of a secret)."""
    return _ellipsis(redact_text("" if value is None else str(value)), limit)


def clipped(value: Any, limit: int) -> str:
    """shown() on one line, cut to `limit` characters: cut after redacting, so no secret is cut out of shape."""
    return _ellipsis(" ".join(shown(value).split()), limit)


def _ellipsis(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


# ------------------------------------------------------------------ rich

def text(value: Any, style: str = "") -> Text:
    """A rich Text holding the string literally: never parsed as markup."""
    from rich.text import Text  # rich only where it draws: `--json` and plain text start without it

    return Text(shown(value), style=style)


def markup(value: Any, limit: int | None = None) -> str:
    """The string for an f-string of rich markup: `f"[dim]{markup(path)}[/dim]"`; with a limit, clipped() on it
    (shown() once: shown twice, an escaped control character could read as the shape of a secret)."""
    from rich.markup import escape

    return escape(shown(value) if limit is None else clipped(value, limit))


# ------------------------------------------------------------------ Markdown

def md(value: Any) -> str:
    """Inline Markdown on one line: every special character escaped, except `code spans`, kept as code
    (their content is literal in Markdown, and the fixes we write use them for commands)."""
    parts = CODE_SPAN.split(_one_line(value))  # even indices: prose, odd: the inside of a code span
    return "".join(f"`{part}`" if i % 2 else _md_escape(part) for i, part in enumerate(parts))


def md_cell(value: Any) -> str:
    """A table cell (or any prose) on one line with every special character escaped; never empty."""
    return _md_escape(_one_line(value)) or " "


def md_code(lines: list[str]) -> list[str]:
    """A fenced code block of literal lines: the fence is longer than any run of backticks inside."""
    body = [shown(line) for line in lines]
    longest = max((len(run) for line in body for run in re.findall(r"`+", line)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence, *body, fence]


# ------------------------------------------------------------------ HTML

def html(value: Any) -> str:
    """Text content or an attribute value of HTML."""
    return _html.escape(shown(value), quote=True)


def _md_escape(text: str) -> str:
    return MARKDOWN_SPECIAL.sub(lambda m: "\\" + m.group(0), text)


def _one_line(value: Any) -> str:
    return " ".join(shown(value).split())


def _escape_char(match: re.Match[str]) -> str:
    code = ord(match.group(0))
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
