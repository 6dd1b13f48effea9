"""The judge: gathers each stage's results from every rank over the store, decides, reports.

It runs in rank 0 (a thread, so that a collective stuck on rank 0's main thread cannot stop it)
or, under `--local`, in the parent process. Stages run in order; the verdict of each tells the
ranks which stage comes next, or that they are done. Findings keep stage order: what an earlier,
simpler stage found explains what a later one would only echo.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, TextIO

from ..model import Finding, Report, Severity
from .launch import LocalRanks
from .store import Exchange, Gathered
from .watchdog import Liveness

MARGIN = 10.0  # seconds a rank waits for a verdict beyond the stage deadline (the judge's own work)


@dataclass
class Options:
    backend: str = "auto"  # auto | nccl | gloo
    timeout: float = 20.0  # deadline of each stage, and of each collective within the collectives stage
    quick: bool = False  # skip the bandwidth stage


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


@dataclass
class JudgeContext:
    """What the judge knows so far; stages read it and add to it."""

    exchange: Exchange
    world_size: int
    options: Options
    launcher: str
    liveness: Liveness
    local: LocalRanks | None = None
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


class Progress:
    """Live stage progress on stderr (rank 0's terminal); silent with --json."""

    def __init__(self, out: TextIO | None, total: int) -> None:
        self.total = total
        self.console = None
        if out is not None:
            from rich.console import Console

            self.console = Console(file=out, highlight=False, emoji=False, soft_wrap=True)

    def start(self, index: int, title: str) -> None:
        if self.console and self.console.is_terminal:
            self.console.print(f"[dim][{index}/{self.total}] {title} ...[/dim]")

    def end(self, index: int, title: str, outcome: Outcome) -> None:
        if not self.console:
            return
        style = {"passed": "green", "failed": "bold red", "skipped": "yellow"}[outcome.status]
        timing = f" {outcome.seconds:.1f} s" if outcome.status != "skipped" else ""
        from ..render.literal import markup

        self.console.print(f"[{index}/{self.total}] {title:<34} [{style}]{outcome.status}[/{style}]{timing}"
                           f"  [dim]{markup(outcome.detail)}[/dim]")


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
    def __init__(self, ctx: JudgeContext, stages: list[Stage], progress: Progress) -> None:
        self.ctx, self.stages, self.progress = ctx, stages, progress
        self.outcomes: dict[str, Outcome] = {}

    def run(self) -> Report:
        """Run every stage in order; always ends by telling every rank it is done."""
        try:
            self._run_stages()
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
            self.progress.start(index + 1, stage.title)
            started = time.monotonic()
            try:
                outcome = stage.on_judge(self.ctx)
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
        self.progress.end(index + 1, stage.title, outcome)

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
        findings: list[Finding] = []
        for stage in self.stages:
            outcome = self.outcomes.get(stage.name)
            if outcome:
                findings = merge(findings, sorted(outcome.findings, key=Finding.sort_key))
        self.ctx.facts["stages"] = [
            {"name": s.name, "title": s.title, "status": o.status, "seconds": round(o.seconds, 3), "detail": o.detail}
            for s in self.stages if (o := self.outcomes.get(s.name))]
        errors_first = sorted(findings, key=lambda f: f.severity.rank)  # stable: stage order within a severity
        return Report("check", errors_first, self.ctx.facts, keep_order=True)


def merge(existing: list[Finding], new: list[Finding]) -> list[Finding]:
    """Add findings, folding one that repeats a known cause for the same or fewer ranks into the first."""
    out = list(existing)
    for f in new:
        same = next((e for e in out if e.cause == f.cause and (set(f.ranks) <= set(e.ranks) if f.ranks
                                                                 else set(f.hosts) <= set(e.hosts))), None)
        if same is None:
            out.append(f)
        else:
            same.evidence.extend(ev for ev in f.evidence if ev not in same.evidence)
    return out

