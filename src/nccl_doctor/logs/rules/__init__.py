"""The log rules: each one a function `LogView -> Iterable[Clue]` that declares the observations it emits.

Rules are independent: none sees another's clues or depends on running after another; the weighing
(logs/weigh.py) combines what they return. The registry is built from the modules below by the `rule`
decorator, so docs/causes.md can say which rule reaches each cause.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ..evidence import Clue, LogView, observation

RuleFn = Callable[[LogView], Iterable[Clue]]


@dataclass(frozen=True)
class Rule:
    name: str
    doc: str
    observations: tuple[str, ...]
    fn: RuleFn

    def run(self, view: LogView) -> list[Clue]:
        clues = list(self.fn(view))
        for clue in clues:
            if clue.observation not in self.observations:
                raise ValueError(f"rule {self.name} emitted undeclared observation {clue.observation}")
        return clues

    def causes(self) -> set[str]:
        """The causes it reaches (observations that may name any cause only add weight: not listed)."""
        return {c for o in self.observations if not observation(o).wildcard for c in observation(o).causes}


RULES: list[Rule] = []


def rule(*observations: str) -> Callable[[RuleFn], RuleFn]:
    """Register a rule with the observations it can emit."""

    def register(fn: RuleFn) -> RuleFn:
        for o in observations:
            observation(o)  # unknown ids fail at import
        RULES.append(Rule(fn.__name__.removeprefix("rule_"), " ".join((fn.__doc__ or "").split()),
                          tuple(observations), fn))
        return fn

    return register


def run_rules(view: LogView) -> list[Clue]:
    return [clue for r in RULES for clue in r.run(view)]


# The rule modules register themselves on import.
from . import collectives, crashes, hardware, lines, network, resources, software, stalls, timeouts  # noqa: E402,F401

__all__ = ["RULES", "Rule", "rule", "run_rules"]
