"""The link matrix's judgement: measured pairs -> findings (slow host, slow link, asymmetric link, line rate).

A pure function of the measurements. The reference a link is compared with is the median, over the
nodes, of each node's best link: a node's best link is healthy unless the node itself is slow, so the
reference stays healthy while most nodes are (a plain median of all links would sink as soon as one
host out of three or four is slow on both directions). Thresholds are data: catalog/bench.toml.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Callable, Iterable

from ...catalog import load_toml
from ...model import Evidence, Finding


@dataclass(frozen=True)
class Node:
    """One end of the matrix: a host's first rank (--matrix) or any rank (--matrix-ranks)."""

    label: str
    rank: int
    host: str
    line_gbps: float | None = None  # what its network hardware reports, Gbit/s
    via: str = ""  # which hardware: "data0 (10000 Mb/s)", "mlx5_0:1 (400 Gb/s)"
    iface: str | None = None


@dataclass(frozen=True)
class Link:
    a: str  # node labels
    b: str
    ab: float  # bytes/s from a to b
    ba: float  # bytes/s from b to a
    latency_us: float  # one way, half the median round trip of a small message

    @property
    def rate(self) -> float:
        """What the pair sustains: its slower direction."""
        return min(self.ab, self.ba)

    @property
    def skew(self) -> float:
        return max(self.ab, self.ba) / self.rate if self.rate > 0 else float("inf")

    def ends(self) -> tuple[str, str]:
        return self.a, self.b

    def text(self) -> str:
        return (f"{self.a} -> {self.b} {rate_text(self.ab)}, {self.b} -> {self.a} {rate_text(self.ba)}, "
                f"latency {self.latency_us:.0f} us")


@dataclass(frozen=True)
class Limits:
    slow_fraction: float = 0.5
    asymmetry: float = 3.0
    latency_factor: float = 8.0
    latency_floor_us: float = 25.0
    line_fraction: float = 0.4

    @classmethod
    def load(cls, backend: str) -> Limits:
        data = load_toml("bench.toml")
        line = data["line_rate"]
        return cls(**data["links"], line_fraction=line.get(backend, min(line.values())))


def rate_text(bytes_per_s: float) -> str:
    for unit, scale in (("GB/s", 1e9), ("MB/s", 1e6)):
        if bytes_per_s >= scale:
            return f"{bytes_per_s / scale:.3g} {unit}"
    return f"{bytes_per_s / 1e3:.3g} KB/s"


def reference(links: list[Link], value: Callable[[Link], float], best: Callable[[Iterable[float]], float]) -> float:
    """Median over the nodes of each node's best link by `value`."""
    per_node: dict[str, list[float]] = {}
    for link in links:
        for node in link.ends():
            per_node.setdefault(node, []).append(value(link))
    return statistics.median(best(values) for values in per_node.values())


def suspects(links: list[Link], limits: Limits) -> list[Link]:
    """Links that look slow or asymmetric: worth measuring again, alone, before anyone is blamed."""
    if not links:
        return []
    bw_ref = reference(links, lambda l: l.rate, max)
    lat_ref = reference(links, lambda l: l.latency_us, min)
    return [l for l in links if _why_slow(l, bw_ref, lat_ref, limits) or l.skew >= limits.asymmetry]


def best_of(first: Link, again: Link) -> Link:
    """Two measurements of one link: load from elsewhere only ever slows one down, so keep the better."""
    return Link(first.a, first.b, max(first.ab, again.ab), max(first.ba, again.ba),
                min(first.latency_us, again.latency_us))


def judge_links(nodes: dict[str, Node], links: list[Link], limits: Limits) -> list[Finding]:
    """Slow hosts first (every link of theirs is slow), then slow links they do not explain, then
    asymmetric links, then links far below the line rate the hardware reports."""
    if not links:
        return []
    bw_ref = reference(links, lambda l: l.rate, max)
    lat_ref = reference(links, lambda l: l.latency_us, min)
    slow = {l: _why_slow(l, bw_ref, lat_ref, limits) for l in links}
    slow = {l: why for l, why in slow.items() if why}
    slow_nodes = [n for n in sorted(nodes) if _all_slow(n, links, slow)]
    findings = [_slow_host(nodes[n], [l for l in links if n in l.ends()], bw_ref, limits) for n in slow_nodes]
    for link, why in slow.items():
        if not set(link.ends()) & set(slow_nodes):
            findings.append(_slow_link(nodes, link, why))
    asymmetric = [l for l in links if l not in slow and l.skew >= limits.asymmetry]
    findings += [_asymmetric(nodes, l) for l in asymmetric]
    below = [l for l in links if l not in slow and _line_share(nodes, l) is not None
             and _line_share(nodes, l) < limits.line_fraction]
    if below:
        findings.append(_below_line_rate(nodes, below, len(links), limits))
    return findings


def _why_slow(link: Link, bw_ref: float, lat_ref: float, limits: Limits) -> str:
    reasons = []
    if link.rate < limits.slow_fraction * bw_ref:
        reasons.append(f"{rate_text(link.rate)} against {rate_text(bw_ref)} for healthy links")
    if link.latency_us > limits.latency_factor * lat_ref and link.latency_us - lat_ref > limits.latency_floor_us:
        reasons.append(f"latency {link.latency_us:.0f} us against {lat_ref:.0f} us")
    return "; ".join(reasons)


def _all_slow(node: str, links: list[Link], slow: dict[Link, str]) -> bool:
    mine = [l for l in links if node in l.ends()]
    return len(mine) >= 2 and all(l in slow for l in mine)


def _evidence(links: Iterable[Link]) -> list[Evidence]:
    return [Evidence("link matrix", l.text()) for l in links]


def _checks_on(node: Node, peer: Node | None = None) -> str:
    if peer is not None and peer.host == node.host:  # two ranks of one host: GPUs' links, or the CPU
        return (f"Inside {node.host}: `nvidia-smi topo -m` and `nvidia-smi nvlink --status` for the GPUs' path, "
                f"and `top` for CPU contention between the ranks.")
    iface = node.iface or "IFACE"
    return (f"On {node.host}: `tc qdisc show dev {iface}` (traffic shaping), `ethtool {iface}` (speed, duplex), "
            f"`ip -s link show {iface}` (errors, drops).")


def _slow_host(node: Node, mine: list[Link], bw_ref: float, limits: Limits) -> Finding:
    sending = statistics.median(l.ab if l.a == node.label else l.ba for l in mine)
    receiving = statistics.median(l.ba if l.a == node.label else l.ab for l in mine)
    typical = statistics.median(l.rate for l in mine)
    message = f"{node.label} is slow on all {len(mine)} of its links: {rate_text(typical)} against " \
              f"{rate_text(bw_ref)} for healthy links"
    if max(sending, receiving) >= limits.asymmetry * min(sending, receiving):
        side = "transmit" if sending < receiving else "receive"
        message += f"; sending from it runs at {rate_text(sending)}, receiving at {rate_text(receiving)}: " \
                   f"the slowdown is on its {side} side"
    return Finding("slow-host", "error", message, confidence=0.85, ranks=[node.rank], hosts=[node.host],
                   evidence=_evidence(mine), fix=[_checks_on(node)])


def _slow_link(nodes: dict[str, Node], link: Link, why: str) -> Finding:
    a, b = nodes[link.a], nodes[link.b]
    return Finding("slow-link", "error", f"the link {link.a} <-> {link.b} is slow: {why}", confidence=0.8,
                   ranks=[a.rank, b.rank], hosts=sorted({a.host, b.host}), evidence=_evidence([link]),
                   fix=[f"Measure that pair alone: `nccl-doctor bench --matrix` on {a.host} and {b.host} only; "
                        f"then check the cable, switch ports and routes between them.", _checks_on(a, b)])


def _asymmetric(nodes: dict[str, Node], link: Link) -> Finding:
    sender, receiver = (link.a, link.b) if link.ab < link.ba else (link.b, link.a)
    slow_rate, fast_rate = min(link.ab, link.ba), max(link.ab, link.ba)
    node, peer = nodes[sender], nodes[receiver]
    return Finding("asymmetric-link", "warning",
                   f"{sender} -> {receiver} runs at {rate_text(slow_rate)}, {link.skew:.1f}x slower than "
                   f"{receiver} -> {sender} ({rate_text(fast_rate)})", confidence=0.7,
                   ranks=[nodes[link.a].rank, nodes[link.b].rank],
                   hosts=sorted({nodes[link.a].host, nodes[link.b].host}), evidence=_evidence([link]),
                   fix=[_checks_on(node, peer)])


def _line_bytes(nodes: dict[str, Node], link: Link) -> float | None:
    a, b = nodes[link.a], nodes[link.b]
    if a.host == b.host or not a.line_gbps or not b.line_gbps:
        return None  # inside a host (NVLink, PCIe) or unknown: no rate to compare with
    return min(a.line_gbps, b.line_gbps) * 1e9 / 8


def _line_share(nodes: dict[str, Node], link: Link) -> float | None:
    line = _line_bytes(nodes, link)
    return max(link.ab, link.ba) / line if line else None


def _below_line_rate(nodes: dict[str, Node], below: list[Link], total: int, limits: Limits) -> Finding:
    worst = min(below, key=lambda l: _line_share(nodes, l) or 0.0)
    ends = [nodes[worst.a], nodes[worst.b]]
    slower = min(ends, key=lambda n: n.line_gbps or 0.0)
    share = _line_share(nodes, worst) or 0.0
    message = (f"{len(below)} of {total} links reach less than {limits.line_fraction:.0%} of the line rate their "
               f"hardware reports; worst {worst.a} <-> {worst.b}: {rate_text(max(worst.ab, worst.ba))}, "
               f"{share * 100:.2g}% of {slower.line_gbps:g} Gbit/s ({slower.via})")
    involved = {nodes[n] for l in below for n in l.ends()}
    return Finding("below-line-rate", "warning", message, confidence=0.6,
                   ranks=sorted(n.rank for n in involved), hosts=sorted({n.host for n in involved}),
                   evidence=[Evidence("link matrix", f"{l.text()}; line rate {_line_bytes(nodes, l) * 8 / 1e9:g} "
                                                     f"Gbit/s") for l in below])
