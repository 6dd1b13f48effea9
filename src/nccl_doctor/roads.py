"""Which code reaches which cause (ruff's registry style).

Every rule, check stage, detector and log rule declares the causes it can emit: `@emits(...)` here, `@rule(...)`
(observations) in logs/rules/, and each log signature names its causes in the catalog. docs/causes.md lists
each cause's roads, and a test fails when a cause has none or a road has no docstring. A declared road is also
checked when it runs: a finding of a cause it did not declare is a programming error.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from .catalog import cause as lookup_cause
from .model import Finding, Report

F = TypeVar("F", bound=Callable[..., Any])
COMMAND_OF = (  # module prefix -> the command(s) whose findings it makes
    ("rules.lint", "lint, env, check"), ("rules.hardware", "topo, lint, env, check"), ("rules.consistency", "check"),
    ("rules.links", "check, bench"), ("cluster.bench", "bench"), ("cluster", "check, bench"), ("runtime", "watch, preflight"),
    ("logs", "logs"),
)


@dataclass(frozen=True)
class Road:
    name: str  # module.function, under nccl_doctor
    doc: str
    causes: frozenset[str]

    @property
    def commands(self) -> str:
        return next((cmd for prefix, cmd in COMMAND_OF if self.name.startswith(prefix)), "")


ROADS: list[Road] = []


def emits(*causes: str) -> Callable[[F], F]:
    """Declare the causes a function's findings can name; what it returns is checked against them."""
    for cause_id in causes:
        lookup_cause(cause_id)

    def register(fn: F) -> F:
        road = Road(f"{fn.__module__.removeprefix('nccl_doctor.')}.{fn.__qualname__}",
                    " ".join((inspect.getdoc(fn) or "").split()), frozenset(causes))
        ROADS.append(road)

        @functools.wraps(fn)
        def checked(*args: Any, **kwargs: Any) -> Any:
            return _checked(fn(*args, **kwargs), road)

        checked.road = road  # type: ignore[attr-defined]
        return checked  # type: ignore[return-value]

    return register


def _checked(out: Any, road: Road) -> Any:
    if isinstance(out, Finding):
        return _check(out, road)
    if isinstance(out, Report):
        for finding in out.findings:
            _check(finding, road)
        return out
    if inspect.isgenerator(out):
        return _checked_items(out, road)
    if isinstance(out, (list, tuple)):
        for item in out:
            if isinstance(item, (Finding, list, tuple)):
                _checked(item, road)
    return out


def _checked_items(items: Iterable[Any], road: Road) -> Iterator[Any]:
    for item in items:
        yield _check(item, road) if isinstance(item, Finding) else item


def _check(finding: Finding, road: Road) -> Finding:
    """The road that made a finding vouches for it; roads that only pass it on (a stage, a report) do not."""
    if getattr(finding, "_road", None):
        return finding
    if finding.cause not in road.causes:
        raise ValueError(f"{road.name} emitted {finding.cause!r}, which it does not declare: add it to its @emits")
    object.__setattr__(finding, "_road", road.name)
    return finding


def all_roads() -> list[Road]:
    """Every road: the declared functions of every command, and `logs`' rules and signatures."""
    from .logs.evidence import observation
    from .logs.rules import RULES
    from .logs.signatures import signatures

    _import_submodules()
    roads = list(ROADS)
    for rule in RULES:
        roads.append(Road(f"logs.rules.{rule.name}", rule.doc, frozenset(rule.causes())))
    by_cause: dict[str, list[str]] = {}
    for sig in signatures():
        if sig.is_error:
            for cause_id in observation(sig.id).causes:
                by_cause.setdefault(cause_id, []).append(sig.id)
    for cause_id, sig_ids in sorted(by_cause.items()):
        written = [s for s in sig_ids if ":" not in s]
        roads.append(Road(f"logs.signatures[{cause_id}]",
                          f"{len(sig_ids)} log signatures ({len(written)} written, {len(sig_ids) - len(written)} "
                          f"from source templates)" + (f", e.g. {', '.join(written[:3])}" if written else ""),
                          frozenset({cause_id})))
    return roads


def _import_submodules() -> None:
    """Import every module of the package that may declare roads (they register on import)."""
    import importlib
    import pkgutil

    from . import cluster, rules, runtime

    for package in (cluster, rules, runtime):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            try:
                importlib.import_module(info.name)
            except ImportError:  # an optional dependency (torch, lightning, ray) is missing: its roads go unlisted
                continue


def roads_of(cause_id: str, roads: list[Road]) -> list[Road]:
    return [r for r in roads if cause_id in r.causes]
