"""Stage `matrix`: bandwidth and latency between every pair of hosts (or of ranks), judged for outliers.

One rank per host (its first) by default, every rank with --matrix-ranks. Pairs meet in a round-robin
tournament: N nodes finish in N-1 rounds (N with a bye when N is odd) of disjoint pairs measured at
the same time, each pair with point-to-point send/recv over the job's process group: a small-message
ping-pong for latency, then a stream of large messages each way. A barrier closes every round, and
each round is one store step that the judge holds to the deadline. First, each node says what line
rate its network hardware reports (interface speed, IB port rate), from the fingerprint's facts.
Links that look slow or asymmetric are then measured again, one at a time, and the better of the two
measurements is judged: nothing is blamed on a pair that was only disturbed by its round's neighbours
(sharing a switch uplink, or CPUs) or by a moment's load.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Callable, Mapping

from ..judge import MARGIN, JudgeContext, Outcome, Stage
from ..stages.collectives import judge_op
from ..watchdog import missing_findings
from .links import Limits, Link, Node, best_of, judge_links, suspects
from .options import BenchOptions
from .schedule import round_robin
from .sweep import progress_bar

MAX_AGAIN = 3  # rounds of measuring suspicious links again


def nodes_of(scope: str | None, hosts: Mapping[str, list[int]]) -> list[int]:
    """The ranks that take part, in host order: each host's first rank, or every rank."""
    if scope == "ranks":
        return sorted(r for ranks in hosts.values() for r in ranks)
    return [ranks[0] for _, ranks in sorted(hosts.items())]


def label(host: str, scope: str | None, local_rank: int) -> str:
    return f"{host}:{local_rank}" if scope == "ranks" else host


def line_rate(env: Mapping[str, str], facts: Mapping[str, Any], backend: str) -> dict:
    """The rate this host's network hardware reports for the path the backend takes (a fact, not a judgement)."""
    from ...probe.infiniband import ib_select_ports
    from ...probe.network import gloo_select_interfaces, nccl_select_interfaces

    net = facts.get("network") or {}
    ifaces = net.get("interfaces") or []
    if backend == "nccl" and env.get("NCCL_IB_DISABLE", "0") != "1":
        ports = ib_select_ports(env.get("NCCL_IB_HCA"), (facts.get("infiniband") or {}).get("devices") or [])
        rated = [p for p in ports if p.get("rate_gbps")]
        if rated:
            best = max(rated, key=lambda p: p["rate_gbps"])
            return {"gbps": best["rate_gbps"], "iface": None,
                    "via": f"{best['device']}:{best['port']} ({best['rate']})"}
    if backend == "nccl":
        chosen = nccl_select_interfaces(env.get("NCCL_SOCKET_IFNAME"), ifaces, env.get("NCCL_SOCKET_FAMILY"))
    else:
        chosen = gloo_select_interfaces(env.get("GLOO_SOCKET_IFNAME"), ifaces)
        if not chosen:  # Gloo binds to the address the host name resolves to
            named = (net.get("hostname") or {}).get("interfaces") or []
            chosen = [i for i in ifaces if i["name"] in named]
    if not chosen:
        return {"gbps": None, "via": "interface not identified", "iface": None}
    iface = chosen[0]
    speed = iface.get("speed_mbps")
    return {"gbps": speed / 1000 if speed else None, "iface": iface["name"],
            "via": f"{iface['name']} ({speed} Mb/s)" if speed else f"{iface['name']} (no speed reported)"}


# ------------------------------------------------------------------ rank side

def on_rank(ctx: Any) -> None:
    from .harness import Pair, barrier, device_of

    options: BenchOptions = ctx.options
    nodes = nodes_of(options.matrix, ctx.plan["hosts"])
    taking_part = ctx.rank in nodes
    facts = ctx.state.get("facts", {})
    ctx.mark("matrix.line")
    ctx.publish("matrix.line", line_rate(ctx.env, facts, ctx.plan["backend"]) if taking_part else {})
    device = device_of(ctx)
    wait = timedelta(seconds=options.timeout + MARGIN)

    def run_rounds(rounds: list[list[tuple[int, int]]], prefix: str) -> bool:
        for index, pairs in enumerate(rounds):
            step = f"{prefix}.{index}"
            ctx.mark(step)
            result: dict = {}
            try:
                for a, b in pairs:
                    if ctx.rank in (nodes[a], nodes[b]):
                        first = ctx.rank == nodes[a]
                        pair = Pair(nodes[b] if first else nodes[a], first,
                                    options.message_bytes(ctx.plan["backend"]), options.matrix_time, device, wait)
                        result = pair.measure()
                barrier(device, wait)  # rounds do not overlap
            except Exception as exc:
                ctx.publish(step, {"error": f"{type(exc).__name__}: {exc}"})
                return False
            ctx.publish(step, result)
        return True

    going, attempt = run_rounds(round_robin(len(nodes)), "matrix"), 0
    while going:  # the judge names pairs to measure again, alone, until it names none
        again = ctx.verdict(f"matrix.again.{attempt}").get("retest", [])
        going = bool(again) and run_rounds([[tuple(pair)] for pair in again], f"matrix.retest.{attempt}")
        attempt += 1


# ------------------------------------------------------------------ judge side

def on_judge(ctx: JudgeContext) -> Outcome:
    options: BenchOptions = ctx.options  # type: ignore[assignment]
    backend, ranks = ctx.plan["backend"], nodes_of(options.matrix, ctx.plan["hosts"])
    lines = ctx.gather("matrix.line")
    nodes = {r: _node(ctx, r, options.matrix, lines.results.get(r, {})) for r in ranks}
    rounds = round_robin(len(ranks))
    limits, judged = Limits.load(backend), _judged(backend, nodes)
    findings = missing_findings(ctx, "the link matrix", lines.missing, enter_step="matrix.line")
    links: list[Link] = []
    if not findings:
        links, findings = _measured(ctx, options, rounds, ranks, nodes, "matrix")
    links, retested, findings = _again(ctx, options, links, ranks, nodes, limits, judged, findings)
    if not findings:
        findings = judge_links({n.label: n for n in nodes.values()}, judged(links), limits)
    ctx.facts["matrix"] = {
        "scope": options.matrix, "message_bytes": options.message_bytes(backend), "rounds": len(rounds),
        "retested": [f"{l.a} <-> {l.b}" for l in retested],
        "nodes": [{"label": n.label, "rank": n.rank, "host": n.host, "line_gbps": n.line_gbps, "via": n.via}
                  for n in nodes.values()],
        "links": [{"a": l.a, "b": l.b, "ab_Bps": l.ab, "ba_Bps": l.ba, "latency_us": round(l.latency_us, 2)}
                  for l in links]}
    unjudged = len(links) - len(judged(links))
    return Outcome.judged(findings, f"{len(links)} links in {len(rounds)} round{'s' if len(rounds) != 1 else ''}"
                                    + (f", {len(retested)} measured again alone" if retested else "")
                                    + (f"; {unjudged} inside a host not judged (Gloo: loopback)" if unjudged else ""))


def _judged(backend: str, nodes: dict[int, Node]) -> Callable[[list[Link]], list[Link]]:
    """The links to judge: under Gloo two ranks of one host talk over loopback TCP, which measures their CPUs."""
    host_of = {n.label: n.host for n in nodes.values()}
    if backend == "nccl":
        return lambda links: links
    return lambda links: [l for l in links if host_of[l.a] != host_of[l.b]]


def _again(ctx: JudgeContext, options: BenchOptions, links: list[Link], ranks: list[int], nodes: dict[int, Node],
           limits: Limits, judged: Callable[[list[Link]], list[Link]],
           findings: list) -> tuple[list[Link], list[Link], list]:
    """Measure suspicious links again, one pair at a time, keeping the better figures; a better figure
    moves the references, so look again (at most MAX_AGAIN times). Every decision tells the ranks."""
    index_of = {nodes[r].label: i for i, r in enumerate(ranks)}
    retested: list[Link] = []
    for attempt in range(MAX_AGAIN + 1):
        done = {(l.a, l.b) for l in retested}
        fresh = [] if findings or attempt == MAX_AGAIN else \
            [l for l in suspects(judged(links), limits) if (l.a, l.b) not in done]
        pairs = [[index_of[l.a], index_of[l.b]] for l in fresh]
        ctx.exchange.decide(f"matrix.again.{attempt}", {"retest": pairs})
        if not pairs:
            break
        again, findings = _measured(ctx, options, [[tuple(p)] for p in pairs], ranks, nodes, f"matrix.retest.{attempt}")
        better = {(l.a, l.b): l for l in again}
        links = [best_of(l, better[(l.a, l.b)]) if (l.a, l.b) in better else l for l in links]
        retested += fresh
    return links, retested, findings


def _measured(ctx: JudgeContext, options: BenchOptions, rounds: list, ranks: list[int], nodes: dict[int, Node],
              prefix: str) -> tuple[list[Link], list]:
    """Gather the rounds' results into links; on a failure, the findings that name who and where."""
    links: list[Link] = []
    title = "link matrix" if prefix == "matrix" else "link matrix, again"
    with progress_bar(options.show_progress, len(rounds), title) as advance:
        for index, pairs in enumerate(rounds):
            step = f"{prefix}.{index}"
            got = ctx.gather(step)
            what = "the link test of " + ", ".join(f"{nodes[ranks[a]].label} <-> {nodes[ranks[b]].label}"
                                                    for a, b in pairs)
            if got.missing or any("error" in p for p in got.results.values()):
                return links, judge_op(ctx, what, step, got.results, got.missing)
            for a, b in pairs:
                first, second = got.results[ranks[a]], got.results[ranks[b]]
                links.append(Link(nodes[ranks[a]].label, nodes[ranks[b]].label, first["send_Bps"],
                                  second["send_Bps"], first["latency_us"]))
            advance(f"round {index + 1}/{len(rounds)}")
    return links, []


def _node(ctx: JudgeContext, rank: int, scope: str | None, line: dict) -> Node:
    ident = ctx.identities.get(rank, {})
    host = ident.get("host", "?")
    return Node(label(host, scope, ident.get("local_rank", 0)), rank, host, line.get("gbps"),
                line.get("via", ""), line.get("iface"))


def skip(ctx: JudgeContext) -> str | None:
    scope = getattr(ctx.options, "matrix", None)
    if not scope:
        return "not asked for (--matrix, --matrix-ranks)"
    if len(nodes_of(scope, ctx.plan.get("hosts", {}))) < 2:
        return "one host: no link between hosts to measure (--matrix-ranks measures between ranks)" \
            if scope == "hosts" else "one rank: nothing to measure"
    return None


STAGE = Stage("matrix", "Link matrix (round robin)", on_rank, on_judge, skip=skip)
