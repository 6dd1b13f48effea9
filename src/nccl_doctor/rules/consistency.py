"""Cross-rank comparison: facts gathered from every rank -> findings that name the odd hosts and ranks.

Pure functions of JSON-able facts (what `check` gathers on rank 0), so they are tested without any
process group. What is compared, and how severe a difference is, lives in catalog/consistency.toml.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import statistics
from collections import defaultdict
from functools import cache
from typing import Any, Iterable, Mapping

from ..catalog import load_toml
from ..model import Evidence, Finding

UNKNOWN = object()  # a fact a rank could not observe: left out of comparisons


@cache
def rules() -> dict[str, Any]:
    return load_toml("consistency.toml")


def ranks_text(ranks: Iterable[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> '0-2,5,7-8'."""
    out, run = [], []
    for r in sorted(set(ranks)):
        if run and r == run[-1] + 1:
            run.append(r)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [r]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


def where(ranks: Iterable[int], host_of: Mapping[int, str]) -> str:
    ranks = sorted(set(ranks))
    hosts = sorted({host_of.get(r, "?") for r in ranks})
    return f"{', '.join(hosts)} (rank{'s' if len(ranks) > 1 else ''} {ranks_text(ranks)})"


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


def merge_rank_findings(per_rank: Mapping[int, list[Finding]]) -> list[Finding]:
    """The same finding seen on many ranks (same cause and message) becomes one finding naming them all."""
    merged: dict[tuple[str, str], Finding] = {}
    for rank in sorted(per_rank):
        for f in per_rank[rank]:
            key = (f.cause, f.message)
            if key in merged:
                merged[key].ranks.extend(r for r in f.ranks if r not in merged[key].ranks)
                merged[key].hosts.extend(h for h in f.hosts if h not in merged[key].hosts)
            else:
                merged[key] = f
    return list(merged.values())


# ------------------------------------------------------------------ interfaces (before the backend starts)

def interface_findings(facts: Mapping[int, Mapping[str, Any]], host_of: Mapping[int, str]) -> list[Finding]:
    """NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME that select nothing on some ranks, and why there."""
    from ..probe.network import gloo_select_interfaces, nccl_select_interfaces

    nccl_empty, gloo_missing, names_by_rank = {}, {}, {}
    for rank, f in facts.items():
        env, ifaces = dig(f, "environment.variables"), dig(f, "network.interfaces")
        if not isinstance(env, Mapping) or not isinstance(ifaces, list):
            continue
        names_by_rank[rank] = {i["name"]: i for i in ifaces}
        nccl = env.get("NCCL_SOCKET_IFNAME")
        if nccl and len(nccl) > 1 and not nccl_select_interfaces(nccl, ifaces, env.get("NCCL_SOCKET_FAMILY")):
            nccl_empty[rank] = nccl
        gloo = env.get("GLOO_SOCKET_IFNAME")
        if gloo and len(gloo) > 1:
            found = {i["name"] for i in gloo_select_interfaces(gloo, ifaces)}
            if missing := [n for n in gloo.split(",") if n not in found]:
                gloo_missing[rank] = (gloo, missing)
    findings = []
    for rank, spec in nccl_empty.items():
        findings.append(_nccl_nothing(rank, spec, names_by_rank, host_of, ok_elsewhere=len(nccl_empty) < len(facts)))
    for rank, (spec, missing) in gloo_missing.items():
        have = ", ".join(n for n, i in names_by_rank[rank].items() if n != "lo" and i.get("addresses")) or "none"
        findings.append(Finding(
            "gloo-ifname-no-match", "error",
            f"GLOO_SOCKET_IFNAME={spec} on rank {rank} ({host_of.get(rank, '?')}): no interface named "
            f"{', '.join(missing)} with an address there (it has: {have})",
            confidence=0.95, ranks=[rank], hosts=[host_of.get(rank, "?")],
            evidence=[Evidence(f"rank {rank} environment", f"GLOO_SOCKET_IFNAME={spec}"),
                      Evidence(f"rank {rank} interfaces", have)],
            fix=[f"On {host_of.get(rank, '?')} set GLOO_SOCKET_IFNAME to one of: {have}."]))
    return merge_rank_findings({0: findings})


def _nccl_nothing(rank: int, spec: str, names: Mapping[int, dict], host_of: Mapping[int, str],
                  ok_elsewhere: bool) -> Finding:
    host, mine = host_of.get(rank, "?"), names.get(rank, {})
    wanted = [n.lstrip("^=") for n in spec.lstrip("^=").split(",")]
    down = [n for n in wanted if n in mine and not (mine[n].get("up") and mine[n].get("running", True))]
    have = ", ".join(n for n in mine if n != "lo") or "none"
    evidence = [Evidence(f"rank {rank} environment", f"NCCL_SOCKET_IFNAME={spec}"),
                Evidence(f"rank {rank} interfaces", have)]
    if down:
        return Finding("no-usable-interface", "error",
                       f"NCCL_SOCKET_IFNAME={spec} on {host} (rank {rank}) names {', '.join(down)}, which is down "
                       f"(no link or not up)", confidence=0.9, ranks=[rank], hosts=[host], evidence=evidence,
                       fix=[f"Bring the link up on {host}: `ip link set {down[0]} up`, check the cable/port "
                            f"(`ethtool {down[0]}`), or exclude {host} until fixed."])
    if ok_elsewhere:
        return Finding("ifname-differs-between-hosts", "error",
                       f"NCCL_SOCKET_IFNAME={spec} matches no interface on {host} (rank {rank}), though it does "
                       f"on other hosts; {host} has: {have}", confidence=0.95, ranks=[rank], hosts=[host],
                       evidence=evidence)
    return Finding("socket-ifname-no-match", "error",
                   f"NCCL_SOCKET_IFNAME={spec} matches no interface on {host} (rank {rank}); it has: {have}",
                   confidence=0.95, ranks=[rank], hosts=[host], evidence=evidence,
                   fix=[f"Use a name that exists, e.g. `export NCCL_SOCKET_IFNAME={_first_real(mine)}`."])


def _first_real(ifaces: Mapping[str, dict]) -> str:
    return next((n for n, i in ifaces.items() if n != "lo" and i.get("up")), "eth0")


# ------------------------------------------------------------------ device binding

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
            "duplicate-gpu", "error", f"ranks {ranks_text(ranks)} on {host} all use GPU {uuid}{same_mask}",
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


def _unreachable(role: str, target: str, listener: Mapping[str, Any], failed: list[str],
                 ok: Mapping[tuple[str, str, str], Mapping], names: list[str]) -> Finding:
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


# ------------------------------------------------------------------ bandwidth sample

def bandwidth_findings(links: list[Mapping[str, Any]]) -> list[Finding]:
    """links = [{"a": host, "b": host, "gbps": float}] -> a host slow on all its links, or one slow link."""
    cfg = rules()["bandwidth"]
    hosts = sorted({h for link in links for h in (link["a"], link["b"])})
    if len(hosts) < cfg["min_hosts"] or not links:
        return []
    median = statistics.median(link["gbps"] for link in links)
    slow = [link for link in links if link["gbps"] < cfg["slow_fraction"] * median]
    findings = []
    for host in hosts:
        mine = [link for link in links if host in (link["a"], link["b"])]
        if mine and all(link in slow for link in mine):
            findings.append(Finding(
                "slow-host", "warning",
                f"{host} is slow on every link: {', '.join(f'{link_bw:.2f}' for link_bw in (l['gbps'] for l in mine))} "
                f"Gbit/s against a "
                f"median of {median:.2f} Gbit/s", confidence=0.8, hosts=[host],
                evidence=[Evidence(f"{l['a']} <-> {l['b']}", f"{l['gbps']:.2f} Gbit/s") for l in mine]))
    blamed = {f.hosts[0] for f in findings}
    for link in slow:
        if not {link["a"], link["b"]} & blamed:
            findings.append(Finding(
                "slow-link", "warning",
                f"the link {link['a']} <-> {link['b']} runs at {link['gbps']:.2f} Gbit/s, median {median:.2f}",
                confidence=0.7, hosts=[link["a"], link["b"]],
                evidence=[Evidence(f"{link['a']} <-> {link['b']}", f"{link['gbps']:.2f} Gbit/s")]))
    return findings
