"""The judge: gathers each stage's results from every rank over the store, decides, reports.

It runs in rank 0 (a thread, so that a collective stuck on rank 0's main thread cannot stop it)
or, under `--local`, in the parent process. Stages run in order; the verdict of each tells the
ranks which stage comes next, or that they are done. Findings keep stage order: what an earlier,
simpler stage found explains what a later one would only echo. The judge prints nothing: it tells
`Events` what happens (render/ draws them) and returns a Report.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ..model import Finding, Report, Severity, fold
from .launch import LocalRanks
from .options import Options
from .store import Exchange, Gathered
from .watchdog import Liveness

MARGIN = 10.0  # seconds a rank waits for a verdict beyond the stage deadline (the judge's own work)


@dataclass
class Outcome:
    status: str  # passed | failed | skipped
    detail: str = ""
    findings: list[Finding] = field(default_factory=list)
    verdict: dict[str, Any] = field(default_factory=dict)  # what the ranks need from this stage's decision
    seconds: float = 0.0

    @classmethod
    def judged(cls, findings: list[Finding], detail: str, **verdict: Any) -> Outcome:
        failed = any(f.severity == Severity.ERROR for f in findings)
        return cls("failed" if failed else "passed", detail, findings, verdict)


class Events:
    """What the judge says while it runs, for whoever draws it (render/); this base hears nothing."""

    def stage_started(self, index: int, total: int, title: str) -> None:
        """Stage `index` (1-based) of `total` begins."""

    def stage_ended(self, index: int, total: int, record: dict) -> None:
        """A stage ended (or was skipped): its record, as the report's facts["stages"] holds it."""

    def progress(self, what: str, done: int, total: int) -> None:
        """Part of a long stage is done (rounds of the link test)."""

    def measured(self, kind: str, item: dict) -> None:
        """A result the user wants as soon as it exists (kind "sweep.row": one row of nccl-tests' table)."""


@dataclass
class JudgeContext:
    """What the judge knows so far; stages read it and add to it."""

    exchange: Exchange
    world_size: int
    options: Options
    launcher: str
    liveness: Liveness
    local: LocalRanks | None = None
    events: Events = field(default_factory=Events)
    identities: dict[int, dict] = field(default_factory=dict)  # rank -> host, pid, local_rank
    plan: dict[str, Any] = field(default_factory=dict)  # decisions later stages and ranks rely on
    facts: dict[str, Any] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)  # of the stages judged so far (a stage may add fixes)
    run_token: str = ""
    terminating: threading.Event = field(default_factory=threading.Event)  # conclude now with what is known

    def host(self, rank: int) -> str:
        return self.identities.get(rank, {}).get("host", "?")

    def hosts_of(self, ranks: list[int]) -> list[str]:
        return sorted({self.host(r) for r in ranks if r in self.identities})

    def who(self, rank: int) -> str:
        ident = self.identities.get(rank)
        return f"rank {rank} ({ident['host']}, pid {ident['pid']})" if ident else f"rank {rank}"

    def gather(self, step: str, deadline: float | None = None) -> Gathered:
        """Every rank's result of `step`; gives up early once every missing rank is known dead."""
        end = deadline if deadline is not None else time.monotonic() + self.options.timeout
        return self.exchange.gather(step, self.world_size, end,
                                    give_up=lambda missing: self.terminating.is_set() or self.liveness.all_dead(missing))


@dataclass(frozen=True)
class Stage:
    """One step of the check: what each rank does, and how the judge decides."""

    name: str
    title: str
    on_rank: Callable[[Any], None]  # (RankContext) -> None: do the work, publish results
    on_judge: Callable[[JudgeContext], Outcome]
    runs_after_failure: bool = False  # safe diagnostics that still run when an earlier stage failed
    patience: float = 0.0  # seconds granted on top of the stage deadline (rendezvous: process start-up)
    skip: Callable[[JudgeContext], str | None] = lambda ctx: None  # a reason to skip, decided before it runs


class Judge:
    def __init__(self, ctx: JudgeContext, stages: list[Stage]) -> None:
        self.ctx, self.stages = ctx, stages
        self.outcomes: dict[str, Outcome] = {}

    def run(self) -> Report:
        """Run every stage in order; always ends by telling every rank it is done. Interrupted (Ctrl-C,
        SIGTERM), it reports what it had: facts["interrupted"] says so."""
        try:
            self._run_stages()
        except KeyboardInterrupt:
            self.ctx.facts["interrupted"] = True
        finally:
            try:
                self.ctx.exchange.put("done", {"at": time.time()})
            except Exception:  # the store is gone: the ranks' watch threads notice that by themselves
                pass
        return self.report()

    def _run_stages(self) -> None:
        index = 0
        while index is not None and index < len(self.stages):
            stage = self.stages[index]
            self.ctx.events.stage_started(index + 1, len(self.stages), stage.title)
            started = time.monotonic()
            try:
                outcome = stage.on_judge(self.ctx)
            except KeyboardInterrupt:  # the stage ends here, with what it measured (bench's rows are facts already)
                self._record(index, Outcome("failed", "interrupted", seconds=time.monotonic() - started))
                raise
            except Exception as exc:  # a bug in a stage must still end the run with a report
                outcome = Outcome("failed", f"internal error: {type(exc).__name__}: {exc}")
                if "NCCL_DOCTOR_DEBUG" in os.environ:
                    raise
            outcome.seconds = time.monotonic() - started
            self._record(index, outcome)
            following = self._next(index + 1)
            self.ctx.exchange.decide(stage.name, {**outcome.verdict,
                                                  "next": self.stages[following].name if following is not None else None})
            index = following

    def _record(self, index: int, outcome: Outcome) -> None:
        stage = self.stages[index]
        self.outcomes[stage.name] = outcome
        self.ctx.findings.extend(outcome.findings)
        self.ctx.events.stage_ended(index + 1, len(self.stages), stage_record(stage, outcome))

    def _next(self, start: int) -> int | None:
        """The next stage to run; stages skipped on the way are recorded with their reason."""
        for index in range(start, len(self.stages)):
            stage = self.stages[index]
            reason = self._blocked(stage) or stage.skip(self.ctx)
            if reason is None:
                return index
            self._record(index, Outcome("skipped", reason))
        return None

    def _blocked(self, stage: Stage) -> str | None:
        for name, outcome in self.outcomes.items():
            if outcome.status == "failed" and (name == self.stages[0].name or not stage.runs_after_failure):
                return f"not run: stage '{name}' failed"
        return None

    def report(self) -> Report:
        """Findings in stage order within each severity: what an earlier stage found explains what a later
        one would only echo, so a later finding for ranks already named folds into the earlier one."""
        found = [f for s in self.stages if (o := self.outcomes.get(s.name))
                 for f in sorted(o.findings, key=Finding.sort_key)]
        self.ctx.facts["stages"] = [stage_record(s, o) for s in self.stages if (o := self.outcomes.get(s.name))]
        folded = fold(found, order=lambda f: f.severity.rank, same=Finding.within)
        return Report(self.ctx.options.command, folded, self.ctx.facts, order=None)


def stage_record(stage: Stage, outcome: Outcome) -> dict:
    return {"name": stage.name, "title": stage.title, "status": outcome.status, "seconds": round(outcome.seconds, 3),
            "detail": outcome.detail}


def failed_to_start(command: str, finding: Finding) -> Report:
    """The job could not begin (no store to host or reach, an inconsistent launcher): the rendezvous failed."""
    stage = Stage("rendezvous", "Rendezvous", lambda ctx: None, lambda ctx: Outcome("failed"))
    return Report(command, [finding], {"stages": [stage_record(stage, Outcome("failed", finding.message))]})
