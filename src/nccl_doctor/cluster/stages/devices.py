"""Stage 3: LOCAL_RANK -> GPU per host: no GPU shared by two ranks, no rank without one."""

from __future__ import annotations

from ...rules.consistency import device_findings
from ..judge import JudgeContext, Outcome, Stage
from ..watchdog import missing_findings


def on_rank(ctx) -> None:
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    local = ctx.world.local_rank
    binding = {"local_rank": local, "count": count, "visible": ctx.env.get("CUDA_VISIBLE_DEVICES", "<unset>"),
               "device": None}
    if local < count:
        torch.cuda.set_device(local)
        props = torch.cuda.get_device_properties(local)
        binding.update(device=local, uuid=str(getattr(props, "uuid", "")) or f"index {local}", name=props.name)
        ctx.state["device"] = local
    ctx.publish("devices", binding)


def on_judge(ctx: JudgeContext) -> Outcome:
    got = ctx.gather("devices")
    host_of = {r: ctx.host(r) for r in ctx.identities}
    findings = missing_findings(ctx, "device binding", got.missing) + device_findings(got.results, host_of)
    ctx.facts["devices"] = {str(r): b for r, b in sorted(got.results.items())}
    gpus = len({(host_of.get(r), b.get("uuid")) for r, b in got.results.items() if b.get("uuid")})
    return Outcome.judged(findings, f"{len(got.results)} ranks on {gpus} distinct GPUs")


def skip(ctx: JudgeContext) -> str | None:
    if ctx.plan.get("backend") != "nccl":
        return "backend gloo: the ranks use no GPU"
    return None


STAGE = Stage("devices", "Device binding", on_rank, on_judge, runs_after_failure=True, skip=skip)
