"""Stage `matrix`: bandwidth and latency between every pair of hosts (or of ranks), judged for outliers.

One rank per host (its first) by default, every rank with --matrix-ranks; pairs meet in a round-robin
tournament (N nodes in N-1 rounds of disjoint pairs, N with a bye when N is odd). The measuring, the
retests and the judgement are the link test's (cluster/links.py), which `check` samples too.
"""

from __future__ import annotations

from ..judge import JudgeContext
from ..links import Plan, round_robin, stage


def plan_of(options, backend: str, hosts: int) -> Plan | None:
    if not options.matrix:
        return None
    return Plan(options.matrix, round_robin, options.message_bytes(backend), options.matrix_time)


def skip(ctx: JudgeContext) -> str | None:
    scope = getattr(ctx.options, "matrix", None)
    if not scope:
        return "not asked for (--matrix, --matrix-ranks)"
    if scope == "hosts" and len(ctx.plan.get("hosts", {})) < 2:
        return "one host: no link between hosts to measure (--matrix-ranks measures between ranks)"
    return None


STAGE = stage("matrix", "Link matrix (round robin)", "the link matrix", plan_of, skip)
