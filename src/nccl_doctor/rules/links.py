"""Measured links -> findings: which host, link or direction is slow. One rule for `check`'s bandwidth
sample and `bench --matrix`, for any number of hosts.

A pure function of the measurements: nodes (a host's first rank, or any rank) and links between them,
each measured both ways. A direction is slow when it runs far below the healthy reference, or far below
the line rate its hardware reports while other directions do not. The reference is the median, over the
nodes, of each node's best link: a node's best link is healthy unless the node itself is slow, so the
reference holds however many links one bad host touches (a median of all links sinks as soon as that host
touches half of them, as in a ring of three). Slowness is then put where it belongs: a host whose every
link is slow in the direction it sends (or receives, or both), else the link, else the one direction.
With two hosts only the direction can be told, and only against the other direction or the line rate.
Thresholds are data: catalog/bench.toml.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Callable, Iterable

from ..catalog import load_toml
from ..model import Evidence, Finding
from ..roads import emits


@dataclass(frozen=True)
class Node:
    """One end of the links: a host's first rank (host scope) or any rank (rank scope)."""

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

    def sending(self, node: str) -> float:
        return self.ab if node == self.a else self.ba

    def receiving(self, node: str) -> float:
        return self.ba if node == self.a else self.ab

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
        """The backend's thresholds (catalog/bench.toml); an unknown backend gets the most lenient."""
        data = load_toml("bench.toml")
        return cls(**data.get(backend, data["gloo"]))


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


@dataclass
class Verdicts:
    """Why each direction (a, b) = a sends to b is slow, against the references of one set of links."""

    nodes: dict[str, Node]
    links: list[Link]
    limits: Limits

    def __post_init__(self) -> None:
        self.bw_ref = reference(self.links, lambda l: l.rate, max)
        self.lat_ref = reference(self.links, lambda l: l.latency_us, min)
        below_line = {d for l in self.links for d in _directions(l) if self._below_line(l, *d)}
        uniform = len(below_line) == 2 * len(self.links)  # every path is slow: nothing to single out
        self.slow: dict[tuple[str, str], str] = {}
        for link in self.links:
            late = self._late(link)
            for d in _directions(link):
                why = [w for w in (self._below_ref(link, *d), "" if uniform or d not in below_line
                                   else self._line_words(link, *d), late) if w]
                if why:
                    self.slow[d] = "; ".join(why)

    def _below_ref(self, link: Link, a: str, b: str) -> str:
        rate = link.sending(a)
        if rate < self.limits.slow_fraction * self.bw_ref:
            return f"{rate_text(rate)} against {rate_text(self.bw_ref)} for healthy links"
        return ""

    def _below_line(self, link: Link, a: str, b: str) -> bool:
        line = _line_bytes(self.nodes, link)
        return line is not None and link.sending(a) < self.limits.line_fraction * line

    def _line_words(self, link: Link, a: str, b: str) -> str:
        line = _line_bytes(self.nodes, link) or 0.0
        return f"{rate_text(link.sending(a))}, {link.sending(a) / line:.1%} of the {line * 8 / 1e9:g} Gbit/s line rate"

    def _late(self, link: Link) -> str:
        lat, ref, limits = link.latency_us, self.lat_ref, self.limits
        if lat > limits.latency_factor * ref and lat - ref > limits.latency_floor_us:
            return f"latency {lat:.0f} us against {ref:.0f} us"
        return ""

    def link_is_slow(self, link: Link) -> bool:
        return any(d in self.slow for d in _directions(link))


def _directions(link: Link) -> tuple[tuple[str, str], tuple[str, str]]:
    return (link.a, link.b), (link.b, link.a)


def suspects(links: list[Link], limits: Limits, nodes: dict[str, Node] | None = None) -> list[Link]:
    """Links that look slow or asymmetric: worth measuring again, alone, before anyone is blamed."""
    if not links:
        return []
    verdicts = Verdicts(nodes or {}, links, limits)
    return [l for l in links if verdicts.link_is_slow(l) or l.skew >= limits.asymmetry]


def best_of(first: Link, again: Link) -> Link:
    """Two measurements of one link: load from elsewhere only ever slows one down, so keep the better."""
    return Link(first.a, first.b, max(first.ab, again.ab), max(first.ba, again.ba),
                min(first.latency_us, again.latency_us))


def judge_links(nodes: dict[str, Node], links: list[Link], limits: Limits) -> list[Finding]:
    """Slow hosts first (every link of theirs slow in one direction or both), then the slow links and
    directions they do not explain, then asymmetric links, then links far below their line rate."""
    if not links:
        return []
    v = Verdicts(nodes, links, limits)
    findings, blamed = [], set()
    for name in sorted(nodes):
        mine = [l for l in links if name in l.ends()]
        peers = [l.b if l.a == name else l.a for l in mine]
        sends = len(mine) >= 2 and all((name, p) in v.slow for p in peers)
        gets = len(mine) >= 2 and all((p, name) in v.slow for p in peers)
        if sends or gets:
            findings.append(_slow_host(nodes[name], mine, v.bw_ref, sends, gets))
            blamed |= {(name, p) for p in peers if sends} | {(p, name) for p in peers if gets}
    for link in links:
        unexplained = [d for d in _directions(link) if d in v.slow and d not in blamed]
        if unexplained:
            findings.append(_slow_link(nodes, link, unexplained, v, two_hosts=len(nodes) == 2))
    findings += [_asymmetric(nodes, l) for l in links if not v.link_is_slow(l) and l.skew >= limits.asymmetry]
    below = [l for l in links if not v.link_is_slow(l) and _line_share(nodes, l) is not None
             and _line_share(nodes, l) < limits.line_fraction]
    if below:
        findings.append(_below_line_rate(nodes, below, len(links), limits))
    return findings


def _evidence(links: Iterable[Link]) -> list[Evidence]:
    return [Evidence("link test", l.text()) for l in links]


def _checks_on(node: Node, peer: Node | None = None) -> str:
    if peer is not None and peer.host == node.host:  # two ranks of one host: GPUs' links, or the CPU
        return (f"Inside {node.host}: `nvidia-smi topo -m` and `nvidia-smi nvlink --status` for the GPUs' path, "
                f"and `top` for CPU contention between the ranks.")
    iface = node.iface or "IFACE"
    return (f"On {node.host}: `tc qdisc show dev {iface}` (traffic shaping), `ethtool {iface}` (speed, duplex), "
            f"`ip -s link show {iface}` (errors, drops).")


@emits("slow-host")
def _slow_host(node: Node, mine: list[Link], bw_ref: float, sends: bool, gets: bool) -> Finding:
    """A host slow on all of its links, with the side (transmit or receive) the measurements point at."""
    sending = statistics.median(l.sending(node.label) for l in mine)
    receiving = statistics.median(l.receiving(node.label) for l in mine)
    typical = statistics.median(l.rate for l in mine)
    message = f"{node.label} is slow on all {len(mine)} of its links: {rate_text(typical)} against " \
              f"{rate_text(bw_ref)} for healthy links"
    if sends != gets:
        side = "transmit" if sends else "receive"
        message += f"; sending from it runs at {rate_text(sending)}, receiving at {rate_text(receiving)}: " \
                   f"the slowdown is on its {side} side"
    return Finding("slow-host", "error", message, confidence=0.85, ranks=[node.rank], hosts=[node.host],
                   evidence=_evidence(mine), fix=[_checks_on(node)])


@emits("slow-link")
def _slow_link(nodes: dict[str, Node], link: Link, slow: list[tuple[str, str]], v: Verdicts,
               two_hosts: bool) -> Finding:
    """One slow link between two hosts, and in which direction, when its hosts are fine on their other links."""
    a, b = nodes[link.a], nodes[link.b]
    if len(slow) == 2:
        message = f"the link {link.a} <-> {link.b} is slow: {v.slow[slow[0]]}"
        if two_hosts:
            message += "; with two hosts a slow host cannot be told from a slow link (a third host would tell)"
        checks = [_checks_on(a, b)]
    else:
        (src, dst), = slow
        message = (f"the link {link.a} <-> {link.b} is slow from {src} to {dst}: {v.slow[(src, dst)]}, while "
                   f"{dst} -> {src} runs at {rate_text(link.sending(dst))}")
        message += (f": {src}'s transmit side, {dst}'s receive side or the path between (a third host would tell)"
                    if two_hosts else f"; {src} sends and {dst} receives well on their other links: this path, "
                                      f"this way")
        checks = [_checks_on(nodes[src], nodes[dst])]
    return Finding("slow-link", "error", message, confidence=0.8, ranks=[a.rank, b.rank],
                   hosts=sorted({a.host, b.host}), evidence=_evidence([link]),
                   fix=[f"Measure that pair alone: `nccl-doctor bench --matrix` on {a.host} and {b.host} only; "
                        f"then check the cable, switch ports and routes between them.", *checks])


@emits("asymmetric-link")
def _asymmetric(nodes: dict[str, Node], link: Link) -> Finding:
    """A link much slower in one direction than in the other."""
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
    a, b = nodes.get(link.a), nodes.get(link.b)
    if a is None or b is None or a.host == b.host or not a.line_gbps or not b.line_gbps:
        return None  # inside a host (NVLink, PCIe) or unknown: no rate to compare with
    return min(a.line_gbps, b.line_gbps) * 1e9 / 8


def _line_share(nodes: dict[str, Node], link: Link) -> float | None:
    line = _line_bytes(nodes, link)
    return max(link.ab, link.ba) / line if line else None


@emits("below-line-rate")
def _below_line_rate(nodes: dict[str, Node], below: list[Link], total: int, limits: Limits) -> Finding:
    """Links far below the line rate the NICs report, although no host or link stands out."""
    worst = min(below, key=lambda l: _line_share(nodes, l) or 0.0)
    ends = [nodes[worst.a], nodes[worst.b]]
    slower = min(ends, key=lambda n: n.line_gbps or 0.0)
    share = _line_share(nodes, worst) or 0.0
    message = (f"{len(below)} of {total} links reach less than {limits.line_fraction:.0%} of the line rate their "
               f"hardware reports; worst {worst.a} <-> {worst.b}: {rate_text(max(worst.ab, worst.ba))}, "
               f"{share * 100:.2g}% of {slower.line_gbps:g} Gbit/s ({slower.via})")
    if len(nodes) == 2:
        message += "; with two hosts a slow host cannot be told from a slow link (a third host would tell)"
    involved = {nodes[n] for l in below for n in l.ends()}
    return Finding("below-line-rate", "warning", message, confidence=0.6,
                   ranks=sorted(n.rank for n in involved), hosts=sorted({n.host for n in involved}),
                   evidence=[Evidence("link test", f"{l.text()}; line rate {_line_bytes(nodes, l) * 8 / 1e9:g} "
                                                   f"Gbit/s") for l in below])
