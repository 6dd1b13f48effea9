"""Cross-rank comparison: facts gathered from every rank -> findings that name the odd hosts and ranks.

Pure functions of JSON-able facts (what `check` gathers on rank 0), so they are tested without any
process group. What is compared, and how severe a difference is, lives in catalog/consistency.toml.
"""

from __future__ import annotations

import fnmatch
import ipaddress
from collections import defaultdict
from functools import cache
from typing import Any, Iterable, Mapping

from ..catalog import load_toml
from ..model import Evidence, Finding, names, ranges
from ..roads import emits

UNKNOWN = object()  # a fact a rank could not observe: left out of comparisons


@cache
def rules() -> dict[str, Any]:
    return load_toml("consistency.toml")


def where(ranks: Iterable[int], host_of: Mapping[int, str]) -> str:
    ranks = sorted(set(ranks))
    return f"{names(host_of.get(r, '?') for r in ranks)} (rank{'s' if len(ranks) > 1 else ''} {ranges(ranks, most=8)})"


def dig(facts: Mapping[str, Any], path: str) -> Any:
    node: Any = facts
    for part in path.split("."):
        if not isinstance(node, Mapping) or "unavailable" in node and part not in node:
            return UNKNOWN
        node = node.get(part, None)
    return node


def _as_text(value: Any, form: str) -> Any:
    if value is UNKNOWN:
        return UNKNOWN
    if form == "wheels":
        return ", ".join(sorted(f"{w['name']} {w['version']}" for w in value or [])) or "none"
    if form == "libraries":
        versions = sorted({lib.get("version") or "unreadable" for lib in value or []})
        return ", ".join(versions) or "none"
    return "none" if value is None else str(value)


def split_by_value(values: Mapping[int, Any]) -> list[tuple[Any, list[int]]]:
    """Groups of ranks sharing a value, the largest first (ties: the group holding the lowest rank)."""
    groups: dict[Any, list[int]] = defaultdict(list)
    for rank, value in sorted(values.items()):
        groups[value].append(rank)
    return sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[1][0]))


def _difference(cause: str, severity: str, label: str, groups: list[tuple[Any, list[int]]],
                host_of: Mapping[int, str], fix: list[str]) -> Finding:
    odd = [r for _, ranks in groups[1:] for r in ranks]
    majority_value, _ = groups[0]
    parts = "; ".join(f"{value} on {where(ranks, host_of)}" for value, ranks in groups)
    return Finding(
        cause, severity, f"ranks disagree on {label}: {parts}", confidence=0.95, ranks=odd,
        hosts=sorted({host_of.get(r, "?") for r in odd}),
        evidence=[Evidence(f"{where(ranks, host_of)}", f"{label} = {value}") for value, ranks in groups],
        fix=fix or [f"Give {where(odd, host_of)} the same {label} as the others ({majority_value}): one image or "
                    f"lock file for every host."])


def compare_fingerprints(facts: Mapping[int, Mapping[str, Any]], host_of: Mapping[int, str]) -> list[Finding]:
    """Versions and libraries that differ between ranks, as listed in consistency.toml."""
    findings = []
    for row in rules()["field"]:
        values = {r: _as_text(dig(f, row["path"]), row.get("format", "text")) for r, f in facts.items()}
        known = {r: v for r, v in values.items() if v is not UNKNOWN}
        groups = split_by_value(known)
        if len(groups) > 1:
            findings.append(_difference(row["cause"], row["severity"], row["label"], groups, host_of, []))
    return findings


def _matches(name: str, patterns: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


@emits("nccl-setting-differs", "torch-version-mismatch", "nccl-version-mismatch", "driver-version-differs")
def compare_settings(facts: Mapping[int, Mapping[str, Any]], host_of: Mapping[int, str]) -> list[Finding]:
    """NCCL_* / TORCH_* / GLOO_* variables whose values differ between ranks (unset counts as a value)."""
    cfg = rules()["settings"]
    env = {r: dig(f, "environment.variables") for r, f in facts.items()}
    env = {r: e for r, e in env.items() if isinstance(e, Mapping)}
    names = sorted({n for e in env.values() for n in e
                    if n.startswith(tuple(cfg["prefixes"])) and not _matches(n, cfg["may_differ"])})
    findings = []
    for name in names:
        groups = split_by_value({r: e.get(name, "<unset>") for r, e in env.items()})
        if len(groups) < 2:
            continue
        severity = ("info" if _matches(name, cfg["harmless"])
                    else "warning" if name.startswith(tuple(cfg["warning_prefixes"])) else "error")
        findings.append(_difference("nccl-setting-differs", severity, name, groups, host_of,
                                    [_same_setting(name, groups, host_of)]))
    return findings


def _same_setting(name: str, groups: list[tuple[Any, list[int]]], host_of: Mapping[int, str]) -> str:
    usual, _ = groups[0]
    odd = where([r for _, ranks in groups[1:] for r in ranks], host_of)
    if usual == "<unset>":
        return f"Unset {name} on {odd} (the other ranks do not set it), or export the same value on every rank."
    return f"`export {name}={usual}` on {odd} too, as on the other ranks (or unset it everywhere)."


# ------------------------------------------------------------------ interfaces (before the backend starts)

@emits("gloo-ifname-no-match", "ifname-differs-between-hosts", "no-usable-interface", "socket-ifname-no-match")
def interface_findings(facts: Mapping[int, Mapping[str, Any]], host_of: Mapping[int, str]) -> list[Finding]:
    """NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME that select nothing on some ranks, and why there: one finding
    per setting and interfaces seen, naming every rank and host concerned."""
    from ..probe.network import would_use

    nccl_empty: dict[tuple, list[int]] = defaultdict(list)
    gloo_missing: dict[tuple, list[int]] = defaultdict(list)
    names_by_rank, looked = {}, 0
    for rank, f in sorted(facts.items()):
        env, network = dig(f, "environment.variables"), dig(f, "network")
        if not isinstance(env, Mapping) or not isinstance(network, Mapping) or "interfaces" not in network:
            continue
        looked += 1
        names_by_rank[rank] = {i["name"]: i for i in network["interfaces"]}
        chosen = would_use(env, network)
        have = ", ".join(n for n, i in names_by_rank[rank].items() if n != "lo" and i.get("addresses")) or "none"
        if chosen["nccl"]["setting"] and not chosen["nccl"]["interfaces"]:
            nccl_empty[(chosen["nccl"]["setting"], have)].append(rank)
        if chosen["gloo"]["missing"]:
            gloo_missing[(chosen["gloo"]["setting"], tuple(chosen["gloo"]["missing"]), have)].append(rank)
    everywhere = sum(len(r) for r in nccl_empty.values()) == looked
    findings = [_nccl_nothing(spec, have, ranks, names_by_rank, host_of, ok_elsewhere=not everywhere)
                for (spec, have), ranks in nccl_empty.items()]
    for (spec, missing, have), ranks in gloo_missing.items():
        hosts = sorted({host_of.get(r, "?") for r in ranks})
        findings.append(Finding(
            "gloo-ifname-no-match", "error",
            f"GLOO_SOCKET_IFNAME={spec}: no interface named {', '.join(missing)} with an address on "
            f"{where(ranks, host_of)}; interfaces there: {have}", confidence=0.95, ranks=ranks, hosts=hosts,
            evidence=[Evidence(f"{where(ranks, host_of)} environment", f"GLOO_SOCKET_IFNAME={spec}"),
                      Evidence(f"{where(ranks, host_of)} interfaces", have)],
            fix=[f"Set GLOO_SOCKET_IFNAME to an interface {'it has' if len(hosts) == 1 else 'they have'}: {have}."]))
    return findings


@emits("ifname-differs-between-hosts", "no-usable-interface", "socket-ifname-no-match")
def _nccl_nothing(spec: str, have: str, ranks: list[int], names: Mapping[int, dict], host_of: Mapping[int, str],
                  ok_elsewhere: bool) -> Finding:
    """NCCL_SOCKET_IFNAME that matches no interface on some ranks' hosts (and whether it matches elsewhere)."""
    hosts = sorted({host_of.get(r, "?") for r in ranks})
    mine = names.get(ranks[0], {})
    on = where(ranks, host_of)
    wanted = [n.lstrip("^=") for n in spec.lstrip("^=").split(",")]
    down = [n for n in wanted if n in mine and not (mine[n].get("up") and mine[n].get("running", True))]
    evidence = [Evidence(f"{on} environment", f"NCCL_SOCKET_IFNAME={spec}"), Evidence(f"{on} interfaces", have)]
    if down:
        return Finding("no-usable-interface", "error",
                       f"NCCL_SOCKET_IFNAME={spec} on {on} names {', '.join(down)}, which is down there "
                       f"(no link or not up)", confidence=0.9, ranks=ranks, hosts=hosts, evidence=evidence,
                       fix=[f"Bring the link up on {', '.join(hosts)}: `ip link set {down[0]} up`, check the "
                            f"cable/port (`ethtool {down[0]}`), or exclude {'it' if len(hosts) == 1 else 'them'} "
                            f"until fixed."])
    if ok_elsewhere:
        return Finding("ifname-differs-between-hosts", "error",
                       f"NCCL_SOCKET_IFNAME={spec} matches no interface on {on}, though it does on the other hosts; "
                       f"{'it has' if len(hosts) == 1 else 'they have'}: {have}", confidence=0.95, ranks=ranks,
                       hosts=hosts, evidence=evidence)
    return Finding("socket-ifname-no-match", "error",
                   f"NCCL_SOCKET_IFNAME={spec} matches no interface on {on}; interfaces there: {have}",
                   confidence=0.95, ranks=ranks, hosts=hosts, evidence=evidence,
                   fix=[f"Use a name that exists, e.g. `export NCCL_SOCKET_IFNAME={_first_real(mine)}`."])


def _first_real(ifaces: Mapping[str, dict]) -> str:
    return next((n for n, i in ifaces.items() if n != "lo" and i.get("up")), "eth0")


# ------------------------------------------------------------------ device binding

@emits("duplicate-gpu", "more-ranks-than-gpus")
def device_findings(bindings: Mapping[int, Mapping[str, Any]], host_of: Mapping[int, str]) -> list[Finding]:
    """Ranks without a GPU of their own, and GPUs shared by several ranks of one host."""
    findings = []
    for rank, b in sorted(bindings.items()):
        if b.get("device") is None and b.get("local_rank", 0) >= b.get("count", 0):
            host = host_of.get(rank, "?")
            findings.append(Finding(
                "more-ranks-than-gpus", "error",
                f"rank {rank} on {host} has LOCAL_RANK {b.get('local_rank')} but sees {b.get('count', 0)} GPU(s)"
                f" (CUDA_VISIBLE_DEVICES={b.get('visible', '<unset>')})", confidence=0.95, ranks=[rank], hosts=[host],
                evidence=[Evidence(f"rank {rank}", f"LOCAL_RANK={b.get('local_rank')}, "
                                                   f"torch.cuda.device_count()={b.get('count', 0)}")]))
    users: dict[tuple[str, str], list[int]] = defaultdict(list)
    for rank, b in bindings.items():
        if b.get("uuid"):
            users[(host_of.get(rank, "?"), b["uuid"])].append(rank)
    for (host, uuid), ranks in sorted(users.items()):
        if len(ranks) < 2:
            continue
        masks = {bindings[r].get("visible", "<unset>") for r in ranks}
        same_mask = f"; every one of them has CUDA_VISIBLE_DEVICES={masks.pop()}" if len(masks) == 1 else ""
        findings.append(Finding(
            "duplicate-gpu", "error", f"ranks {ranges(ranks)} on {host} all use GPU {uuid}{same_mask}",
            confidence=0.95, ranks=ranks, hosts=[host],
            evidence=[Evidence(f"rank {r}", f"device {bindings[r].get('device')} = {uuid}, "
                                            f"CUDA_VISIBLE_DEVICES={bindings[r].get('visible', '<unset>')}")
                      for r in ranks]))
    return findings


# ------------------------------------------------------------------ network reachability between hosts

def network_findings(hosts: Mapping[str, Mapping[str, Any]], roles: Iterable[str]) -> tuple[list[Finding], dict]:
    """From each host's listeners and its probes of the others: unreachable hosts, and what would work.

    hosts[h] = {"listeners": [{iface, address, netmask, port, roles}], "probes": [{to, iface, ok, error}]}.
    A host that no other host reaches is the one at fault; the failures of its own probes are not
    blamed on the hosts it could not reach.
    """
    names = sorted(hosts)
    ok = {(h, p["to"], p["iface"]): p for h in names for p in hosts[h].get("probes", [])}
    findings = []
    suggestions = {role: text for role in ("nccl", "gloo") if (text := suggest_interfaces(hosts, ok, role))}
    for role in roles:
        primary = {t: l for t in names if (l := _primary(hosts[t], role))}
        isolated = {t for t, l in primary.items()
                    if len(names) > 2 and not any(_reached(ok, h, t, l) for h in names if h != t)}
        for target, listener in primary.items():
            failed = [h for h in names if h != target and (target in isolated or h not in isolated)
                      and not _reached(ok, h, target, listener)]
            if failed:
                findings.append(_unreachable(role, target, listener, failed, ok, names))
                if role in suggestions:
                    findings[-1].fix.insert(0, f"What every host reaches: {suggestions[role]}.")
    facts = {"matrix": [{"from": h, "to": t, "iface": i, "ok": p.get("ok"), "error": p.get("error")}
                        for (h, t, i), p in sorted(ok.items())],
             "suggestion": suggestions}
    return findings, facts


def _primary(host: Mapping[str, Any], role: str) -> Mapping[str, Any] | None:
    return next((l for l in host.get("listeners", []) if role in l.get("roles", [])), None)


def _reached(ok: Mapping[tuple[str, str, str], Mapping], source: str, target: str, listener: Mapping) -> bool:
    return bool(ok.get((source, target, listener["iface"]), {}).get("ok"))


@emits("host-unreachable")
def _unreachable(role: str, target: str, listener: Mapping[str, Any], failed: list[str],
                 ok: Mapping[tuple[str, str, str], Mapping], names: list[str]) -> Finding:
    """A listener that some hosts cannot reach on the interface NCCL or Gloo would use."""
    setting = "NCCL_SOCKET_IFNAME" if role == "nccl" else "GLOO_SOCKET_IFNAME"
    errors = [ok.get((h, target, listener["iface"]), {}).get("error") or "not probed" for h in failed]
    everyone = len(failed) == len(names) - 1 and len(names) > 2
    return Finding(
        "host-unreachable", "error",
        f"{target} cannot be reached from {'any other host' if everyone else ', '.join(failed)} on "
        f"{listener['address']} ({listener['iface']}), the address {'NCCL' if role == 'nccl' else 'Gloo'} would "
        f"use there: {errors[0]}",
        confidence=0.9 if everyone else 0.75, hosts=[target] if everyone else [target, *failed],
        evidence=[Evidence(f"{h} -> {target}", f"connect {listener['address']}:{listener['port']} "
                                               f"({listener['iface']}): {e}") for h, e in zip(failed, errors)],
        fix=[f"Check {listener['iface']} on {target}: `ip -br addr show {listener['iface']}`, "
             f"`ethtool {listener['iface']}`, and the firewall; or set {setting} to an interface the hosts share."])


def suggest_interfaces(hosts: Mapping[str, Mapping[str, Any]], ok: Mapping[tuple[str, str, str], Mapping],
                       role: str) -> str | None:
    """A setting under which every host is reached: the selected interfaces where they work, elsewhere an
    interface on the same subnet as those (a renamed NIC), else one name that works everywhere."""
    names = sorted(hosts)
    if len(names) < 2:
        return None
    good = {t: [l for l in hosts[t].get("listeners", []) if l.get("port")
                and all(_reached(ok, h, t, l) for h in names if h != t)] for t in names}
    if not all(good.values()):
        return None
    chosen = {t: l for t in names if (l := _primary(hosts[t], role)) and l in good[t]}
    subnets = {_subnet(l) for l in chosen.values()} - {None}
    for t in names:
        chosen.setdefault(t, next((l for l in good[t] if _subnet(l) in subnets), None))
    if not all(chosen.values()):
        common = set.intersection(*({l["iface"] for l in good[t]} for t in names))
        if not common:
            return None
        chosen = {t: next(l for l in good[t] if l["iface"] == min(common)) for t in names}
    ifnames = list(dict.fromkeys(chosen[t]["iface"] for t in names))
    if role == "nccl":  # NCCL takes a list of prefixes: one value serves every host
        return f"`export NCCL_SOCKET_IFNAME={','.join(ifnames)}`"
    if len(ifnames) == 1:
        return f"`export GLOO_SOCKET_IFNAME={ifnames[0]}`"
    by_name: dict[str, list[str]] = defaultdict(list)  # Gloo takes exact names: one value per host
    for t in names:
        by_name[chosen[t]["iface"]].append(t)
    return "; ".join(f"on {', '.join(ts)}: `export GLOO_SOCKET_IFNAME={n}`" for n, ts in by_name.items())


def _subnet(listener: Mapping[str, Any]) -> str | None:
    try:
        return str(ipaddress.ip_interface(f"{listener['address']}/{listener.get('netmask')}").network)
    except (ValueError, TypeError):
        return None
