"""`lint`: NCCL / PyTorch / rendezvous settings judged against what NCCL and PyTorch read and what this host has.

Each rule is a small function next to its docstring (in the lint_*.py modules) that yields findings naming a
cause of the catalog and the exact fix; RULES below is the one list that registers them, in report order.
`lint()` is a pure function of its inputs, so `check` can run it for every rank and tests can feed fixture facts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..model import Finding
from . import lint_env, lint_hardware, lint_host, lint_network, lint_rendezvous, lint_tuning
from .lint_context import Context

Rule = Callable[[Context], Iterable[Finding]]

RULES: list[Rule] = [
    # names and values (catalog/nccl_env.tsv, torch_env.tsv)
    lint_env.unknown_variables,
    lint_env.retired_variables,
    lint_env.invalid_values,
    lint_env.nccl_conf_files,
    lint_env.nccl_graph_files,
    # interfaces on this host
    lint_network.socket_ifname,
    lint_network.bootstrap_interface,
    lint_network.gloo_ifname,
    lint_network.ib_disabled,
    # InfiniBand ports, topology and GPU health (rules/hardware.py, shared with `topo`)
    lint_hardware.hardware,
    # rendezvous
    lint_rendezvous.rank_world_size,
    lint_rendezvous.local_rank_gpus,
    lint_rendezvous.master_addr,
    lint_rendezvous.master_port,
    # the host
    lint_host.shm_size,
    lint_host.memlock,
    lint_host.nofile,
    lint_host.conflicting_nccl,
    # performance and error handling
    lint_tuning.perf_settings,
    lint_tuning.algo_override,
    lint_tuning.error_handling,
    lint_tuning.debug_logging,
]


def lint(env: Mapping[str, str], facts: dict[str, Any]) -> list[Finding]:
    """Every finding of every rule for this environment (plus NCCL config files in `facts`) on this host."""
    ctx = Context(env, facts)
    return [finding for rule in RULES for finding in rule(ctx)]


def rules_markdown() -> str:
    """The rule table of docs/lint.md, generated from the rules' docstrings."""
    rows = ["| rule | checks |", "|---|---|"]
    for rule in RULES:
        doc = " ".join((rule.__doc__ or "").split()).replace("*", "\\*").replace("|", "\\|")
        rows.append(f"| `{rule.__name__}` | {doc} |")
    return "\n".join(rows)
