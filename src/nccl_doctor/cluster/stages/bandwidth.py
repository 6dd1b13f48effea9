"""Stage 7: a quick bandwidth sample, each host with its neighbours in a ring (full matrices belong to
`bench --matrix`): two links per host tell a slow host from a slow link, in three rounds at most. With
one host, its first two ranks give a local figure. The measuring and the judgement are the link test's
(cluster/links.py), the same rule `bench --matrix` applies.
"""

from __future__ import annotations

from ..judge import JudgeContext
from ..links import Plan, ring, stage

BYTES = {"nccl": 64 << 20, "gloo": 1 << 20}  # per message: a crawling link still ends each stream in seconds
SECONDS = 0.2  # of streaming per direction of each pair
STREAMS = 3


def plan_of(options, backend: str, hosts: int) -> Plan:
    if hosts > 1:
        return Plan("hosts", ring, BYTES.get(backend, BYTES["gloo"]), SECONDS, STREAMS)
    return Plan("ranks", ring, BYTES.get(backend, BYTES["gloo"]), SECONDS, STREAMS, most=None if backend == "nccl" else 2)


def skip(ctx: JudgeContext) -> str | None:
    return "--quick" if ctx.options.quick else None


STAGE = stage("bandwidth", "Bandwidth sample", "the bandwidth sample", plan_of, skip)
