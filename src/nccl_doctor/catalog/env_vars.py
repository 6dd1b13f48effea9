"""The environment variables NCCL, PyTorch, torchrun and Gloo read, loaded from nccl_env.tsv and torch_env.tsv.

One row per variable: how its reader parses the value (`read_as`), the allowed values or range, its status
(current / deprecated / removed / not-read / plugin), the NCCL releases that introduced, deprecated and removed
it, and the replacement. Rules judge settings against these rows; adding knowledge means adding a row.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from functools import cache

from . import read_text

STATUSES = ("current", "deprecated", "removed", "not-read", "plugin")
READ_AS = ("int", "bool", "enum", "enum-nocase", "level", "algo", "proto", "ifname", "hca", "flags", "string", "path",
           "torch-bool", "torch-int", "gloo-ifname")


@dataclass(frozen=True)
class EnvVar:
    name: str
    component: str  # "nccl", a PyTorch component ("ProcessGroupNCCL", "torchrun", ...) or "plugin"
    read_as: str
    values: tuple[str, ...] = ()
    min: int | None = None
    max: int | None = None
    default: str = ""
    status: str = "current"
    since: str = ""  # first NCCL release that reads it ("" = always / not NCCL)
    deprecated_in: str = ""
    removed_in: str = ""  # first NCCL release that no longer reads it
    replacement: str = ""  # a variable, or VARIABLE=VALUE
    plugin: str = ""
    aliases: tuple[str, ...] = ()
    meaning: str = ""

    @property
    def is_nccl(self) -> bool:
        return self.component in ("nccl", "plugin")

    @property
    def replacement_name(self) -> str:
        return self.replacement.split("=", 1)[0]


def _rows(name: str) -> list[dict[str, str]]:
    lines = [line for line in read_text(name).splitlines() if line.strip() and not line.startswith("#")]
    header = lines[0].split("\t")
    rows = []
    for number, line in enumerate(lines[1:], 2):
        cells = line.split("\t")
        if len(cells) != len(header):
            raise ValueError(f"{name}: row {number} ({cells[0]}) has {len(cells)} columns, expected {len(header)}")
        rows.append(dict(zip(header, (c.strip() for c in cells))))
    return rows


def _int(text: str) -> int | None:
    return int(text) if text else None


def _split(text: str) -> tuple[str, ...]:
    return tuple(v for v in text.split(",") if v)


def _nccl_var(row: dict[str, str]) -> EnvVar:
    return EnvVar(
        name=row["name"], component="plugin" if row["status"] == "plugin" else "nccl", read_as=row["read_as"],
        values=_split(row["values"]), min=_int(row["min"]), max=_int(row["max"]), default=row["default"],
        status=row["status"], since=row["since"], deprecated_in=row["deprecated_in"], removed_in=row["removed_in"],
        replacement=row["replacement"], plugin=row["plugin"], meaning=row["meaning"])


def _torch_var(row: dict[str, str]) -> EnvVar:
    return EnvVar(
        name=row["name"], component=row["component"], read_as=row["read_as"], values=_split(row["values"]),
        min=_int(row["min"]), max=_int(row["max"]), default=row["default"], status=row["status"],
        replacement=row["replacement"], aliases=_split(row["aliases"]), meaning=row["meaning"])


@cache
def env_vars() -> dict[str, EnvVar]:
    """Every known variable by name (NCCL's and PyTorch's)."""
    table: dict[str, EnvVar] = {}
    for var in [*map(_nccl_var, _rows("nccl_env.tsv")), *map(_torch_var, _rows("torch_env.tsv"))]:
        if var.name in table:
            raise ValueError(f"environment variable {var.name} defined twice")
        if var.status not in STATUSES or var.read_as not in READ_AS:
            raise ValueError(f"environment variable {var.name}: bad status {var.status!r} or read_as {var.read_as!r}")
        table[var.name] = var
    return table


def lookup(name: str) -> EnvVar | None:
    return env_vars().get(name)


def suggest(name: str, n: int = 1, cutoff: float = 0.8) -> list[str]:
    """Known names closest to a misspelt one (NCCL_DEBG -> NCCL_DEBUG)."""
    candidates = [v.name for v in env_vars().values() if v.status in ("current", "deprecated")]
    return difflib.get_close_matches(name.upper(), candidates, n=n, cutoff=cutoff)


def version_tuple(text: str | None) -> tuple[int, ...] | None:
    """The leading dotted version of a text: '2.21.5' -> (2, 21, 5), '2.26.2+cuda12.8' -> (2, 26, 2),
    'v2.18.1-1' -> (2, 18, 1); None when the text does not start with one. The one reader of versions."""
    match = re.match(r"\s*v?(\d+(?:\.\d+)*)", text or "")
    return tuple(int(part) for part in match.group(1).split(".")) if match else None