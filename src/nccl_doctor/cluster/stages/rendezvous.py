"""Stage 1: every rank reaches the store, the world is complete, no RANK is claimed twice."""

from __future__ import annotations

import os
import socket
import statistics
import time

from ...model import Evidence, Finding, ranges
from ..judge import JudgeContext, Outcome, Stage
from ...roads import emits


def on_rank(ctx) -> None:
    claim = ctx.exchange.counter(f"claim/{ctx.rank}", 1)
    me = {"host": ctx.host, "pid": os.getpid(), "local_rank": ctx.world.local_rank,
          "world_size": ctx.world.world_size, "launcher": ctx.world.launcher,
          "master": f"{ctx.world.master_addr}:{ctx.world.master_port}", "joined": time.time()}
    if claim > 1:  # another process already holds this rank: say so, then leave the run to it
        ctx.exchange.put(f"rendezvous/dup/{ctx.exchange.counter('rendezvous/dups', 1)}", {**me, "rank": ctx.rank})
        raise SystemExit(0)
    ctx.publish("rendezvous", me)


STARTUP = 15.0  # starting Python and importing torch is not the check's work: ranks get this much extra


def on_judge(ctx: JudgeContext) -> Outcome:
    got = ctx.gather("rendezvous", deadline=time.monotonic() + ctx.options.timeout + STARTUP)
    ctx.identities = got.results
    findings = _duplicates(ctx) + _world_size_disagreements(ctx) + _missing(ctx, got.missing)
    hosts: dict[str, list[int]] = {}
    for rank, ident in sorted(got.results.items()):
        hosts.setdefault(ident["host"], []).append(rank)
    ctx.plan.update(hosts=hosts, leaders={h: ranks[0] for h, ranks in hosts.items()})
    ctx.facts["world"] = {"size": ctx.world_size, "launcher": ctx.launcher, "hosts": hosts}
    ctx.facts["ranks"] = [{"rank": r, **{k: i[k] for k in ("host", "pid", "local_rank")}}
                          for r, i in sorted(got.results.items())]
    joined = len(got.results)
    detail = f"{joined}/{ctx.world_size} ranks on {len(hosts)} host{'s' if len(hosts) != 1 else ''}"
    return Outcome.judged(findings, detail, hosts=hosts, leaders=ctx.plan["leaders"], token=ctx.run_token)


@emits("rank-config-invalid")
def _duplicates(ctx: JudgeContext) -> list[Finding]:
    """Two processes that joined with the same rank."""
    count = ctx.exchange.counter("rendezvous/dups")
    dups = [ctx.exchange.get(f"rendezvous/dup/{i}", 1.0) for i in range(1, count + 1)]
    findings = []
    for dup in dups:
        first = ctx.identities.get(dup["rank"], {})
        findings.append(Finding(
            "rank-config-invalid", "error",
            f"RANK={dup['rank']} is claimed twice: by {first.get('host', '?')} pid {first.get('pid', '?')} and by "
            f"{dup['host']} pid {dup['pid']}", confidence=0.95, ranks=[dup["rank"]],
            hosts=sorted({first.get("host", "?"), dup["host"]}),
            evidence=[Evidence(f"{dup['host']} pid {dup['pid']}", f"RANK={dup['rank']} (launcher {dup['launcher']})")]))
    return findings


@emits("rank-config-invalid")
def _world_size_disagreements(ctx: JudgeContext) -> list[Finding]:
    """Ranks that were started with another WORLD_SIZE than the judge's."""
    odd = {r: i["world_size"] for r, i in ctx.identities.items() if i["world_size"] != ctx.world_size}
    if not odd:
        return []
    return [Finding("rank-config-invalid", "error",
                    f"ranks {ranges(odd)} run with another WORLD_SIZE ({', '.join(map(str, sorted(set(odd.values()))))})"
                    f" than rank 0 ({ctx.world_size})", confidence=0.9, ranks=sorted(odd), hosts=ctx.hosts_of(list(odd)),
                    evidence=[Evidence(ctx.who(r), f"WORLD_SIZE={size}") for r, size in sorted(odd.items())])]


@emits("local-start-slow", "rank-hang", "store-timeout")
def _missing(ctx: JudgeContext, missing: list[int]) -> list[Finding]:
    """Missing ranks: under --local each child can say why (its join failure, its exit, or that it is still
    starting); else only who."""
    findings, unexplained = [], []
    reports = ctx.local.reports() if ctx.local else {}
    exits = ctx.local.exits() if ctx.local else {}
    for rank in missing:
        if "join_failure" in reports.get(rank, {}):
            findings.append(Finding.from_wire(reports[rank]["join_failure"]))
        else:
            unexplained.append(rank)
    starting = [r for r in unexplained if ctx.local and r not in exits]
    if starting:
        findings.append(_still_starting(ctx, starting))
    unexplained = [r for r in unexplained if r not in starting]
    if unexplained:
        ended = {r: exits[r] for r in unexplained if r in exits}
        evidence = [Evidence(f"rank {r}", f"process ended before joining ({_exit_words(code)})") for r, code in ended.items()]
        evidence += [Evidence(f"rank {r} stderr", line) for r in ended for line in ctx.local.stderr_tail(r, 3)]
        findings.append(Finding(
            "store-timeout", "error",
            f"rank{'s' if len(unexplained) > 1 else ''} {ranges(unexplained)} of {ctx.world_size} never joined "
            f"the store within {ctx.options.timeout + STARTUP:g} s" + (f" ({len(ended)} ended before joining)" if ended else ""),
            confidence=0.9, ranks=unexplained, evidence=evidence or [Evidence("store", f"{len(ctx.identities)} of "
                                                                              f"{ctx.world_size} ranks joined")]))
    return findings


@emits("local-start-slow", "rank-hang")
def _still_starting(ctx: JudgeContext, starting: list[int]) -> Finding:
    """--local ranks alive but not joined at the deadline: this host starts too many too slowly (the joins
    came in until the deadline), or these few are stuck (the others joined early)."""
    waited = ctx.options.timeout + STARTUP
    took = sorted(i["joined"] - ctx.local.started_at for i in ctx.identities.values() if "joined" in i)
    pids = ctx.local.pids()
    if took and took[-1] < waited / 2:
        return Finding(
            "rank-hang", "error", f"rank{'s' if len(starting) > 1 else ''} {ranges(starting)} started but never reached "
            f"the store within {waited:g} s although alive, while the {len(took)} others took at most {took[-1]:.1f} s: "
            f"stuck before joining", confidence=0.85, ranks=starting, hosts=[socket.gethostname()],
            evidence=[Evidence(f"rank {r} (pid {pids.get(r)})", "alive, never joined") for r in starting[:8]],
            fix=[f"Look at where it stands: `py-spy dump --pid {pids.get(starting[0])}`."])
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    rate = len(took) / took[-1] if took else 0.0  # ranks joined per second
    fits = max(1, int(rate * waited * 0.8))  # ranks this host starts within the deadline, with a margin
    fix = (f"Start at most about {fits} ranks here (`--local {fits}`), or give them longer: "
           f"`--timeout {max(ctx.options.timeout * 2, ctx.world_size / rate * 1.25 - STARTUP):.0f}`." if rate else
           "Start fewer ranks here (`--local`), or give them longer (`--timeout`).")
    measured = (f"the {len(took)} that joined took {took[0]:.1f} to {took[-1]:.1f} s (median "
                f"{statistics.median(took):.1f} s)" if took else "none joined")
    return Finding("local-start-slow", "error",
                   f"{len(starting)} of the {ctx.world_size} ranks that --local started on this host ({cpus} CPUs) "
                   f"were still starting after {waited:g} s; {measured}", confidence=0.9, ranks=starting,
                   hosts=[socket.gethostname()], fix=[fix],
                   evidence=[Evidence("--local", f"{ctx.world_size} ranks started at once on {cpus} CPUs"),
                             Evidence("rendezvous", f"{len(took)} of {ctx.world_size} joined within {waited:g} s"
                                                    + (f": ranks {ranges(ctx.identities)}" if took else ""))])


def _exit_words(code: int) -> str:
    from ..watchdog import exit_words

    return exit_words(code)


STAGE = Stage("rendezvous", "Rendezvous", on_rank, on_judge, patience=STARTUP)
