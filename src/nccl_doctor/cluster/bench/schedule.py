"""Which pairs meet when: a round-robin tournament (the circle method) over the nodes of the link matrix.

N nodes meet every other node once in N-1 rounds (N rounds with a bye when N is odd); the pairs of a
round are disjoint, so they run at the same time without sharing an endpoint.
"""

from __future__ import annotations

Pair = tuple[int, int]


def round_robin(n: int) -> list[list[Pair]]:
    """Rounds of disjoint pairs (i, j), i < j, covering every pair of range(n) exactly once."""
    if n < 2:
        return []
    players: list[int | None] = list(range(n)) + ([None] if n % 2 else [])  # None: the bye
    size = len(players)
    rounds = []
    for _ in range(size - 1):
        pairs = [(players[k], players[size - 1 - k]) for k in range(size // 2)]
        rounds.append(sorted((min(a, b), max(a, b)) for a, b in pairs if a is not None and b is not None))
        players = [players[0], players[-1], *players[1:-1]]  # keep the first in place, turn the rest
    return rounds
