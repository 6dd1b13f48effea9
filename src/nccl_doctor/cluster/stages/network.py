"""Stage 4: hosts probe each other on the addresses NCCL / Gloo would use (host level, not rank pairs)."""

from __future__ import annotations

from ...model import Evidence, Severity
from ...rules.consistency import network_findings
from ..judge import JudgeContext, Outcome, Stage
from ..netprobe import Listeners, candidates, probe_hosts
from ..watchdog import missing_findings


def _leads(ctx) -> bool:
    return ctx.plan["leaders"].get(ctx.host) == ctx.rank


def on_rank(ctx) -> None:
    listeners = []
    if _leads(ctx):
        opened = Listeners(ctx.host, ctx.plan["token"])
        listeners = opened.open(candidates(ctx.env, ctx.state.get("facts", {})))
        ctx.defer(opened.close)
    ctx.publish("network.listen", {"listeners": listeners})
    targets = ctx.verdict("network.listen")["targets"]
    probes = probe_hosts(ctx.host, targets, ctx.plan["token"]) if _leads(ctx) else []
    ctx.publish("network", {"probes": probes})


def on_judge(ctx: JudgeContext) -> Outcome:
    """Stage 4 on the judge: host-to-host probes on the interfaces NCCL and Gloo would pick; who cannot reach whom."""
    leaders = ctx.plan["leaders"]
    heard = ctx.gather("network.listen")
    targets = {host: heard.results.get(rank, {}).get("listeners", []) for host, rank in leaders.items()}
    ctx.exchange.decide("network.listen", {"targets": targets})
    got = ctx.gather("network")
    missing = missing_findings(ctx, "the network probe", sorted(set(heard.missing) | set(got.missing)))
    hosts = {host: {"listeners": targets[host], "probes": got.results.get(rank, {}).get("probes", [])}
             for host, rank in leaders.items()}
    roles = ["nccl"] if ctx.plan.get("backend") == "nccl" else ["gloo"]
    findings, facts = network_findings(hosts, roles)
    ctx.facts["network"] = {"listeners": targets, **facts}
    blamed = {h for f in findings for h in f.hosts}
    for f in ctx.findings:  # measured, not guessed: lint's doubt about a host that every other host reached
        if (f.cause == "wrong-interface-selected" and f.severity == "warning" and len(hosts) > 1
                and not set(f.hosts) & blamed):
            f.severity, f.fix = Severity.INFO, []
            f.evidence.append(Evidence("check: network stage", "every other host reached this host's selected address"))
    for f in findings:
        f.ranks = sorted(r for h in f.hosts for r in ctx.plan["hosts"].get(h, []))
    suggestions = facts["suggestion"]
    for f in ctx.findings:  # interface findings of earlier stages get the setting that was seen to work
        role = "gloo" if "GLOO_SOCKET_IFNAME" in f.message else "nccl"
        if f.category == "network_interface" and f.severity == "error" and role in suggestions:
            f.fix.insert(0, f"What every host reaches: {suggestions[role]}.")
    if len(hosts) < 2:
        used = ", ".join(f"{l['iface']} {l['address']} ({'/'.join(l['roles'])})"
                         for l in next(iter(targets.values()), []) if l["roles"])
        return Outcome.judged(missing + findings, f"one host: nothing to probe between hosts; would use {used or 'nothing'}")
    bad = sum(not p["ok"] for h in hosts.values() for p in h["probes"])
    total = sum(len(h["probes"]) for h in hosts.values())
    detail = f"{total - bad}/{total} host-to-host probes answered"
    if suggestions:
        detail += "; works everywhere: " + "; ".join(t.replace("`", "") for t in suggestions.values())
    return Outcome.judged(missing + findings, detail)


STAGE = Stage("network", "Network between hosts", on_rank, on_judge, runs_after_failure=True)
