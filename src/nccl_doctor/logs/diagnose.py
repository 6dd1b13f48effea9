"""Diagnosis: what was read -> clues from every rule -> weighed findings.

What grep cannot do happens here: every recognised line and every fact (interfaces and addresses, versions
and plugins per host, which rank failed first, SeqNums, stack dumps) becomes a clue; the weighing puts first
the cause that best explains all of them, folds the echoes under it and keeps the other readings as ranked
alternatives.
"""

from __future__ import annotations

from ..model import Finding
from .records import Collection
from .evidence import LogView
from .rules import run_rules
from .weigh import findings


def diagnose(col: Collection) -> list[Finding]:
    return findings(run_rules(LogView(col)))
