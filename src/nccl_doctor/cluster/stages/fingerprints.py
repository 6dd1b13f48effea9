"""Stage 2: every rank publishes its host facts and lint findings; the judge compares them.

A version or setting that differs between ranks is reported here, by host, before NCCL is ever
initialised. The judge also picks the backend for `--backend auto`: NCCL when every rank has a GPU.
"""

from __future__ import annotations

import re

from ...model import Finding, fold, ranges
from ...rules.consistency import compare_fingerprints, compare_settings, interface_findings, rules
from ..judge import JudgeContext, Outcome, Stage
from ..watchdog import missing_findings
from ...roads import emits


def on_rank(ctx) -> None:
    from ...probe import collect
    from ...rules.lint import lint

    facts = collect(ctx.env)
    ctx.state["facts"] = facts
    # The store is up and this rank reached it: lint's static guesses about rendezvous are moot here.
    static = [f for f in lint(ctx.env, facts) if f.category != "rendezvous_network"]
    ctx.publish("fingerprints", {"facts": facts, "lint": [f.to_wire() for f in static],
                                 "torch": _torch_view()})


def _repeats(found: Finding, kept: Finding, lint: set[int], interfaces: dict[int, str]) -> bool:
    """A lint finding that other ranks saw alike, up to their numbers (addresses, counts), is one finding (its
    message gives the first rank's numbers); a rank's own lint view of its interfaces is part of the cross-rank
    finding about the same ranks (of its own cause when there is one)."""
    if id(found) not in lint:
        return False
    if id(kept) in lint:
        return (found.cause, found.severity, _shape(found.message)) == (kept.cause, kept.severity, _shape(kept.message))
    if id(kept) not in interfaces or not set(found.ranks) & set(kept.ranks):
        return False
    return found.cause == kept.cause if found.cause in interfaces.values() else found.category == kept.category


def _shape(message: str) -> str:
    return re.sub(r"\d+(?:[.:]\d+)*", "#", message)


def _torch_view() -> dict:
    """What this process's torch can use: the backend choice depends on it, not on what is installed."""
    import torch
    import torch.distributed as dist

    cuda = torch.cuda.is_available()
    return {"cuda": cuda, "gpus": torch.cuda.device_count() if cuda else 0, "nccl": dist.is_nccl_available(),
            "gloo": dist.is_gloo_available()}


@emits("more-ranks-than-gpus", "nccl-setting-differs")
def on_judge(ctx: JudgeContext) -> Outcome:
    """Stage 2 on the judge: fingerprints (versions, settings, GPUs, interfaces) compared across ranks, one finding
    per cause."""
    got = ctx.gather("fingerprints")
    host_of = {r: ctx.host(r) for r in ctx.identities}
    facts = {r: p["facts"] for r, p in got.results.items()}
    backend, why = _backend(ctx, {r: p["torch"] for r, p in got.results.items()})
    unused = set(rules()["backend"]["nccl_only"]) if backend == "gloo" else set()
    lint_found = [f for r, p in sorted(got.results.items()) for w in p["lint"]
                  if (f := Finding.from_wire(w, r, ctx.host(r))).cause not in unused]
    interfaces = interface_findings(facts, host_of)
    compared = (missing_findings(ctx, "publishing its fingerprint", got.missing)
                + compare_fingerprints(facts, host_of) + compare_settings(facts, host_of) + interfaces)
    lint_ids, interface_ids = {id(f) for f in lint_found}, {id(f): f.cause for f in interfaces}
    findings = fold(compared + lint_found + why, order=None,
                    same=lambda found, kept: _repeats(found, kept, lint_ids, interface_ids))
    ctx.plan["backend"] = backend
    ctx.facts.setdefault("world", {})["backend"] = backend
    ctx.facts["versions"] = _versions_by_host(ctx, facts)
    differing = sum(f.cause != "nccl-setting-differs" or f.severity != "info" for f in compared)
    return Outcome.judged(findings, f"{len(facts)} fingerprints, backend {backend}, "
                                    f"{differing} difference{'s' if differing != 1 else ''}", backend=backend)


@emits("more-ranks-than-gpus")
def _backend(ctx: JudgeContext, views: dict[int, dict]) -> tuple[str, list[Finding]]:
    """The backend the ranks can use (nccl needs CUDA, a GPU and NCCL on every rank); more ranks than GPUs is named."""
    without = sorted(r for r, v in views.items() if not (v["cuda"] and v["gpus"] and v["nccl"]))
    wanted = ctx.options.backend
    if wanted == "auto":
        return ("gloo" if without or not views else "nccl"), []
    if wanted == "nccl" and without:
        return "nccl", [Finding("more-ranks-than-gpus", "error",
                                f"--backend nccl, but rank{'s' if len(without) > 1 else ''} {ranges(without)} on "
                                f"{', '.join(ctx.hosts_of(without))} see no usable GPU (or torch without NCCL)",
                                ranks=without, hosts=ctx.hosts_of(without))]
    return wanted, []


def _versions_by_host(ctx: JudgeContext, facts: dict[int, dict]) -> dict[str, dict]:
    from ...rules.consistency import dig

    out: dict[str, dict] = {}
    for rank, f in sorted(facts.items()):
        entry = out.setdefault(ctx.host(rank), {"ranks": []})
        entry["ranks"].append(rank)
        for key, path in (("torch", "software.torch.version"), ("cuda", "software.torch.cuda"),
                          ("nccl", "software.nccl.loaded_version"), ("driver", "gpus.driver_version")):
            value = dig(f, path)
            entry.setdefault(key, value if isinstance(value, (str, type(None))) else None)
    return out


STAGE = Stage("fingerprints", "Fingerprints (versions, settings)", on_rank, on_judge, runs_after_failure=True)
