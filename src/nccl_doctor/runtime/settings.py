"""Thresholds of the heartbeat and the detector: defaults from catalog/runtime.toml, overridable per call."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from functools import cache
from typing import Any

from ..catalog import load_toml


@cache
def runtime_table() -> dict[str, Any]:
    return load_toml("runtime.toml")


@dataclass(frozen=True)
class Settings:
    beat: float
    sample: float
    hang_after: float
    stale_after: float
    straggler_share: float
    straggler_min_lag: float
    straggler_polls: int
    step_ratio: float
    step_lag: int
    timeout_fraction: float
    advice_factor: float
    advice_floor: float
    loose_factor: float

    @classmethod
    def defaults(cls) -> Settings:
        table = runtime_table()["thresholds"]
        return cls(**{f.name: table[f.name] for f in fields(cls)})

    def with_(self, **overrides: Any) -> Settings:
        """These settings with the given values (None keeps the default); the heartbeat timing follows hang_after."""
        given = {k: v for k, v in overrides.items() if v is not None}
        unknown = set(given) - {f.name for f in fields(self)}
        if unknown:
            raise TypeError(f"unknown setting(s): {', '.join(sorted(unknown))}")
        new = replace(self, **given)
        if "beat" not in given and new.hang_after < 4 * new.beat:  # a hang must be seen over several beats
            new = replace(new, beat=max(0.1, new.hang_after / 8))
        if "stale_after" not in given:
            new = replace(new, stale_after=max(4 * new.beat, min(new.stale_after, new.hang_after)))
        return new

    @property
    def stack_after(self) -> float:
        """A rank idle for this long publishes its stack, so it is there when the detector decides."""
        return max(self.beat, self.hang_after / 2)


def phase_rule(phase: str | None) -> dict[str, str] | None:
    """The [[phase]] row whose prefix the phase name starts with: the work it means and its cause."""
    if not phase:
        return None
    name = phase.lower()
    for row in runtime_table()["phase"]:
        if any(name.startswith(p) for p in row["prefixes"]):
            return row
    return None
