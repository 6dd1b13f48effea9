"""The link test: bandwidth each way and latency between nodes (each host's first rank, or every rank),
judged by rules/links.py. `check`'s bandwidth sample (a ring of hosts, briefly) and `bench --matrix`
(every pair, longer) are two plans of this one stage.

Pairs meet in rounds of disjoint pairs measured at the same time; a barrier closes every round, and each
round is one store step that the judge holds to the deadline. First, each node says what line rate its
network hardware reports (interface speed, IB port rate), from the fingerprint's facts. Links that look
slow or asymmetric are then measured again, one at a time, and the better of the two measurements is
judged: nothing is blamed on a pair that was only disturbed by its round's neighbours (sharing a switch
uplink, or CPUs) or by a moment's load.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable, Mapping

from ..rules.links import Limits, Link, Node, best_of, judge_links, rate_text, suspects
from .judge import MARGIN, JudgeContext, Outcome, Stage
from .watchdog import missing_findings

PairIndex = tuple[int, int]
MAX_AGAIN = 3  # rounds of measuring suspicious links again
PINGS, PING_WARMUP = 20, 3  # small-message round trips per pair (latency), and untimed ones before
SMALL_ELEMENTS = 2  # 8 bytes of float32: the latency message


# ------------------------------------------------------------------ who meets whom

def round_robin(n: int) -> list[list[PairIndex]]:
    """Rounds of disjoint pairs (i, j), i < j, covering every pair of range(n) exactly once (circle method:
    N nodes finish in N-1 rounds, N with a bye when N is odd)."""
    if n < 2:
        return []
    players: list[int | None] = list(range(n)) + ([None] if n % 2 else [])  # None: the bye
    size = len(players)
    rounds = []
    for _ in range(size - 1):
        pairs = [(players[k], players[size - 1 - k]) for k in range(size // 2)]
        rounds.append(sorted((min(a, b), max(a, b)) for a, b in pairs if a is not None and b is not None))
        players = [players[0], players[-1], *players[1:-1]]  # keep the first in place, turn the rest
    return rounds


def ring(n: int) -> list[list[PairIndex]]:
    """Each node with the next, the last with the first, in 2 rounds of disjoint pairs (3 when n is odd):
    every node is measured on two links, enough to tell a slow node from a slow link, in constant time."""
    if n < 2:
        return []
    edges = [(i, i + 1) for i in range(n - 1)] + ([(0, n - 1)] if n > 2 else [])
    rounds = [[e for e in edges[:n - 1] if e[0] % 2 == parity] for parity in (0, 1)]
    if n > 2 and n % 2 == 0:
        rounds[1].append((0, n - 1))
    elif n > 2:
        rounds.append([(0, n - 1)])
    return [r for r in rounds if r]


# ------------------------------------------------------------------ what a stage measures

@dataclass(frozen=True)
class Plan:
    scope: str  # "hosts": each host's first rank; "ranks": every rank
    schedule: Callable[[int], list[list[PairIndex]]]
    message_bytes: int
    seconds: float  # of streaming per direction of each pair
    streams: int = 5  # timed streams per direction; the best one counts (noise only ever slows one down)
    most: int | None = None  # take part: at most this many nodes (the first)

    def nodes(self, hosts: Mapping[str, list[int]]) -> list[int]:
        return nodes_of(self.scope, hosts)[:self.most]


def nodes_of(scope: str, hosts: Mapping[str, list[int]]) -> list[int]:
    """The ranks that take part, in host order: each host's first rank, or every rank."""
    if scope == "ranks":
        return sorted(r for ranks in hosts.values() for r in ranks)
    return [ranks[0] for _, ranks in sorted(hosts.items())]


def label(host: str, scope: str, local_rank: int) -> str:
    return f"{host}:{local_rank}" if scope == "ranks" else host


def line_rate(env: Mapping[str, str], facts: Mapping[str, Any], backend: str) -> dict:
    """The rate this host's network hardware reports for the path the backend takes (a fact, not a judgement)."""
    from ..probe.infiniband import ib_select_ports
    from ..probe.network import would_use

    if backend == "nccl" and env.get("NCCL_IB_DISABLE", "0") != "1":
        ports = ib_select_ports(env.get("NCCL_IB_HCA"), (facts.get("infiniband") or {}).get("devices") or [])
        rated = [p for p in ports if p.get("rate_gbps")]
        if rated:
            best = max(rated, key=lambda p: p["rate_gbps"])
            return {"gbps": best["rate_gbps"], "iface": None,
                    "via": f"{best['device']}:{best['port']} ({best['rate']})"}
    chosen = would_use(env, facts.get("network") or {})[backend if backend == "nccl" else "gloo"]["interfaces"]
    if not chosen or chosen[0]["name"] == "hostname":
        return {"gbps": None, "via": "interface not identified", "iface": None}
    iface = chosen[0]
    speed = iface.get("speed_mbps")
    return {"gbps": speed / 1000 if speed else None, "iface": iface["name"],
            "via": f"{iface['name']} ({speed} Mb/s)" if speed else f"{iface['name']} (no speed reported)"}


# ------------------------------------------------------------------ one pair, on its two ranks

class Pair:
    """Both ends run the same calls in the same order; `first` says which end speaks first."""

    def __init__(self, peer: int, first: bool, plan: Plan, device: Any, wait: timedelta) -> None:
        import torch

        self.peer, self.first, self.plan, self.device, self.wait = peer, first, plan, device, wait
        self.big = torch.ones(max(1, plan.message_bytes // 4), dtype=torch.float32, device=device)
        self.small = torch.ones(SMALL_ELEMENTS, dtype=torch.float32, device=device)
        self.number = torch.zeros(1, dtype=torch.int64, device=device)

    def measure(self) -> dict:
        """Latency, then first -> second, then second -> first; each end reports what it sent. One big message
        each way first, untimed: neither direction is timed while its connection still warms up."""
        for send in ((True, False) if self.first else (False, True)):
            self._move([self.big], send)
        latency = self.ping_pong()
        if self.first:
            sent = self.stream_out()
            self.stream_in()
        else:
            self.stream_in()
            sent = self.stream_out()
        return {"peer": self.peer, "latency_us": latency * 1e6, "send_Bps": sent, "bytes": self.big.numel() * 4}

    def _move(self, tensors: list, send: bool) -> None:
        import torch.distributed as dist

        from .bench.harness import synchronize

        works = [(dist.isend if send else dist.irecv)(t, self.peer) for t in tensors]
        for work in works:
            work.wait(self.wait)
        synchronize(self.device)

    def ping_pong(self) -> float:
        """Half the median round trip of a small message (both ends time their own turns)."""
        trips = []
        last = time.perf_counter()
        for _ in range(PING_WARMUP + PINGS):
            for send in ((True, False) if self.first else (False, True)):
                self._move([self.small], send)
            now = time.perf_counter()
            trips.append(now - last)
            last = now
        return statistics.median(trips[PING_WARMUP:]) / 2

    def stream_out(self) -> float:
        """Bytes per second this end sends to the peer: the best of the plan's timed streams of k messages.

        k fills the time budget (at least one message per stream), so a fast link is measured over a
        window long enough to average out scheduling noise and a crawling one stays bounded. The time
        runs until the peer's small acknowledgement arrives, so it includes one latency."""
        started = time.perf_counter()
        self._move([self.big], True)  # one message first: warms the path and tells how long one takes
        self._move([self.small], False)
        one = time.perf_counter() - started
        k = max(1, int(self.plan.seconds / (self.plan.streams * max(one, 1e-9))))
        self.number.fill_(k)
        self._move([self.number], True)
        best = 0.0
        for _ in range(self.plan.streams):
            started = time.perf_counter()
            self._move([self.big] * k, True)
            self._move([self.small], False)  # the peer has everything
            best = max(best, k * self.big.numel() * 4 / (time.perf_counter() - started))
        return best

    def stream_in(self) -> None:
        self._move([self.big], False)
        self._move([self.small], True)
        self._move([self.number], False)
        k = int(self.number.item())
        for _ in range(self.plan.streams):
            self._move([self.big] * k, False)
            self._move([self.small], True)


# ------------------------------------------------------------------ the stage, both sides

def stage(name: str, title: str, what: str, plan_of: Callable[[Any, str, int], Plan | None],
          skip: Callable[[JudgeContext], str | None] = lambda ctx: None) -> Stage:
    """A link-test stage called `what` in findings; `plan_of(options, backend, hosts)` says what it measures
    (None: nothing)."""

    def plan(ctx: Any) -> Plan:
        return plan_of(ctx.options, ctx.plan["backend"], len(ctx.plan["hosts"]))

    def on_rank(ctx: Any) -> None:
        _measure_on_rank(ctx, name, plan(ctx))

    def on_judge(ctx: JudgeContext) -> Outcome:
        return _judge(ctx, name, what, plan(ctx))

    def skipped(ctx: JudgeContext) -> str | None:
        reason = skip(ctx)
        if reason:
            return reason
        chosen = plan_of(ctx.options, ctx.plan.get("backend", "gloo"), len(ctx.plan.get("hosts", {})))
        if chosen is None or len(chosen.nodes(ctx.plan.get("hosts", {}))) < 2:
            return ("one host: no link between hosts to measure" if chosen is None or chosen.scope == "hosts"
                    else "one rank: nothing to measure")
        return None

    return Stage(name, title, on_rank, on_judge, skip=skipped)


def _measure_on_rank(ctx: Any, name: str, plan: Plan) -> None:
    from .bench.harness import barrier, device_of

    nodes = plan.nodes(ctx.plan["hosts"])
    ctx.mark(f"{name}.line")
    ctx.publish(f"{name}.line", line_rate(ctx.env, ctx.state.get("facts", {}), ctx.plan["backend"])
                if ctx.rank in nodes else {})
    device = device_of(ctx)
    wait = timedelta(seconds=ctx.options.timeout + MARGIN)

    def run_rounds(rounds: list[list[PairIndex]], prefix: str) -> bool:
        for index, pairs in enumerate(rounds):
            step = f"{prefix}.{index}"
            ctx.mark(step)
            result: dict = {}
            try:
                for a, b in pairs:
                    if ctx.rank in (nodes[a], nodes[b]):
                        first = ctx.rank == nodes[a]
                        result = Pair(nodes[b] if first else nodes[a], first, plan, device, wait).measure()
                barrier(device, wait)  # rounds do not overlap
            except Exception as exc:
                ctx.publish(step, {"error": f"{type(exc).__name__}: {exc}"})
                return False
            ctx.publish(step, result)
        return True

    going, attempt = run_rounds(plan.schedule(len(nodes)), name), 0
    while going:  # the judge names pairs to measure again, alone, until it names none
        again = ctx.verdict(f"{name}.again.{attempt}").get("retest", [])
        going = bool(again) and run_rounds([[tuple(pair)] for pair in again], f"{name}.retest.{attempt}")
        attempt += 1


def _judge(ctx: JudgeContext, name: str, what: str, plan: Plan) -> Outcome:
    backend, ranks = ctx.plan["backend"], plan.nodes(ctx.plan["hosts"])
    lines = ctx.gather(f"{name}.line")
    nodes = {r: _node(ctx, r, plan.scope, lines.results.get(r, {})) for r in ranks}
    rounds = plan.schedule(len(ranks))
    limits, judged = Limits.load(backend), _judged(backend, nodes)
    test = _Test(ctx, name, ranks, nodes)
    findings = missing_findings(ctx, what, lines.missing, enter_step=f"{name}.line")
    links: list[Link] = []
    if not findings:
        links, findings = test.measured(rounds, name)
    links, retested, findings = test.again(links, limits, judged, findings)
    if not findings:
        findings = judge_links({n.label: n for n in nodes.values()}, judged(links), limits)
    ctx.facts[name] = {
        "scope": plan.scope, "message_bytes": plan.message_bytes, "rounds": len(rounds),
        "retested": [f"{l.a} <-> {l.b}" for l in retested],
        "nodes": [{"label": n.label, "rank": n.rank, "host": n.host, "line_gbps": n.line_gbps, "via": n.via}
                  for n in nodes.values()],
        "links": [{"a": l.a, "b": l.b, "ab_Bps": l.ab, "ba_Bps": l.ba, "latency_us": round(l.latency_us, 2)}
                  for l in links]}
    return Outcome.judged(findings, _detail(links, len(rounds), retested, len(links) - len(judged(links))))


def _detail(links: list[Link], rounds: int, retested: list[Link], unjudged: int) -> str:
    text = f"{len(links)} link{'s' if len(links) != 1 else ''} in {rounds} round{'s' if rounds != 1 else ''}"
    directions = sorted((rate, f"{a} -> {b}") for l in links for rate, a, b in ((l.ab, l.a, l.b), (l.ba, l.b, l.a)))
    if len(links) == 1:
        text += ": " + ", ".join(f"{name} {rate_text(rate)}" for rate, name in directions)
    elif links:
        text += f": slowest {directions[0][1]} {rate_text(directions[0][0])}, fastest {rate_text(directions[-1][0])}"
    text += f", {len(retested)} measured again alone" if retested else ""
    return text + (f"; {unjudged} inside a host not judged (Gloo: loopback)" if unjudged else "")


def _judged(backend: str, nodes: dict[int, Node]) -> Callable[[list[Link]], list[Link]]:
    """The links to judge: under Gloo two ranks of one host talk over loopback TCP, which measures their CPUs."""
    host_of = {n.label: n.host for n in nodes.values()}
    if backend == "nccl":
        return lambda links: links
    return lambda links: [l for l in links if host_of[l.a] != host_of[l.b]]


@dataclass
class _Test:
    """The judge's side of one link test: gathering rounds, deciding what to measure again."""

    ctx: JudgeContext
    name: str
    ranks: list[int]
    nodes: dict[int, Node]

    def again(self, links: list[Link], limits: Limits, judged: Callable[[list[Link]], list[Link]],
              findings: list) -> tuple[list[Link], list[Link], list]:
        """Measure suspicious links again, one pair at a time, keeping the better figures; a better figure
        moves the references, so look again (at most MAX_AGAIN times). Every decision tells the ranks."""
        index_of = {self.nodes[r].label: i for i, r in enumerate(self.ranks)}
        by_label = {n.label: n for n in self.nodes.values()}
        retested: list[Link] = []
        for attempt in range(MAX_AGAIN + 1):
            done = {(l.a, l.b) for l in retested}
            fresh = [] if findings or attempt == MAX_AGAIN else \
                [l for l in suspects(judged(links), limits, by_label) if (l.a, l.b) not in done]
            pairs = [[index_of[l.a], index_of[l.b]] for l in fresh]
            self.ctx.exchange.decide(f"{self.name}.again.{attempt}", {"retest": pairs})
            if not pairs:
                break
            again, findings = self.measured([[tuple(p)] for p in pairs], f"{self.name}.retest.{attempt}")
            better = {(l.a, l.b): l for l in again}
            links = [best_of(l, better[(l.a, l.b)]) if (l.a, l.b) in better else l for l in links]
            retested += fresh
        return links, retested, findings

    def measured(self, rounds: list, prefix: str) -> tuple[list[Link], list]:
        """Gather the rounds' results into links; on a failure, the findings that name who and where."""
        from .stages.collectives import judge_op

        links: list[Link] = []
        nodes, ranks = self.nodes, self.ranks
        for index, pairs in enumerate(rounds):
            step = f"{prefix}.{index}"
            got = self.ctx.gather(step)
            what = "the link test of " + ", ".join(f"{nodes[ranks[a]].label} <-> {nodes[ranks[b]].label}"
                                                    for a, b in pairs)
            if got.missing or any("error" in p for p in got.results.values()):
                return links, judge_op(self.ctx, what, step, got.results, got.missing)
            for a, b in pairs:
                first, second = got.results[ranks[a]], got.results[ranks[b]]
                links.append(Link(nodes[ranks[a]].label, nodes[ranks[b]].label, first["send_Bps"],
                                  second["send_Bps"], first["latency_us"]))
            self.ctx.events.progress(prefix, index + 1, len(rounds))
        return links, []


def _node(ctx: JudgeContext, rank: int, scope: str, line: dict) -> Node:
    ident = ctx.identities.get(rank, {})
    host = ident.get("host", "?")
    return Node(label(host, scope, ident.get("local_rank", 0)), rank, host, line.get("gbps"),
                line.get("via", ""), line.get("iface"))
