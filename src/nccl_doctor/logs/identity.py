"""Which process wrote a line: keys (host and pid, rank, per-rank file, host) united into processes.

A line names its writer in several ways at once (`[rank3]:node-1:4242:4290 [3]` says rank 3 and pid 4242
on node-1); each way is a key, and keys seen together belong to one process (union-find). Facts are kept per
key while reading and merged per process at the end, when ranks the lines never printed are inferred
(from comm init lines, or from the GPU index on a single host).
"""

from __future__ import annotations

from typing import Any

from .attribution import LineInfo
from .records import CommRank, Key, Proc


class Identities:
    """Keys seen so far, their facts (one Proc per key) and which keys belong together."""

    def __init__(self) -> None:
        self.parent: dict[Key, Key] = {}
        self.procs: dict[Key, Proc] = {}
        self.seen: dict[tuple[Any, ...], Key] = {}  # who wrote a line -> its key (identify() is idempotent)

    def find(self, k: Key) -> Key:
        parent = self.parent.setdefault(k, k)
        while parent != k:
            grand = self.parent[parent]
            self.parent[k] = grand
            k, parent = parent, grand
        return k

    def union(self, a: Key, b: Key) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[rb] = ra

    def proc(self, key: Key) -> Proc:
        proc = self.procs.get(key)
        if proc is None:
            proc = self.procs[key] = Proc(keys={key})
        return proc

    def identify(self, source: str, file_rank: int | None, info: LineInfo) -> Key:
        """The key of the line's writer (its first way of naming it), its other keys united with it."""
        who = (source, file_rank, info.host, info.pid, info.rank, info.dev)
        known = self.seen.get(who)
        if known is not None:  # the same writer again: everything below is already recorded
            return known
        self.seen[who] = first = self._identify(source, file_rank, info)
        return first

    def _identify(self, source: str, file_rank: int | None, info: LineInfo) -> Key:
        keys: list[Key] = []
        if info.pid is not None:
            keys.append(("hp", info.host or "?", info.pid))
        rank = info.rank if info.rank is not None else file_rank
        if rank is not None:
            keys.append(("rank", rank))
        if file_rank is not None and rank == file_rank:
            keys.append(("src", source))
        if not keys:
            keys.append(("src", source) if info.host is None else ("host", info.host))
        first = keys[0]
        self.find(first)
        for other in keys[1:]:
            self.union(first, other)
        proc = self.proc(first)
        proc.sources.add(source)
        if rank is not None:
            proc.ranks.add(rank)
        if info.host:
            proc.hosts.add(info.host)
        if info.pid is not None:
            proc.pids.add(info.pid)
            if info.dev is not None:
                proc.add_dev(info.dev)
        return first

    def link_rank_host(self, caps: dict[str, str]) -> None:
        """A line that says which host (and pid) runs a rank (nccl-tests' device lines)."""
        rank = int(caps["rank"])
        host = caps.get("host")
        hp: Key | None = ("hp", host or "?", int(caps["pid"])) if caps.get("pid") else None
        rank_key: Key = ("rank", rank)
        proc = self.proc(rank_key)
        proc.ranks.add(rank)
        if host:
            proc.hosts.add(host)
        self.find(rank_key)
        if hp is not None:
            self.union(hp, rank_key)
            self.proc(hp).hosts.add(host or "?")
        elif host:
            self.union(("host-rank", host, rank), rank_key)

    def absorb(self, other: Identities) -> None:
        """Add another reading's keys, facts and unions, as if read after this one."""
        for key, proc in other.procs.items():
            mine = self.procs.get(key)
            if mine is None:
                self.procs[key] = proc
            else:
                mine.absorb(proc)
        for key in other.parent:
            self.union(other.find(key), key)

    def resolve(self) -> tuple[list[Proc], dict[Key, Proc]]:
        """One Proc per process, in rank order, and the process of every key."""
        for key, proc in list(self.procs.items()):
            rank = _rank_in_largest_comm(proc.comm_ranks)
            if rank is not None:
                self.union(key, ("rank", rank))
                self.proc(("rank", rank)).ranks.add(rank)
        groups: dict[Key, Proc] = {}
        procs, self.procs = self.procs, {}
        for key in list(procs):  # each key's facts let go once merged: memory does not double at the end
            proc = procs.pop(key)
            root = self.find(key)
            merged = groups.get(root)
            if merged is None:
                groups[root] = merged = Proc()
            merged.merge(proc)
        by_key = {key: proc for proc in groups.values() for key in proc.keys}
        _infer_ranks_from_devices(list(groups.values()))
        return sorted(groups.values(), key=_proc_order), by_key


def _infer_ranks_from_devices(procs: list[Proc]) -> None:
    """One host, one GPU per process, no rank printed anywhere: torchrun's usual rank == local GPU index."""
    with_dev = [p for p in procs if p.pids]
    if len(with_dev) < 2 or any(p.ranks for p in procs) or len({h for p in procs for h in p.hosts}) > 1:
        return
    devs = [p.devs for p in with_dev]
    if all(len(d) == 1 for d in devs) and len({min(d) for d in devs}) == len(devs):
        for p in with_dev:
            p.ranks = set(p.devs)
            p.rank_inferred = True


def _rank_in_largest_comm(inits: list[CommRank]) -> int | None:
    """A process that is exactly one rank of its largest communicator is that (global) rank."""
    if not inits:
        return None
    largest = max(nranks for _, _, nranks, _ in inits)
    ranks = {rank for _, _, nranks, rank in inits if nranks == largest}
    return ranks.pop() if len(ranks) == 1 and largest > 1 else None


def _proc_order(proc: Proc) -> tuple[int, int, str]:
    if proc.ranks:
        return (0, min(proc.ranks), "")
    return (1, 0, proc.label())
