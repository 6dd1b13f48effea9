"""Ray: run `nccl-doctor check` across a set of Ray actors, or across a placement group's bundles.

RL trainers such as verl run their workers as Ray actors, each with the environment Ray gives it
(CUDA_VISIBLE_DEVICES, the node's interfaces). `check_actors` runs one rank of `check` inside each
actor's process environment (a child process of the actor, so the actor itself is never blocked
beyond the deadline and never killed by the check), rank 0 in the first actor. Returns rank 0's report.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from typing import Any, Sequence

import ray

from ...model import Evidence, Finding, InputError, Report
from ...roads import emits

MARGIN = 60.0  # beyond the stage deadlines: process start, imports, the judge's own work


def check_actors(actors: Sequence[Any], *, backend: str = "auto", timeout: float = 20.0, quick: bool = True,
                 env: dict[str, str] | None = None) -> Report:
    """One rank of `check` per actor (in order: the first is rank 0); every wait bounded."""
    if not actors:
        raise InputError("check_actors: no actors given")
    nodes = ray.get([a.__ray_call__.remote(_node_id) for a in actors], timeout=MARGIN)
    host, port = ray.get(actors[0].__ray_call__.remote(_endpoint), timeout=MARGIN)
    args = ["--json", "--backend", backend, "--timeout", str(timeout), *(["--quick"] if quick else [])]
    limit = 8 * timeout + MARGIN  # the stages, each bounded by timeout, plus start-up
    refs = []
    for rank, actor in enumerate(actors):
        same_node = [r for r, n in enumerate(nodes) if n == nodes[rank]]
        launch = {"RANK": str(rank), "WORLD_SIZE": str(len(actors)), "LOCAL_RANK": "0",
                  "LOCAL_WORLD_SIZE": str(len(same_node)), "MASTER_ADDR": host, "MASTER_PORT": str(port),
                  **(env or {})}
        refs.append(actor.__ray_call__.remote(_run_rank, args, launch, limit))
    results = ray.get(refs, timeout=limit + MARGIN)
    return _report(results, nodes)


def check_placement_group(pg: Any, *, bundle_indices: Sequence[int] | None = None, **kwargs: Any) -> Report:
    """Start a small probe actor in each bundle (with the bundle's GPUs), check across them, end them.

    The bundles must have room for the probes: run it before the workers take the bundle's resources.
    """
    from ray.util.placement_group import placement_group_table
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    ray.get(pg.ready(), timeout=MARGIN)
    bundles = placement_group_table(pg)["bundles"]
    indices = list(bundle_indices) if bundle_indices is not None else sorted(bundles)
    probes = [_Probe.options(num_cpus=0, num_gpus=bundles[i].get("GPU", 0),
                             scheduling_strategy=PlacementGroupSchedulingStrategy(
                                 placement_group=pg, placement_group_bundle_index=i)).remote() for i in indices]
    try:
        return check_actors(probes, **kwargs)
    finally:
        for probe in probes:
            ray.kill(probe)


@ray.remote
class _Probe:
    """An empty actor holding a bundle's resources while `check` runs in it."""

    def ready(self) -> bool:
        return True


# ------------------------------------------------------------------ run inside the actors (via __ray_call__)

def _node_id(_actor: Any) -> str:
    return ray.get_runtime_context().get_node_id()


def _endpoint(_actor: Any) -> tuple[str, int]:
    """Rank 0's address as the others can reach it, and a port free on its node right now."""
    with socket.socket() as sock:
        sock.bind(("", 0))
        return ray.util.get_node_ip_address(), sock.getsockname()[1]


def _run_rank(_actor: Any, args: list[str], launch: dict[str, str], limit: float) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHELASTIC_", "GROUP_RANK"))}
    try:
        done = subprocess.run([sys.executable, "-m", "nccl_doctor", "check", *args], env={**env, **launch},
                              capture_output=True, text=True, timeout=limit, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return {"rank": int(launch["RANK"]), "code": None, "stdout": "", "stderr": f"no answer in {limit:.0f} s"}
    return {"rank": int(launch["RANK"]), "code": done.returncode, "stdout": done.stdout,
            "stderr": done.stderr[-2000:], "host": socket.gethostname(), "pid": os.getpid()}


# ------------------------------------------------------------------ rank 0's report, as a Report

def _report(results: list[dict[str, Any]], nodes: list[str]) -> Report:
    """Rank 0's report of a check run across Ray actors, its findings rebuilt from its JSON."""
    rank0 = results[0]
    try:
        data = json.loads(rank0["stdout"])
    except ValueError:
        return _no_report(rank0, nodes)
    findings = [_finding(d) for d in data["findings"]]
    facts = {**data.get("facts", {}), "ray": {"actors": len(results), "nodes": len(set(nodes)),
                                              "exit_codes": [r["code"] for r in results]}}
    return Report("check", findings, facts, order=None)


@emits("store-timeout")
def _no_report(rank0: dict[str, Any], nodes: list[str]) -> Report:
    """Rank 0 produced no report: the actors never met (store-timeout), with the end of its stderr."""
    tail = (rank0["stderr"] or "no output").strip().splitlines()[-3:]
    finding = Finding("store-timeout", "error", "rank 0 of the check (in the first actor) produced no report",
                      ranks=[0], evidence=[Evidence("rank 0 stderr", line) for line in tail])
    return Report("check", [finding], {"ray": {"nodes": nodes}})


def _finding(d: dict[str, Any]) -> Finding:
    return Finding(d["cause"], d["severity"], d["message"], confidence=d["confidence"], ranks=d["ranks"],
                   hosts=d["hosts"], fix=d["fix"], evidence=[Evidence(e["source"], e["text"], e["line"])
                                                             for e in d["evidence"]],
                   secondary=[_finding(s) for s in d.get("secondary", [])])
