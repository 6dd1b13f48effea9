"""The watchdog: heartbeats and a kill switch on every rank; on the judge, who is missing and why.

A rank that hangs inside a collective cannot be interrupted from Python, so each rank runs a thread
on its own store connection that beats `hb/RANK` twice a second and watches for the judge's `done`
key: once the judge has concluded, the thread gives the main thread a moment, then ends the process
with os._exit. The judge tells a gone rank from a stuck one by whether its heartbeat still moves, and
a dead rank from a frozen one (alive, but not even its heartbeat thread runs) by the process itself:
its exit status under `--local`, its state when it runs on the judge's host, else its state as a rank
on its own host reads it: the judge asks (`ask`), and every rank's watch thread looks every few beats
whether it is asked about a process of its host.
"""

from __future__ import annotations

import signal
import socket
import sys
import threading
import time
from typing import Any, Callable

from ..ending import leave
from ..model import Evidence, Finding, fold, ranges
from .store import Exchange
from ..roads import emits

BEAT = 0.5  # seconds between heartbeats
STALE = 2.5  # a heartbeat that has not moved for this long belongs to a dead or frozen process
LOST_AFTER = 8  # consecutive failed beats (4 s) before a rank concludes the store and judge are gone
GRACE = 1.0  # how long a rank's main thread gets to leave by itself once the judge is done
ASK_EVERY = 4  # beats between a rank's looks at whether the judge asks about a process of its host
ASK_WAIT = 3.0  # how long the judge waits for a rank on the same host to answer


class RankWatch(threading.Thread):
    """Heartbeat and kill switch of one rank (daemon thread, own store connection)."""

    def __init__(self, exchange: Exchange, rank: int, exit_code: Callable[[], int], main_done: threading.Event) -> None:
        super().__init__(name=f"nccl-doctor-watch-{rank}", daemon=True)
        self.exchange, self.rank, self.exit_code, self.main_done = exchange, rank, exit_code, main_done
        self.host = socket.gethostname()

    def run(self) -> None:
        failures, beats = 0, 0
        while True:
            try:
                self.exchange.counter(f"hb/{self.rank}", 1)
                if self.exchange.has("done"):
                    self._end()
                beats += 1
                if beats % ASK_EVERY == 0 and self.exchange.has("ask"):
                    self._answer(self.exchange.get("ask", 1.0))
                failures = 0
            except Exception:
                failures += 1
                if failures >= LOST_AFTER and not self.main_done.is_set():
                    print(f"nccl-doctor: rank {self.rank} lost the store; the judge (rank 0) is gone", file=sys.stderr)
                    leave(1)
            time.sleep(BEAT)

    def _end(self) -> None:
        self.main_done.wait(GRACE)
        leave(self.exit_code())

    def _answer(self, asked: dict) -> None:
        """The state of the processes of this host that the judge asks about (a peer's, never our own)."""
        for rank, who in asked.items():
            if who["host"] == self.host and int(rank) != self.rank and not self.exchange.has(f"state/{rank}"):
                self.exchange.put(f"state/{rank}", pid_state(who["pid"]))


class Liveness:
    """The judge's view of which ranks still run: heartbeat movement, plus child exits under --local."""

    def __init__(self, exchange: Exchange, exits: Callable[[], dict[int, int]] | None = None) -> None:
        self.exchange, self.exits = exchange, exits or (lambda: {})
        self._seen: dict[int, tuple[int, float]] = {}  # rank -> (last beat count, when it last moved)
        self._watched_since: dict[int, float] = {}

    def sample(self, ranks: list[int]) -> None:
        now = time.monotonic()
        for r in ranks:
            self._watched_since.setdefault(r, now)
            beats = self.exchange.counter(f"hb/{r}")
            last = self._seen.get(r)
            if last is None or beats != last[0]:
                self._seen[r] = (beats, now)

    def dead(self, ranks: list[int]) -> dict[int, str]:
        """Ranks known to be gone, with how we know."""
        now, exits, found = time.monotonic(), self.exits(), {}
        for r in ranks:
            if r in exits:
                found[r] = exit_words(exits[r])
            elif r in self._seen and self._seen[r][0] > 0 and now - self._seen[r][1] >= STALE:
                found[r] = f"no heartbeat for {now - self._seen[r][1]:.0f} s"
        return found

    def settle(self, ranks: list[int]) -> dict[int, str]:
        """Sample long enough to tell stopped heartbeats from running ones, then say who is dead."""
        if not ranks:
            return {}
        self.sample(ranks)
        undecided = [r for r in ranks if r not in self.dead(ranks)]
        watched = min((time.monotonic() - self._watched_since[r] for r in undecided), default=STALE)
        if watched < STALE + 0.1:  # not watched long enough to call a still heartbeat stopped
            time.sleep(STALE + 0.1 - watched)
            self.sample(ranks)
        return self.dead(ranks)

    def all_dead(self, ranks: list[int]) -> bool:
        self.sample(ranks)
        return bool(ranks) and len(self.dead(ranks)) == len(ranks)


def exit_words(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


# ------------------------------------------------------------------ the judge's account of a step

@emits("rank-died", "rank-frozen", "rank-hang")
def missing_findings(ctx: Any, what: str, missing: list[int], enter_step: str | None = None) -> list[Finding]:
    """Why ranks did not finish `what`: dead, frozen, never entered, or stuck inside it. Culprits first;
    ranks that entered and wait are their echo, attached as secondary."""
    if not missing:
        return []
    gone = ctx.liveness.settle(missing)
    states = process_states(ctx, list(gone))
    frozen = [r for r in missing if r in gone and states[r] not in (None, "gone")]
    died = [r for r in missing if r in gone and r not in frozen]
    entered = {r for r in missing if enter_step and ctx.exchange.has(f"enter/{enter_step}/{r}")}
    stalled = [r for r in missing if r not in gone and enter_step and r not in entered]
    stuck = [r for r in missing if r not in gone and r not in stalled]
    culprits = []
    if died:
        unsure = any(states[r] is None for r in died)
        culprits.append(Finding(
            "rank-died", "error", f"{_name(ctx, died)} {'died or froze' if unsure else 'died'} during {what} ("
                                  + "; ".join(gone[r] if len(died) == 1 else f"rank {r} {gone[r]}" for r in died) + ")",
            confidence=0.7 if unsure else 0.95, ranks=died, hosts=ctx.hosts_of(died), evidence=_last_words(ctx, died)))
    if frozen:
        pid = ctx.identities.get(frozen[0], {}).get("pid", "PID")
        culprits.append(Finding(
            "rank-frozen", "error",
            f"{_name(ctx, frozen)} froze during {what}: the process is alive ({states[frozen[0]]}) but its heartbeat "
            f"stopped ({gone[frozen[0]]})", confidence=0.9, ranks=frozen, hosts=ctx.hosts_of(frozen),
            evidence=[Evidence(ctx.who(r), f"process state: {states[r]}; {gone[r]}") for r in frozen[:8]],
            fix=[f"On {ctx.host(frozen[0])}: `py-spy dump --native --pid {pid}` shows where it stands; "
                 f"`ps -o pid,stat,wchan:32 -p {pid}` its state (T: stopped, `kill -CONT {pid}` resumes it)."]))
    if stalled:
        culprits.append(Finding(
            "rank-hang", "error", f"{_name(ctx, stalled)} never entered {what} within {ctx.options.timeout:g} s "
                                  f"although {'it is' if len(stalled) == 1 else 'they are'} alive: stalled before it",
            confidence=0.9, ranks=stalled, hosts=ctx.hosts_of(stalled),
            evidence=[Evidence(ctx.who(r), f"no 'enter' record for {what}; heartbeat still running") for r in stalled],
            fix=[f"Look at what {ctx.who(stalled[0])} is doing: `py-spy dump --pid "
                 f"{ctx.identities.get(stalled[0], {}).get('pid', 'PID')}` on {ctx.host(stalled[0])}."]))
    if stuck:
        verb = "entered" if enter_step else "started"
        blamed = died + frozen + stalled
        echo = Finding(
            "rank-hang", "error",
            f"{_name(ctx, stuck)} {verb} {what} and did not finish within {ctx.options.timeout:g} s"
            + (f", waiting for rank{'s' if len(blamed) > 1 else ''} {ranges(blamed)}" if culprits else ""),
            confidence=0.6 if culprits else 0.8, ranks=stuck, hosts=ctx.hosts_of(stuck),
            evidence=[Evidence(ctx.who(r), f"{verb} {what}, no result") for r in stuck[:8]])
        if not culprits:
            return [echo]
        culprits[0].secondary.append(echo)
    return culprits


def process_states(ctx: Any, ranks: list[int]) -> dict[int, str | None]:
    """What the ranks' processes are doing: "gone" (ended), a state such as "stopped" (it exists), or None
    (cannot be told). Seen by the judge itself under --local or on its own host, else asked of the ranks
    that share the rank's host (bounded: ASK_WAIT)."""
    here = socket.gethostname()
    states: dict[int, str | None] = {}
    for rank in ranks:
        ident = ctx.identities.get(rank) or {}
        if ctx.local is not None and rank in ctx.local.exits():
            states[rank] = "gone"
        elif ident.get("host") == here and ident.get("pid"):
            states[rank] = pid_state(ident["pid"])
    elsewhere = {str(r): {"host": ctx.identities[r]["host"], "pid": ctx.identities[r]["pid"]}
                 for r in ranks if r not in states and (ctx.identities.get(r) or {}).get("pid")
                 and any(i.get("host") == ctx.identities[r]["host"] for p, i in ctx.identities.items() if p != r)}
    if elsewhere:
        ctx.exchange.put("ask", elsewhere)
        deadline = time.monotonic() + ASK_WAIT
        while time.monotonic() < deadline and not all(ctx.exchange.has(f"state/{r}") for r in elsewhere):
            time.sleep(0.1)
        states.update({int(r): ctx.exchange.get(f"state/{r}", 0.1) for r in elsewhere if ctx.exchange.has(f"state/{r}")})
    return {r: states.get(r) for r in ranks}


def pid_state(pid: int) -> str | None:
    """A process of this host: "gone", or what it is doing (None when it cannot be seen)."""
    import psutil

    try:
        state = psutil.Process(pid).status()
    except psutil.NoSuchProcess:
        return "gone"
    except psutil.Error:
        return None
    words = {psutil.STATUS_STOPPED: "stopped: SIGSTOP, Ctrl-Z or a debugger", psutil.STATUS_TRACING_STOP:
             "stopped by a debugger", psutil.STATUS_DISK_SLEEP: "blocked in the kernel (state D)"}
    return "gone" if state in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD) else words.get(state, f"state {state}")


def _name(ctx: Any, ranks: list[int]) -> str:
    return ", ".join(ctx.who(r) for r in ranks[:4]) + (f" and {len(ranks) - 4} more" if len(ranks) > 4 else "")


def _last_words(ctx: Any, ranks: list[int]) -> list[Evidence]:
    """What a dead rank left: the error it raised, if it could still say so; under --local, its stderr."""
    said = [Evidence(ctx.who(r), ctx.exchange.get(f"crash/{r}", 1.0)) for r in ranks if ctx.exchange.has(f"crash/{r}")]
    if ctx.local is None:
        return said or [Evidence(ctx.who(r), "heartbeat stopped") for r in ranks]
    return said + [Evidence(f"rank {r} stderr", line) for r in ranks for line in ctx.local.stderr_tail(r, 4)] or \
        [Evidence(ctx.who(r), "process ended without output") for r in ranks]


def error_findings(ctx: Any, what: str, errors: dict[int, str], fallback: str) -> list[Finding]:
    """Exceptions raised on ranks, classified with the `logs` signature catalog (one knowledge base)."""
    from ..logs import diagnose_text

    per_rank: dict[int, list[Finding]] = {}
    for rank, text in sorted(errors.items()):
        found = diagnose_text(text, source=f"rank {rank} {what}")
        for f in found:
            f.ranks, f.hosts = sorted({*f.ranks, rank}), sorted({*f.hosts, ctx.host(rank)})
        per_rank[rank] = found[:1] or [Finding(
            fallback, "error", f"{what} failed on {ctx.who(rank)}: {text.splitlines()[0][:300]}",
            confidence=0.6, ranks=[rank], hosts=[ctx.host(rank)],
            evidence=[Evidence(f"rank {rank}", line[:300]) for line in text.splitlines()[:4]])]
    return fold([f for rank in sorted(per_rank) for f in per_rank[rank]], order=None)
