"""Signatures derived from the sources: every error and warning template of NCCL, RCCL, aws-ofi-nccl, Gloo and
PyTorch c10d, the CUDA/HIP error strings, the launcher and distributed set-up messages of accelerate, DeepSpeed
and Lightning, those of vLLM's, sglang's and Ray's own communication layers, and those of the NCCL users outside
torch.distributed (Horovod, XGBoost, RAFT, jax.distributed), each with where it comes from and the releases (or,
where releases were not read, the commits) that print it.

The tables (catalog/templates/*.tsv) are facts extracted from the projects' sources release by release;
catalog/template_causes.toml says what each template means. A template becomes a regex: printf placeholders
turn into what they print, runs of spaces stretch, case is ignored (wordings changed case between releases).
Templates with little fixed text only match where NCCL prints a message: after `WARN ` or at the start of a
line (PyTorch's `Last error:` puts it there).
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass
from functools import cache
from collections.abc import Container
from typing import Any

from ..catalog import cause as lookup_cause
from ..catalog import load_toml, read_text

TABLES = ("nccl", "rccl", "aws_ofi_nccl", "gloo", "pytorch", "cuda", "wrappers")
SPECIFIC = 20  # letters and digits of fixed text a template needs to match anywhere in a line
MIN_FIXED = 8  # below this a template is too vague to recognise at all
# Where a short message is printed: a WARN line, a line of its own, after a prefix, NCCL's 'Last error:', or in
# the check macros of NCCL's examples and nccl-tests ("Failed, NCCL error %s:%d '%s'", "Test NCCL failure ... '%s'")
SHORT_CONTEXT = r"(?:\bWARN\s+(?:\S+ )?|^\W{0,4}|\]:\s*|Last error:\s*|NCCL (?:failure|error)\b[^'\n]{0,60}')"
# Where a CUDA/HIP error string is printed: NCCL's 'Cuda failure', PyTorch's 'CUDA error:', the enum names.
CUDA_CONTEXT = (r"(?:(?:cuda|hip) (?:failure|error)\b[^'\n]{0,60}'|(?:cuda|hip) (?:failure|error)\s*:\s*|CUDA error:?\s*(?:\d+\s*)?|"
                r"HIP error:?\s*|hipError\w*\W+|"
                r"cudaError\w*\W+|CUDA_ERROR_\w+\W+|error \d+ ')")
LEADING_STRING = re.compile(r"^(?:\.\*\?(?:\\s[+*])?)+")  # a template's opening '%s ', as printf_regex writes it
PRINTF = re.compile(r"%(?P<flags>[-+ #0]*)(?P<width>\d+|\*)?(?:\.(?P<prec>\d+|\*))?(?P<len>hh|h|ll|l|L|z|j|t|q)?"
                     r"(?P<conv>[diouxXeEfgGcspnm%])")


@dataclass(frozen=True)
class Template:
    """One message template of a project's sources."""

    project: str
    file: str
    function: str
    level: str
    text: str
    first: str
    last: str

    @property
    def provenance(self) -> str:
        where = self.file.split(";")[0]
        func = self.function.split(";")[0]
        span = self.first if self.first == self.last else f"{self.first} .. {self.last}"
        return f"{self.project} {where}{f' {func}()' if func else ''}, {span}"


@dataclass(frozen=True)
class Meaning:
    """What catalog/template_causes.toml says about a template."""

    rule: int  # index of the rule that claimed it
    causes: dict[str, float]
    role: str  # root, generic, echo; "hint" for benign templates
    benign: str = ""


SOURCE_COLUMNS = ("project", "file", "function", "level", "template", "first_version", "last_version")
MEANING_COLUMNS = ("role", "causes", "benign")  # generated from template_causes.toml by `--update`


@cache
def templates() -> tuple[Template, ...]:
    return tuple(t for t, _ in _rows())


@cache
def _rows() -> tuple[tuple[Template, dict[str, str]], ...]:
    rows: list[tuple[Template, dict[str, str]]] = []
    for table in TABLES:
        for row in csv.DictReader(io.StringIO(read_text(f"templates/{table}.tsv")), delimiter="\t",
                                  quoting=csv.QUOTE_NONE):
            rows.append((Template(row["project"], row["file"], row["function"], row["level"], row["template"],
                                  row["first_version"], row["last_version"]), row))
    return tuple(rows)


def stored_meanings() -> dict[Template, Meaning]:
    """The meaning columns as the tables hold them (what the signatures use)."""
    out = {}
    for template, row in _rows():
        causes = dict((c, float(v)) for c, v in (kv.split("=") for kv in row.get("causes", "").split()))
        out[template] = Meaning(-1, causes, row.get("role", ""), row.get("benign", ""))
    return out


@cache
def rules() -> tuple[dict[str, Any], ...]:
    table = load_toml("template_causes.toml")["rule"]
    for i, rule in enumerate(table):
        if ("causes" in rule) == ("benign" in rule):
            raise ValueError(f"template rule {i}: give either causes or benign")
        for cause in rule.get("causes", {}):
            lookup_cause(cause)
        for key in ("match", "project", "file", "function"):
            if key in rule:
                rule[f"_{key}"] = re.compile(rule[key])
    return tuple(table)


def meaning(template: Template) -> Meaning | None:
    """The first rule that claims the template (None: no rule does, which a test forbids)."""
    for i, rule in enumerate(rules()):
        if not rule["_match"].search(template.text):
            continue
        if any(f"_{k}" in rule and not rule[f"_{k}"].search(getattr(template, k)) for k in ("project", "file",
                                                                                            "function")):
            continue
        if "benign" in rule:
            return Meaning(i, {}, "hint", rule["benign"])
        causes = {c: float(s) for c, s in rule["causes"].items()}
        role = rule.get("role") or ("root" if max(causes.values()) >= 0.6 else "generic")
        return Meaning(i, causes, role)
    return None


def fixed_text(text: str) -> str:
    """The letters and digits a template always prints."""
    return re.sub(r"[^A-Za-z0-9]", "", PRINTF.sub("", text))


def printed_line(text: str) -> str:
    """The line of a message that prints over several (`\\n` in the template) by which a log shows it: the first
    with enough fixed text to be recognised, else the one with the most. Logs are read line by line."""
    lines = [line for line in text.split("\\n") if line.strip()] or [text]
    return next((line for line in lines if len(fixed_text(line)) >= MIN_FIXED),
                max(lines, key=lambda line: len(fixed_text(line))))


def pattern(template: Template) -> str | None:
    """The regex for a template's lines, or None when it prints too little fixed text to be recognised."""
    text = printed_line(template.text)
    fixed = fixed_text(text)
    if len(fixed) < MIN_FIXED and template.project != "cuda":
        return None
    body = printf_regex(text)
    if template.project == "cuda":  # a long error string is recognised anywhere, a short one where CUDA prints it
        context = "" if len(fixed) >= SPECIFIC else CUDA_CONTEXT
        named = enum_word(template)
        return "(?i)" + (f"(?:{context}{body}|\\b(?:cuda|hip){named}\\b)" if named else context + body)
    if len(fixed) < SPECIFIC:
        return "(?i)" + SHORT_CONTEXT + body
    return "(?i)" + LEADING_STRING.sub("", body)  # searched anywhere: a line may start where the text does


def enum_word(template: Template) -> str:
    """'errorinvaliddevice' for the runtime's cudaErrorInvalidDevice: what its name and HIP's hipErrorInvalidDevice
    share, as tools that print the name instead of the text show it ('hipErrorInvalidDevice')."""
    name = template.function.split(";")[0]
    return name[len("cuda"):].lower() if template.project == "cuda" and name.startswith("cudaError") else ""


def literal(template: Template, common: Container[str] = "") -> str:
    """Fixed text (lower case) that every line of the template contains, and `common` (what healthy logs print)
    does not: the longest such word; else the longest run of words as printed; else the longest word."""
    fixed = [part.strip() for part in PRINTF.sub("\0", printed_line(template.text)).split("\0")]
    words = [w.lower() for part in fixed for w in part.split() if w]
    rare = [w for w in words if w not in common]
    if rare or not words:
        return max(rare, key=len, default="")
    runs = [part.lower() for part in fixed if len(part.split()) > 1 and part.lower() not in common]
    return max(runs or words, key=len)


def printf_regex(text: str) -> str:
    """A printf format as the regex of what it prints."""
    out: list[str] = []
    pos = 0
    for m in PRINTF.finditer(text):
        before = _literal(text[pos:m.start()])
        if m.group("conv") in "sm" and before.endswith(r"\s+"):  # '%s' may print nothing: 'GPU  to'
            before = before[:-1] + "*"
        out.append(before)
        out.append(_conversion(m))
        pos = m.end()
    out.append(_literal(text[pos:]))
    regex = "".join(out)
    while regex.endswith((r".*?", r"\.")):  # a trailing string placeholder matches the rest of the line;
        regex = regex[:-3] if regex.endswith(r".*?") else regex[:-2]  # a closing full stop is often cut
    return regex.strip() or r"\S"


def example(template: Template) -> str:
    """A line the template prints (placeholders filled in), for the self-check of its regex."""
    fill = {"d": "3", "i": "3", "u": "3", "o": "7", "x": "1f", "X": "1F", "p": "0x7f3a", "c": "x", "e": "1.5",
            "E": "1.5", "f": "1.5", "g": "1.5", "G": "1.5", "s": "mlx5_0", "m": "Connection refused", "n": ""}
    line = PRINTF.sub(lambda m: "%" if m.group("conv") == "%" else fill[m.group("conv")], printed_line(template.text))
    if template.project == "cuda":
        return f"NCCL WARN Cuda failure '{line}'"
    return f"host-1:123:456 [0] {template.file.split(';')[0]}:42 NCCL WARN {line}"


def _literal(text: str) -> str:
    parts = re.split(r"(\s+|\\n)", text)
    return "".join(r"\s+" if part.strip() == "" or part == "\\n" else re.escape(part) for part in parts if part)


def _conversion(m: re.Match[str]) -> str:
    conv = m.group("conv")
    if conv == "%":
        return "%"
    if conv in "diu":
        return r"-?\d+"
    if conv in "oxX":
        return r"(?:0x)?[0-9a-fA-F]+"
    if conv == "p":
        return r"(?:0x[0-9a-fA-F]+|\(nil\)|[0-9a-fA-F]+)"
    if conv in "eEfgG":
        return r"(?:[-+]?[0-9.]+(?:[eE][-+]?\d+)?|[-+]?inf|nan)"
    if conv == "c":
        return "."
    return ".*?"  # %s, %m: any text (lazily, so the literal that follows anchors it)


def render_table(table: str) -> str:
    """A template table with its meaning columns computed from the rules (what `--update` writes)."""
    lines = ["\t".join(SOURCE_COLUMNS + MEANING_COLUMNS)]
    for template, row in _rows():
        if not row["project"] or table != TABLE_OF.get(row["project"], row["project"]).replace("-", "_"):
            continue
        m = meaning(template)
        causes = " ".join(f"{c}={v:g}" for c, v in m.causes.items()) if m else ""
        lines.append("\t".join([row[c] for c in SOURCE_COLUMNS] + [m.role if m else "", causes, m.benign if m else ""]))
    return "\n".join(lines) + "\n"


# The projects around NCCL whose messages share one table: launchers, serving stacks, other NCCL users.
WRAPPERS = ("accelerate", "deepspeed", "lightning", "vllm", "sglang", "ray", "horovod", "xgboost", "raft", "jax")
TABLE_OF = {"aws-ofi-nccl": "aws_ofi_nccl", **{project: "wrappers" for project in WRAPPERS}}
TABLES_DIR = "templates"  # under catalog/
