"""TEST-ONLY fault injection, so the tests exercise real failures instead of faked results.

Undocumented on purpose: NCCL_DOCTOR_FAULT is read by each rank process, e.g.
  stall:rank=2:stage=collectives:op=all_reduce   sleep forever before the op (or the stage)
  die:rank=1:op=broadcast                        start the op, then SIGKILL itself in the middle of it
  freeze:rank=1:op=broadcast                     SIGSTOP itself before the op (alive, but no thread runs)
  skip:rank=3                                    exit before contacting the store (the rank never starts)
  stall:rank=3:stage=start                       hang before contacting the store (a rank stuck starting)
  stagger:stage=start:seconds=4                  each rank waits RANK x 4 s before contacting the store (a slow start)
  stall:rank=1:stage=sweep:op=sweep.all_reduce.4096   hang before that size of bench's sweep
Several faults are separated by ';'. A fault without rank= applies to every rank.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from typing import Mapping

ENV = "NCCL_DOCTOR_FAULT"
KINDS = ("stall", "die", "freeze", "skip", "stagger")


@dataclass(frozen=True)
class Fault:
    kind: str
    rank: int | None = None
    stage: str | None = None
    op: str | None = None
    seconds: float = 0.0

    def hits(self, rank: int, stage: str | None = None, op: str | None = None) -> bool:
        return ((self.rank is None or self.rank == rank)
                and (self.stage is None or self.stage == stage)
                and (self.op is None or self.op == op))


def parse(spec: str) -> list[Fault]:
    faults = []
    for item in filter(None, (s.strip() for s in spec.split(";"))):
        kind, *fields = item.split(":")
        if kind not in KINDS:
            raise ValueError(f"{ENV}: unknown fault kind {kind!r} (one of {', '.join(KINDS)})")
        opts = dict(f.split("=", 1) for f in fields)
        faults.append(Fault(kind, int(opts["rank"]) if "rank" in opts else None, opts.get("stage"), opts.get("op"),
                            float(opts.get("seconds", 0))))
    return faults


@dataclass(frozen=True)
class Faults:
    """The faults that concern one rank; each method is an injection point."""

    rank: int
    faults: tuple[Fault, ...] = ()

    @classmethod
    def from_env(cls, rank: int, env: Mapping[str, str]) -> Faults:
        return cls(rank, tuple(f for f in parse(env.get(ENV, "")) if f.rank in (None, rank)))

    def _find(self, kind: str, stage: str | None, op: str | None) -> Fault | None:
        return next((f for f in self.faults if f.kind == kind and f.hits(self.rank, stage, op)), None)

    def skips_start(self) -> bool:
        return any(f.kind == "skip" for f in self.faults)

    def before(self, stage: str, op: str | None = None) -> None:
        """Stall forever, freeze, or die, when a fault targets this point and needs no op in flight."""
        if self._find("stall", stage, op):
            while True:
                time.sleep(3600)
        if self._find("freeze", stage, op):
            os.kill(os.getpid(), signal.SIGSTOP)
        stagger = self._find("stagger", stage, op)
        if stagger:
            time.sleep(self.rank * stagger.seconds)
        fault = self._find("die", stage, op)
        if fault and (op is None) == (fault.op is None):
            die()

    def dies_during(self, stage: str, op: str) -> bool:
        fault = self._find("die", stage, op)
        return fault is not None and fault.op is not None


def die() -> None:
    """Die the way an OOM kill does: no cleanup, no last words."""
    os.kill(os.getpid(), signal.SIGKILL)
