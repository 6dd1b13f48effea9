"""The link matrix's pure parts: the round-robin schedule and the judgement of measured links."""

from itertools import combinations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nccl_doctor.rules.links import Limits, Link, Node, best_of, judge_links, rate_text, suspects
from nccl_doctor.cluster.links import ring, round_robin

GB = 1e9
LIMITS = Limits()  # the dataclass defaults equal catalog/bench.toml's [links] (test below)


@given(st.integers(min_value=0, max_value=40))
def test_round_robin_meets_every_pair_once_in_disjoint_rounds(n):
    rounds = round_robin(n)
    assert len(rounds) == (0 if n < 2 else n - 1 if n % 2 == 0 else n)
    pairs = [p for r in rounds for p in r]
    assert sorted(pairs) == list(combinations(range(n), 2))  # every pair exactly once, as (i < j)
    for r in rounds:
        ends = [x for p in r for x in p]
        assert len(ends) == len(set(ends))  # disjoint: nobody plays twice in a round
        assert len(r) == n // 2  # everyone plays, except the one with the bye when n is odd


def test_round_robin_small_cases():
    assert round_robin(1) == [] and round_robin(2) == [[(0, 1)]]
    assert round_robin(4) == [[(0, 3), (1, 2)], [(0, 2), (1, 3)], [(0, 1), (2, 3)]]


def test_limit_defaults_are_the_catalog_values():
    assert Limits.load("nccl") == Limits()
    assert Limits.load("gloo") == Limits(slow_fraction=0.05, asymmetry=20.0, latency_floor_us=5000.0,
                                         line_fraction=0.05)  # Gloo's rates and latencies follow the CPU


def nodes(*names, line=None):
    return {n: Node(n, i, n, line, f"eth0 ({int(line * 1000)} Mb/s)" if line else "", "eth0")
            for i, n in enumerate(names)}


def mesh(names, rate=10 * GB, latency=5.0, **special):
    """Every pair at `rate` both ways; special={"h1-h3": (ab, ba, latency)} overrides a pair."""
    links = []
    for a, b in combinations(names, 2):
        ab, ba, lat = special.get(f"{a}-{b}", (rate, rate, latency))
        links.append(Link(a, b, ab, ba, lat))
    return links


HOSTS = ["h1", "h2", "h3", "h4"]


def test_healthy_matrix_with_noise_names_nobody():
    links = mesh(HOSTS, **{"h1-h2": (7 * GB, 12 * GB, 6.0), "h3-h4": (9 * GB, 6 * GB, 9.0)})
    assert judge_links(nodes(*HOSTS), links, LIMITS) == []
    assert judge_links(nodes(*HOSTS), [], LIMITS) == []


@pytest.mark.parametrize("n", [3, 4, 6])
def test_host_slow_on_every_link_is_the_one_named(n):
    names = [f"h{i}" for i in range(1, n + 1)]
    slow = {f"{a}-{b}": (0.5 * GB, 0.5 * GB, 5.0) for a, b in combinations(names, 2) if "h2" in (a, b)}
    [f] = judge_links(nodes(*names), mesh(names, **slow), LIMITS)
    assert (f.cause, f.hosts, f.ranks, f.severity.value) == ("slow-host", ["h2"], [1], "error")
    assert len(f.evidence) == n - 1 and "transmit" not in f.message  # slow both ways


def test_slow_host_that_only_sends_slowly_is_named_with_its_transmit_side():
    slow = {"h1-h3": (10 * GB, 2.5e6, 5.0), "h2-h3": (10 * GB, 2.5e6, 5.0), "h3-h4": (2.5e6, 10 * GB, 5.0)}
    [f] = judge_links(nodes(*HOSTS), mesh(HOSTS, **slow), LIMITS)
    assert (f.cause, f.hosts) == ("slow-host", ["h3"])
    assert "sending from it runs at 2.5 MB/s, receiving at 10 GB/s: the slowdown is on its transmit side" in f.message
    assert "tc qdisc show dev eth0" in f.fix[0]


def test_one_slow_link_names_both_hosts_not_a_host():
    [f] = judge_links(nodes(*HOSTS), mesh(HOSTS, **{"h2-h4": (1 * GB, 1 * GB, 5.0)}), LIMITS)
    assert (f.cause, f.hosts, f.ranks) == ("slow-link", ["h2", "h4"], [1, 3])
    assert "h2 <-> h4" in f.message and "1 GB/s against 10 GB/s" in f.message


def test_two_hosts_cannot_be_told_apart_without_a_line_rate():
    assert judge_links(nodes("a", "b"), [Link("a", "b", 1e6, 1e6, 5.0)], LIMITS) == []
    [f] = judge_links(nodes("a", "b", line=100), [Link("a", "b", 1e6, 1e6, 5.0)], LIMITS)
    assert f.cause == "below-line-rate" and f.severity.value == "warning"
    assert "worst a <-> b: 1 MB/s, 0.008% of 100 Gbit/s (eth0 (100000 Mb/s))" in f.message


def test_asymmetric_link_is_a_warning_naming_the_slow_direction():
    [f] = judge_links(nodes(*HOSTS), mesh(HOSTS, **{"h1-h4": (10 * GB, 2 * GB, 5.0)}), LIMITS)
    # 2 GB/s is also far below 10: the slow direction makes the link slow, which says more
    assert f.cause == "slow-link"
    [f] = judge_links(nodes(*HOSTS), mesh(HOSTS, **{"h1-h4": (16 * GB, 5 * GB, 5.0)}), LIMITS)
    assert (f.cause, f.severity.value, f.hosts) == ("asymmetric-link", "warning", ["h1", "h4"])
    assert f.message.startswith("h4 -> h1 runs at 5 GB/s, 3.2x slower")


def test_latency_far_above_the_others_makes_a_link_slow():
    [f] = judge_links(nodes(*HOSTS), mesh(HOSTS, **{"h1-h2": (10 * GB, 10 * GB, 80.0)}), LIMITS)
    assert f.cause == "slow-link" and "latency 80 us against 5 us" in f.message
    # a few microseconds more is scheduling noise, not a finding, whatever the ratio
    assert judge_links(nodes(*HOSTS), mesh(HOSTS, **{"h1-h2": (10 * GB, 10 * GB, 25.0)}), LIMITS) == []


def test_links_inside_one_host_are_not_held_to_a_nic_line_rate():
    two = {"x:0": Node("x:0", 0, "x", 100, "eth0"), "x:1": Node("x:1", 1, "x", 100, "eth0")}
    assert judge_links(two, [Link("x:0", "x:1", 1e6, 1e6, 5.0)], LIMITS) == []


def test_suspects_and_best_of():
    links = mesh(HOSTS, **{"h2-h4": (1 * GB, 10 * GB, 5.0)})
    [s] = suspects(links, LIMITS)
    assert (s.a, s.b) == ("h2", "h4")
    again = best_of(s, Link("h2", "h4", 9 * GB, 8 * GB, 7.0))
    assert (again.ab, again.ba, again.latency_us) == (9 * GB, 10 * GB, 5.0)


def test_rate_text():
    assert [rate_text(x) for x in (2.5e6, 1.234e9, 999)] == ["2.5 MB/s", "1.23 GB/s", "0.999 KB/s"]


@given(st.integers(min_value=0, max_value=64))
def test_ring_gives_every_node_two_links_in_at_most_three_disjoint_rounds(n):
    rounds = ring(n)
    pairs = [p for r in rounds for p in r]
    assert len(rounds) <= 3 and len(pairs) == len(set(pairs)) == (0 if n < 2 else 1 if n == 2 else n)
    for r in rounds:
        ends = [x for p in r for x in p]
        assert len(ends) == len(set(ends))
    if n > 2:
        assert all(sum(i in p for p in pairs) == 2 for i in range(n))


def test_two_hosts_one_slow_direction_names_the_direction():
    """With two hosts, the slow direction is all that can be told: against the other direction and the line rate."""
    two = nodes("h1", "h2", line=10)
    [f] = judge_links(two, [Link("h1", "h2", 1.1 * GB, 3.75e6, 40.0)], Limits.load("gloo"))
    assert (f.cause, f.severity.value, f.hosts) == ("slow-link", "error", ["h1", "h2"])
    assert "slow from h2 to h1" in f.message and "h2's transmit side, h1's receive side" in f.message
    [f] = judge_links(two, [Link("h1", "h2", 3.75e6, 3.9e6, 40.0)], Limits.load("gloo"))
    assert (f.cause, f.severity.value) == ("below-line-rate", "warning") and "two hosts" in f.message


def test_one_slow_direction_among_many_hosts_is_that_path():
    slow = {"h1-h3": (10 * GB, 0.2 * GB, 5.0)}
    [f] = judge_links(nodes(*HOSTS), mesh(HOSTS, **slow), LIMITS)
    assert (f.cause, f.hosts) == ("slow-link", ["h1", "h3"]) and "slow from h3 to h1" in f.message
