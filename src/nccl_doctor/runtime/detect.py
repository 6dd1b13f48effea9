"""The detector: every rank's heartbeats -> findings naming the straggler, the hung rank, the dead rank.

Pure logic over the heartbeat dicts (runtime/heartbeat.py) and the detector's own clock, so it runs the
same on rank 0 and in `nccl-doctor watch`, and is tested with made-up heartbeats. Durations a rank
reports are measured on its own clock; the detector adds how long ago it received them on its clock,
so clocks need not agree, except for the arrival times of collectives, which are compared across ranks
(NTP keeps hosts within milliseconds; the lags that matter are tenths of seconds and more).
"""

from __future__ import annotations

import bisect
import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from ..model import Evidence, Finding, Report, ranges
from .settings import Settings, phase_rule
from ..roads import emits

STACK_LINES = 8
MIN_COMMON = 5  # collectives every rank reached, needed before arrival lags mean anything
MAX_COMPARED = 32  # collectives compared per evaluation: the recent ones, so a new straggler shows within ~20 steps
MIN_LATE = 3  # late arrivals needed: one slow step is not a straggler


@dataclass
class View:
    """The latest heartbeat of one rank and when the detector saw its beat counter move."""

    beat: dict[str, Any]
    seen_at: float


@dataclass
class Detector:
    settings: Settings
    world_size: int | None = None
    views: dict[int, View] = field(default_factory=dict)
    reported: dict[tuple, Finding] = field(default_factory=dict)
    streaks: dict[int, int] = field(default_factory=dict)

    # ------------------------------------------------------------------ input

    def observe(self, beats: dict[int, dict[str, Any]], now: float) -> list[Finding]:
        """Take the latest heartbeats; return the findings not reported before."""
        for rank, beat in beats.items():
            view = self.views.get(rank)
            if view is None or beat.get("beat") != view.beat.get("beat") or beat.get("state") != view.beat.get("state"):
                self.views[rank] = View(beat, now)
        new = self._dead(now)
        hung = self._stalls(now, new)
        if not hung:
            self._stragglers(now, new)
        return new

    def _emit(self, key: tuple, finding: Finding, new: list[Finding]) -> None:
        if key not in self.reported:
            new.append(finding)
        self.reported[key] = finding  # keep the latest figures for the final report

    # ------------------------------------------------------------------ helpers over views

    def _idle(self, rank: int, now: float) -> float:
        view = self.views[rank]
        return float(view.beat.get("idle") or 0.0) + (now - view.seen_at)

    def _running(self, now: float) -> list[int]:
        return sorted(r for r, v in self.views.items()
                      if v.beat.get("state") == "running" and now - v.seen_at < self.settings.stale_after)

    def who(self, rank: int) -> str:
        beat = self.views[rank].beat
        return f"rank {rank} ({beat.get('host', '?')}, pid {beat.get('pid', '?')})"

    def _hosts(self, ranks: list[int]) -> list[str]:
        return sorted({self.views[r].beat.get("host", "?") for r in ranks})

    def _where(self, rank: int) -> str:
        beat = self.views[rank].beat
        parts = [f"step {beat['step']}" if beat.get("step") is not None else "",
                 f"phase '{beat.get('phase')}'", f"collective #{beat['seq']}" if beat.get("seq") is not None else ""]
        return ", ".join(p for p in parts if p)

    def _stack_evidence(self, rank: int) -> list[Evidence]:
        beat = self.views[rank].beat
        stack = beat.get("stack") or []
        source = f"rank {rank} stack ({beat.get('stack_source', 'python')}, innermost first)"
        return [Evidence(source, line) for line in reversed(stack[-STACK_LINES:])]

    def _timeout(self) -> float | None:
        values = [v.beat["pg_timeout"] for v in self.views.values() if v.beat.get("pg_timeout")]
        return min(values) if values else None

    # ------------------------------------------------------------------ dead or frozen ranks

    @emits("rank-died")
    def _dead(self, now: float) -> list[Finding]:
        """Ranks whose heartbeat stopped: their process died (or its host)."""
        new: list[Finding] = []
        for rank, view in sorted(self.views.items()):
            silent = now - view.seen_at
            if view.beat.get("state") != "running" or silent < self.settings.stale_after:
                continue
            finding = Finding(
                "rank-died", "error",
                f"{self.who(rank)} stopped sending heartbeats {silent:.0f} s ago: the process died or is frozen "
                f"(a frozen one writes its stacks to its stderr through faulthandler); last seen at {self._where(rank)}",
                confidence=0.8, ranks=[rank], hosts=self._hosts([rank]),
                evidence=[Evidence(self.who(rank), f"last heartbeat #{view.beat.get('beat')} at {self._where(rank)}")]
                + self._stack_evidence(rank),
                fix=[f"On {view.beat.get('host', 'its host')}: is pid {view.beat.get('pid')} alive "
                     f"(`ps -p {view.beat.get('pid')}`)? If not, its own log and `dmesg -T | grep -i killed` say why."])
            self._emit(("rank-died", rank, view.beat.get("beat")), finding, new)
        return new

    # ------------------------------------------------------------------ hangs and long work on some ranks

    def _stalls(self, now: float, new: list[Finding]) -> bool:
        """Ranks behind while the others wait. Returns True while a stall is under way."""
        alive = self._running(now)
        if len(alive) < 2:
            return False
        position = self._positions(alive)
        if position is None:
            return False
        front_at = max(position.values())
        front = [r for r in alive if position[r] == front_at]
        behind = [r for r in alive if position[r] < front_at]
        wait = min(self._idle(r, now) for r in front)
        if not behind:
            return self._all_still(alive, wait, front_at, new)
        if wait < min(self.settings.hang_after, self._long_work_after() or math.inf):
            return False
        for rank in behind:
            self._behind(rank, front, wait, front_at, now, new)
        return wait >= self.settings.hang_after

    def _positions(self, ranks: list[int]) -> dict[int, int] | None:
        """How far each rank got: its collective sequence number, or its step when there is none."""
        for key in ("seq", "step"):
            values = {r: self.views[r].beat.get(key) for r in ranks}
            if all(v is not None for v in values.values()):
                return values  # type: ignore[return-value]
        return None

    def _long_work_after(self) -> float | None:
        timeout = self._timeout()
        return self.settings.timeout_fraction * timeout if timeout else None

    @emits("rank-hang", "straggler-rank", "rank0-evaluation", "checkpoint-io", "rank0-preprocessing",
           "dataloader-resume-skew")
    def _behind(self, rank: int, front: list[int], wait: float, front_at: int, now: float, new: list[Finding]) -> None:
        """A rank behind the others while they wait: hung (with its stack), a straggler, or busy in a marked phase
        of its own."""
        beat = self.views[rank].beat
        rule = phase_rule(beat.get("phase"))
        idle = self._idle(rank, now)
        timeout = self._timeout()
        waiting = f"ranks {ranges(front)}" if len(front) > 1 else f"rank {front[0]}"
        left = f"; the {timeout:.0f} s process-group timeout fires in {max(0.0, timeout - wait):.0f} s" if timeout else ""
        if rule is None and idle >= self.settings.hang_after:
            top = _innermost_python(beat.get("stack") or [])
            finding = Finding(
                "rank-hang", "error",
                f"{self.who(rank)} made no progress for {idle:.0f} s ({self._where(rank)}) while {waiting} "
                f"{'wait' if len(front) > 1 else 'waits'} in collective #{front_at}; it is at {top}{left}",
                confidence=0.85, ranks=[rank], hosts=self._hosts([rank]),
                evidence=[Evidence(self.who(rank), f"no new collective or step for {idle:.1f} s, phase "
                                                   f"'{beat.get('phase')}' for {beat.get('phase_s', 0):.0f} s")]
                + self._stack_evidence(rank)
                + [Evidence(self.who(r), f"waiting in collective #{front_at} for {self._idle(r, now):.1f} s")
                   for r in front[:3]],
                fix=[f"Look at the stack above; for native frames run `py-spy dump --native --pid {beat.get('pid')}` "
                     f"on {beat.get('host', 'its host')}.",
                     "If this rank legitimately works alone here (evaluation, checkpointing), mark it: "
                     "`with nccl_doctor.phase(\"eval\"): ...`."])
            self._emit(("rank-hang", rank, beat.get("seq"), beat.get("step")), finding, new)
            return
        long_after = self._long_work_after()
        if long_after is None or wait < long_after:
            return
        cause = rule["cause"] if rule else "straggler-rank"
        work = rule["work"] if rule else "work outside collectives (it is still progressing)"
        finding = Finding(
            cause, "warning",
            f"{self.who(rank)} has been in phase '{beat.get('phase')}' ({work}) while {waiting} waited "
            f"{wait:.0f} s in collective #{front_at}: {wait / timeout:.0%} of the {timeout:.0f} s process-group "
            f"timeout{left}", confidence=0.8, ranks=[rank], hosts=self._hosts([rank]),
            evidence=[Evidence(self.who(rank), f"at {self._where(rank)} for {beat.get('phase_s', 0):.0f} s")]
            + self._stack_evidence(rank),
            fix=[f"Raise the process-group timeout above the time this {rule['work'] if rule else 'work'} takes, "
                 "or move it off the critical path (every rank, or before the job)."])
        self._emit((cause, rank, front_at), finding, new)

    @emits("collective-timeout")
    def _all_still(self, alive: list[int], wait: float, at: int, new: list[Finding]) -> bool:
        """Every rank at the same point and none moving: stuck inside one collective (or all working alone)."""
        if wait < self.settings.hang_after:
            return False
        if any(phase_rule(self.views[r].beat.get("phase")) for r in alive):
            return True  # marked work (evaluation on every rank): not a hang
        finding = Finding(
            "collective-timeout", "warning",
            f"no rank made progress for {wait:.0f} s: all {len(alive)} ranks are at {self._where(alive[0])}; "
            "either they are all stuck inside one collective (network, a peer outside this group) or all doing long "
            "work without marking a phase", confidence=0.5, ranks=alive, hosts=self._hosts(alive),
            evidence=self._stack_evidence(alive[0]) or [Evidence(self.who(alive[0]), "no stack published")])
        self._emit(("collective-timeout", at), finding, new)
        return True

    # ------------------------------------------------------------------ stragglers

    @emits("straggler-rank")
    def _stragglers(self, now: float, new: list[Finding]) -> None:
        """Ranks that arrive last at collectives, again and again, beyond what CPU contention explains."""
        alive = self._running(now)
        if len(alive) < 2:
            return
        arrivals = {r: self.views[r].beat.get("arrivals") or [] for r in alive}
        lags, times = arrival_lags(arrivals)
        span = times[-1] - times[0] if len(times) >= 2 else 0.0
        unfair = unfair_cpu_waits(arrivals)
        step_times = {r: self.views[r].beat.get("step_time") for r in alive if self.views[r].beat.get("step_time")}
        steps = {r: self.views[r].beat.get("step") for r in alive if self.views[r].beat.get("step") is not None}
        for rank in alive:
            marked = any(phase_rule(p) for p in self.views[rank].beat.get("max_gap_phases") or [])
            why = ((None if marked else self._late(rank, lags.get(rank), span, unfair.get(rank, 0.0)))
                   or self._slow_steps(rank, step_times) or self._steps_behind(rank, steps, now))
            self.streaks[rank] = self.streaks.get(rank, 0) + 1 if why else 0
            if why and self.streaks[rank] >= self.settings.straggler_polls:
                message, evidence = why
                others = [r for r in alive if r != rank]
                self._emit(("straggler-rank", rank), Finding(
                    "straggler-rank", "warning", f"{self.who(rank)} {message}", confidence=0.8, ranks=[rank],
                    hosts=self._hosts([rank]), evidence=evidence + [Evidence(self.who(rank), f"at {self._where(rank)}")],
                    fix=[f"Find what makes rank {rank} slow on {self._hosts([rank])[0]}: its data loading (a resumed "
                         f"loader skipping batches), CPU or GPU contention, or more work than the {len(others)} "
                         "others."]), new)

    def _late(self, rank: int, lags: list[float] | None, span: float,
              waited: float = 0.0) -> tuple[str, list[Evidence]] | None:
        """Late arrivals that, added up, hold every other rank up for a large share of the time.

        Only the first collective after the slow work is late (the ones right after it find everyone
        there), so the measure is the waiting this rank causes per second, not how often it is late.
        Time it spent waiting for a CPU beyond what its own CPU use explains (`waited`, see unfair_cpu_waits) is
        not held against it: on an oversubscribed host that is the host's doing, and it moves from rank to rank.
        """
        s = self.settings
        if not lags or len(lags) < MIN_COMMON or span <= 0:
            return None
        late = [lag for lag in lags[1:] if lag >= s.straggler_min_lag]  # the span starts at the first one
        held_up = max(0.0, sum(late) - waited) / span
        if len(late) < MIN_LATE or held_up < s.straggler_share:
            return None
        typical = statistics.median(late)
        third = max(1, len(late) // 3)
        first, last = statistics.mean(late[:third]), statistics.mean(late[-third:])
        trend = f", rising from {first:.2f} s to {last:.2f} s" if last >= 2 * first + s.straggler_min_lag else ""
        evidence = [Evidence(self.who(rank), "arrival lag at the last collectives: "
                                             + " ".join(f"{lag:.2f}" for lag in lags[-10:]) + " s")]
        if waited > 0:
            evidence.append(Evidence(self.who(rank), f"waited {waited:.2f} s more for a CPU than the others would have "
                                                     "for the same work (not counted against it)"))
        return (f"reaches collectives {typical:.2f} s after the others ({len(late)} late arrivals among the last "
                f"{len(lags)} collectives{trend}): every other rank waits for it {min(held_up, 1.0):.0%} of the time",
                evidence)

    def _slow_steps(self, rank: int, step_times: dict[int, float]) -> tuple[str, list[Evidence]] | None:
        if rank not in step_times or len(step_times) < 2:
            return None
        median = statistics.median(step_times.values())
        mine = step_times[rank]
        if mine < self.settings.step_ratio * median or mine - median < self.settings.straggler_min_lag:
            return None
        return (f"takes {mine:.2f} s per step, {mine / median:.1f}x the median {median:.2f} s of all ranks",
                [Evidence(self.who(rank), f"median step time {mine:.3f} s")])

    def _steps_behind(self, rank: int, steps: dict[int, int], now: float) -> tuple[str, list[Evidence]] | None:
        """Only for jobs whose collectives are not seen (else arrival lags tell it exactly). Steps are compared as
        published, and beats go out at different moments: a beat older than the newest by d seconds may be
        d / step time steps behind for that reason alone, so that much is allowed on top of `step_lag`."""
        beat = self.views[rank].beat
        if beat.get("seq") is not None or rank not in steps or len(steps) < 2 \
                or self._idle(rank, now) >= self.settings.hang_after:
            return None
        median = statistics.median(steps.values())
        newest = max(self.views[r].beat.get("t") or 0.0 for r in steps)
        stale = newest - (beat.get("t") or newest)
        allowed = self.settings.step_lag + (stale / beat["step_time"] if beat.get("step_time") else 0.0)
        behind = median - steps[rank]
        if behind < allowed:
            return None
        return (f"is {behind:.0f} steps behind the others (step {steps[rank]}, median {median:.0f})",
                [Evidence(self.who(rank), f"step {steps[rank]}")])

    # ------------------------------------------------------------------ the timeout, from what was measured

    @emits("pg-timeout-unfit")
    def timeout_advice(self) -> tuple[list[Finding], dict[str, Any]]:
        """The longest gap between collectives any rank saw, and a timeout that would hold."""
        gaps = {r: v.beat.get("max_gap") or 0.0 for r, v in self.views.items()}
        if not gaps or max(gaps.values()) <= 0:
            return [], {}
        rank = max(gaps, key=lambda r: gaps[r])
        gap, beat, timeout = gaps[rank], self.views[rank].beat, self._timeout()
        s = self.settings
        proposed = 60.0 * math.ceil(max(s.advice_factor * gap, s.advice_floor) / 60.0)
        facts = {"largest_gap_s": round(gap, 3), "rank": rank, "phases": beat.get("max_gap_phases") or [],
                 "step": beat.get("max_gap_step"), "pg_timeout_s": timeout, "proposed_timeout_s": proposed}
        where = f"on {self.who(rank)}" + (f", phase {'/'.join(facts['phases'])}" if facts["phases"] else "") + \
            (f", step {facts['step']}" if facts["step"] is not None else "")
        evidence = [Evidence(self.who(rank), f"largest gap between two collectives: {gap:.2f} s")]
        if timeout is None:
            return [], facts
        fix = [f"`init_process_group(..., timeout=timedelta(seconds={proposed:.0f}))`"]
        if gap >= s.timeout_fraction * timeout:
            return [Finding("pg-timeout-unfit", "warning",
                            f"the longest gap between collectives was {gap:.0f} s ({where}): {gap / timeout:.0%} of the "
                            f"{timeout:.0f} s process-group timeout; a timeout of {proposed:.0f} s would hold",
                            confidence=0.8, ranks=[rank], hosts=self._hosts([rank]), evidence=evidence, fix=fix)], facts
        if timeout >= s.loose_factor * proposed:
            return [Finding("pg-timeout-unfit", "info",
                            f"the process-group timeout is {timeout:.0f} s but the longest gap between collectives was "
                            f"{gap:.1f} s ({where}): {proposed:.0f} s would hold and report a hang "
                            f"{timeout / proposed:.0f}x sooner", confidence=0.7, ranks=[rank],
                            hosts=self._hosts([rank]), evidence=evidence, fix=fix)], facts
        return [], facts

    # ------------------------------------------------------------------ output

    def report(self, command: str = "watch") -> Report:
        advice, timeout_facts = self.timeout_advice()
        ranks = [{"rank": r, "host": v.beat.get("host"), "pid": v.beat.get("pid"), "step": v.beat.get("step"),
                  "phase": v.beat.get("phase"), "collective": v.beat.get("seq"), "state": v.beat.get("state"),
                  "step_time_s": v.beat.get("step_time"), "max_gap_s": v.beat.get("max_gap")}
                 for r, v in sorted(self.views.items())]
        facts: dict[str, Any] = {"ranks": ranks, "world_size": self.world_size, "timeout": timeout_facts,
                                 "settings": {"hang_after_s": self.settings.hang_after, "beat_s": self.settings.beat}}
        if self.world_size:
            facts["never_seen"] = [r for r in range(self.world_size) if r not in self.views]
        findings = sorted(self.reported.values(), key=Finding.sort_key) + advice
        return Report(command, findings, facts)


def arrival_lags(arrivals: dict[int, list]) -> tuple[dict[int, list[float]], list[float]]:
    """For collectives every rank reached within its recent window: how late each rank got there, and
    the reference time of each of those collectives.

    arrivals[r] = [(seq, wall time when r was first seen at or past seq[, cpu time, cpu wait]), ...] in order; the
    first entry may predate the window (the rank was already there), so only later sequence numbers count. The
    reference time of a collective is the lower median of the ranks' arrivals: with one straggler, the
    others lag about 0 and the straggler by how much it holds them up.
    """
    seqs, seen = _compared(arrivals)
    lags: dict[int, list[float]] = {r: [] for r in arrivals} if seen else {}
    times = []
    for n in seen:
        at = {r: arrivals[r][bisect.bisect_left(seqs[r], n)][1] for r in arrivals}
        reference = statistics.median_low(at.values())
        times.append(reference)
        for r, t in at.items():
            lags[r].append(t - reference)
    return lags, times


def unfair_cpu_waits(arrivals: dict[int, list]) -> dict[int, float]:
    """Over the collectives arrival_lags compares: how much longer each rank's training thread waited for a CPU
    than the others would have for its CPU time (their median wait per CPU second). A rank with more work
    waits more on a busy host too, but in proportion; a rank the scheduler served worse waits more than that.
    Ranks that publish no CPU times (not Linux) are left out."""
    seqs, seen = _compared(arrivals)
    if len(seen) < 2:
        return {}
    used = {}  # rank -> (seconds on a CPU, seconds waiting for one)
    for r, entries in arrivals.items():
        first, last = (entries[bisect.bisect_left(seqs[r], n)] for n in (seen[0], seen[-1]))
        if len(first) >= 4 and len(last) >= 4:
            used[r] = (last[2] - first[2], last[3] - first[3])
    unfair = {}
    for r, (ran, waited) in used.items():
        rates = [w / c for o, (c, w) in used.items() if o != r and c > 0]
        if rates:
            unfair[r] = max(0.0, waited - statistics.median(rates) * ran)
    return unfair


def _compared(arrivals: dict[int, list]) -> tuple[dict[int, list[int]], list[int]]:
    """Each rank's sequence numbers, and the last MAX_COMPARED collectives every rank reached in its window."""
    if len(arrivals) < 2 or any(len(a) < 2 for a in arrivals.values()):
        return {}, []
    lo = max(a[0][0] for a in arrivals.values()) + 1
    hi = min(a[-1][0] for a in arrivals.values())
    seqs = {r: [e[0] for e in a] for r, a in arrivals.items()}
    return seqs, sorted({s for ranks in seqs.values() for s in ranks if lo <= s <= hi})[-MAX_COMPARED:]


def _innermost_python(stack: list[str]) -> str:
    """The innermost frame in Python code (py-spy's native frames below it say less to most readers)."""
    python = [line for line in stack if ".py:" in line]
    return (python or stack or ["(no stack published)"])[-1]
