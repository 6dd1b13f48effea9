"""The knowledge base, kept as data: causes, categories, environment variables, log signatures.

Adding knowledge means adding a row to a data file next to this module, not code.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def load_toml(name: str) -> dict[str, Any]:
    return tomllib.loads(resources.files(__package__).joinpath(name).read_text(encoding="utf-8"))


def read_text(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


@dataclass(frozen=True)
class Category:
    id: str
    description: str
    usual: str  # the cause a failure of this category most often turns out to have
    confirm: str = ""  # the one piece of information that confirms a cause of this category


@dataclass(frozen=True)
class Cause:
    id: str
    category: str
    title: str
    explanation: str
    fix: tuple[str, ...]
    references: tuple[str, ...] = ()
    explains: frozenset[str] = frozenset()  # causes whose symptoms this cause accounts for (they fold under it)
    symptom: bool = False  # generic (a peer died, 'internal error'): any specific cause explains it
    confirm: str = ""  # what would confirm it; the category's when empty

    @property
    def confirmation(self) -> str:
        return self.confirm or categories()[self.category].confirm

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "category": self.category, "title": self.title, "explanation": self.explanation,
                "fix": list(self.fix), "references": list(self.references), "explains": sorted(self.explains),
                "symptom": self.symptom, "confirm": self.confirmation}


@cache
def categories() -> dict[str, Category]:
    rows = load_toml("categories.toml")["category"]
    return {r["id"]: Category(r["id"], r["description"], r["usual"], r.get("confirm", "")) for r in rows}


@cache
def causes() -> dict[str, Cause]:
    known = categories()
    table: dict[str, Cause] = {}
    for row in load_toml("causes.toml")["cause"]:
        c = Cause(
            id=row["id"],
            category=row["category"],
            title=row["title"],
            explanation=" ".join(row["explanation"].split()),
            fix=tuple(row["fix"]),
            references=tuple(row.get("references", ())),
            explains=frozenset(row.get("explains", ())),
            symptom=bool(row.get("symptom", False)),
            confirm=row.get("confirm", ""),
        )
        if c.category not in known:
            raise ValueError(f"cause {c.id}: unknown category {c.category}")
        if c.id in table:
            raise ValueError(f"cause {c.id} defined twice")
        table[c.id] = c
    for c in table.values():
        unknown = c.explains - table.keys()
        if unknown:
            raise ValueError(f"cause {c.id} explains unknown causes {sorted(unknown)}")
    for k in known.values():
        if table.get(k.usual) is None or table[k.usual].category != k.id:
            raise ValueError(f"category {k.id}: its usual cause {k.usual!r} is not one of its causes")
    return table


def cause(cause_id: str) -> Cause:
    try:
        return causes()[cause_id]
    except KeyError:
        raise KeyError(f"unknown cause id {cause_id!r}") from None


@cache
def xids() -> dict[int, dict[str, Any]]:
    """NVIDIA Xid codes: meaning, severity for NCCL, and the cause they point at (hardware.toml)."""
    return {row["code"]: row for row in load_toml("hardware.toml")["xid"]}


@cache
def workarounds() -> tuple[dict[str, Any], ...]:
    """Settings users report as fixing a failure, and the causes they point at (workarounds.toml)."""
    rows = load_toml("workarounds.toml")["workaround"]
    for row in rows:
        for cause_id in row["causes"]:
            cause(cause_id)
    return tuple(rows)
