"""Untrusted text is shown literally by every renderer: rich text, tables, Markdown, HTML, JSON.

Property tests write logs (and log file names) full of rich markup, Markdown, HTML and terminal escape sequences,
run `nccl-doctor logs` on them in every output form, and check that nothing crashed, that no control character
reached the output, that no markup of the payload took effect, and that the payload's text is all there.
"""

from __future__ import annotations

import json
import re
import sys
import unicodedata
from html.parser import HTMLParser
from pathlib import Path

from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt
from rich.console import Console

from nccl_doctor.cli import run
from nccl_doctor.logs import diagnose_paths
from nccl_doctor.model import Evidence, Finding, Report
from nccl_doctor.redact import redact_text
from nccl_doctor.render import literal, render_json
from nccl_doctor.render.html import render_html
from nccl_doctor.render.markdown import render_markdown
from nccl_doctor.render.table import print_rank_table
from nccl_doctor.render.text import render_text

HOSTILE = [
    "[/tmp/x]", "[bold]", "[/]", "[/bold]", "[link=https://evil.example]", "[black on black]", "[red]", "\\", "\\[b]",
    "[", "]", "**", "__", "*", "_", "`", "```", "~~", "<script>", "</div>", "<a href=x>", "&amp;", "&lt;", "|", "#",
    "\x1b[2J", "\x1b]8;;http://evil\x07", "\x1b[31m", "\x1bP", "\x07", "\x08", "\x0b", "\x0c", "\x7f", "\x9b", "\u202e",
    "\u2066", "\u200b", "\ufeff", "$x$", ":smile:", "@user", "[x](http://e)", "![i](http://e/i.png)", "<http://e>",
    "www.evil.example", "{", "}", "%s", "{0}", "é", "\u4e2d",
]
PAYLOAD = st.lists(st.sampled_from(HOSTILE) | st.text(st.characters(codec="utf-8", exclude_characters="\n\r\x00\x1c"
                                                                    "\x1d\x1e\x85\u2028\u2029 \t"), max_size=6),
                   min_size=1, max_size=6).map("".join).filter(lambda p: len(literal.visible(p)) <= 90)
NAME = PAYLOAD.map(lambda p: p.replace("/", "_")).filter(lambda p: 0 < len(p.encode()) <= 120)
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                          HealthCheck.function_scoped_fixture])
TIMEOUT_LINE = ("[rank0]:[E ProcessGroupNCCL.cpp:1316] [Rank 0] Watchdog caught collective operation timeout: "
                "WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600003 "
                "milliseconds before timing out. BEGINP {} ENDP")
ERROR_LINE = "[rank1]: RuntimeError: BEGINP {} ENDP"
MARKER = re.compile(r"BEGINP (.*?) ENDP", re.S)


def cli(*args: str) -> tuple[int, str, str]:
    with CliRunner().isolation() as (out, err, _):
        code = run(list(args))
        sys.stdout.flush()
        sys.stderr.flush()
        return code, out.getvalue().decode("utf-8"), err.getvalue().decode("utf-8")


def controls(text: str) -> list[str]:
    """Characters that act on a terminal or a reader instead of showing: none may be output."""
    return [c for c in text if c not in "\n\t" and unicodedata.category(c) in ("Cc", "Cf", "Cs", "Zl", "Zp")]


def flat(text: str) -> str:
    """Without whitespace (renderers wrap long lines where the payload has spaces) and backticks (Markdown and HTML
    show a `quoted` span of a message or a fix as code, its content literal)."""
    return re.sub(r"[\s`]+", "", text)


class Page(HTMLParser):
    """The tags of an HTML page and its text, as a browser would show it."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: set[str] = set()
        self.text: list[str] = []
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.tags.add(tag)

    def handle_data(self, data: str) -> None:
        self.text.append(data)


MARKDOWN_TAGS = {"h3", "h4", "h5", "h6", "p", "em", "strong", "code", "pre", "ul", "li", "table", "thead", "tbody",
                 "tr", "th", "td", "details", "summary", "sub"}
HTML_TAGS = {"html", "head", "meta", "title", "style", "body", "main", "header", "h1", "h2", "h3", "span", "div", "ul",
             "li", "p", "code", "section"}


def assert_literal_everywhere(paths: list[str], expected: list[str]) -> None:
    """`logs` on these paths, in every form: no crash, no control character out, every expected string shown."""
    code, out_json, _ = cli("logs", "--json", *paths)
    assert code in (0, 1), out_json
    report = json.loads(out_json)
    kept = [m for m in MARKER.findall(json.dumps(report, ensure_ascii=False))]  # what the reader kept, as data
    assert kept, "the payload line was not reported"

    code, text, err = cli("logs", *paths)
    assert code in (0, 1), err
    assert controls(text) == [] and controls(err) == []
    for want in expected:
        assert flat(literal.shown(want)) in flat(text), (want, text)

    code, markdown, _ = cli("logs", "--markdown", *paths)
    assert code in (0, 1) and controls(markdown) == []
    page = Page(MarkdownIt("commonmark").enable("table").render(markdown))
    assert page.tags <= MARKDOWN_TAGS, page.tags - MARKDOWN_TAGS
    for want in expected:
        assert flat(literal.shown(want)) in flat("".join(page.text)), (want, markdown)

    html = render_html(diagnose_paths(paths))
    assert controls(html) == []
    page = Page(html)
    assert page.tags <= HTML_TAGS, page.tags - HTML_TAGS
    for want in expected if report["findings"] else []:  # the page shows findings (logs' other facts: text, Markdown)
        assert flat(literal.shown(want)) in flat("".join(page.text)), (want, html)


@SETTINGS
@given(payload=PAYLOAD, name=NAME)
def test_hostile_evidence_and_file_names_are_shown_literally_in_every_form(tmp_path_factory, payload, name):
    folder = tmp_path_factory.mktemp("logs")
    log = folder / f"job-{name}.log"
    log.write_text(TIMEOUT_LINE.format(payload) + "\n", encoding="utf-8")
    report = json.loads(cli("logs", "--json", str(log))[1])
    evidence = report["findings"][0]["evidence"][0]
    assert_literal_everywhere([str(log)], [MARKER.search(evidence["text"]).group(1), Path(evidence["source"]).name])


@SETTINGS
@given(payload=PAYLOAD)
def test_hostile_lines_nothing_recognises_are_shown_literally(tmp_path_factory, payload):
    log = tmp_path_factory.mktemp("logs") / "train.log"
    log.write_text(ERROR_LINE.format(payload) + "\n", encoding="utf-8")
    report = json.loads(cli("logs", "--json", str(log))[1])
    seen = next(e["text"] for e in report["facts"]["unrecognized"] if "BEGINP" in e["text"])
    assert_literal_everywhere([str(log)], [MARKER.search(seen).group(1)])


# ------------------------------------------------------------------ what the issue measured

def test_a_closing_tag_in_a_log_no_longer_ends_the_report(tmp_path):
    log = tmp_path / "rank0.log"
    log.write_text("[rank0]: RuntimeError: connect to [localhost]:29500 failed, see [/tmp/x] on [node-017]\n")
    code, text, err = cli("logs", str(log))
    assert code == 0 and err == "", err
    assert "[localhost]:29500" in text and "[/tmp/x]" in text and "[node-017]" in text


def test_rank_table_keeps_bracketed_hosts_and_messages():
    facts = {"ranks": [{"rank": 0, "host": "[node-017]", "state": "[black on black]hidden",
                        "first_error": {"source": "a.log", "line": 3, "text": "connect to [localhost]:29500"}}]}
    console = Console(record=True, width=200)
    print_rank_table(console, facts)
    shown = console.export_text()
    assert "[node-017]" in shown and "[black on black]hidden" in shown and "connect to [localhost]:29500" in shown


# ------------------------------------------------------------------ every renderer, every field

FIELD = st.lists(st.sampled_from(HOSTILE) | st.text(max_size=5), max_size=5).map("".join)


@settings(max_examples=60, deadline=None)
@given(message=FIELD, host=FIELD, source=FIELD, text=FIELD, fix=FIELD, state=FIELD)
def test_every_renderer_shows_every_field_literally(message, host, source, text, fix, state):
    finding = Finding("collective-timeout", "error", message, hosts=[host], ranks=[0],
                      evidence=[Evidence(source, text, 3)], fix=[fix])
    facts = {"ranks": [{"rank": 0, "host": host, "state": state, "last_collective": "ALLREDUCE",
                        "first_error": {"source": source, "line": 3, "text": text}}]}
    report = Report("logs", [finding], facts)
    with CliRunner().isolation() as (stdout, _, _):
        render_text(report, sys.stdout)
        print_rank_table(Console(file=sys.stdout, width=100_000), facts)
        sys.stdout.flush()
        terminal = stdout.getvalue().decode()
    markdown = render_markdown(report)
    html = render_html(report)
    data = json.loads(render_json(report))
    for rendered in (terminal, markdown, html):
        assert controls(rendered) == []
    md_text = "".join(Page(MarkdownIt("commonmark").enable("table").render(markdown)).text)
    html_page = Page(html)
    assert html_page.tags <= HTML_TAGS
    for value in (message, host, source, text, fix):
        shown = flat(literal.shown(value))
        assert shown in flat(terminal) and shown in flat(md_text) and shown in flat("".join(html_page.text))
    assert data["findings"][0]["message"] == redact_text(message)  # JSON: the data itself, redacted


# ------------------------------------------------------------------ the rule itself

def test_control_characters_become_escapes_and_the_rest_stays():
    assert literal.visible("a\x1b[2Jb\tc\nd\u202ee\x9b") == "a\\x1b[2Jb\tc\nd\\u202ee\\x9b"
    assert literal.visible("\U000e0041") == "\\U000e0041"
    assert literal.shown(None) == ""


def test_markdown_code_fences_outgrow_any_backticks_inside():
    block = literal.md_code(["a ```` b", "c"])
    assert block[0] == block[-1] == "`````" and block[1:-1] == ["a ```` b", "c"]


def test_markdown_keeps_code_spans_and_escapes_the_rest():
    assert literal.md("run `ls *` then *x*") == "run `ls *` then \\*x\\*"
    assert literal.md_cell("a|b") == "a\\|b" and literal.md_cell("") == " "


def test_rich_markup_escapes_a_trailing_backslash():
    console = Console(record=True, width=200)
    console.print(f"[dim]{literal.markup('path' + chr(92))}[/dim] [b]{literal.markup('[/b]')}[/b]")
    assert console.export_text().strip() == "path\\ [/b]"


def test_a_value_is_shown_once_so_that_an_escape_never_reads_as_a_secret(tmp_path):
    # shown() twice turned "\x07\x1f" into the text "\\x07\\x1f", which then read as a URL's user name: redacted
    log = tmp_path / "train.log"
    log.write_text(ERROR_LINE.format("\x1b]8;;http://evil\x07\x1f@") + "\n", encoding="utf-8")
    assert_literal_everywhere([str(log)], ["\x1b]8;;http://evil\x07\x1f@"])
