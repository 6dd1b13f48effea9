"""Synthetic multi-rank NCCL/PyTorch logs with planted faults.

Two uses:
  python bench/logs_generate.py corpus DIR --gib 1 --ranks 64 --hosts 8
      a large NCCL_DEBUG=INFO corpus (one file per rank) for bench/logs_speed.py
  python bench/logs_generate.py fixtures tests/fixtures/logs/synthetic
      the small synthetic cases the golden tests read (each with truth.json)

Line formats follow shared/reference/error_signatures.md (NCCL 2.18-2.21 INFO/WARN prefixes, PyTorch
glog lines with torchrun's [rankN]: prefix).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import pickle
import random
from pathlib import Path

TS_BASE = (2025, 3, 14)


def ts(seconds: float) -> str:
    h, rem = divmod(int(seconds), 3600)
    m, s = divmod(rem, 60)
    return f"{h:02d}:{m:02d}:{s:02d}.{int((seconds % 1) * 1e6):06d}"


def nccl_prefix(host: str, pid: int, tid: int, dev: int) -> str:
    return f"{host}:{pid}:{tid} [{dev}]"


def init_block(host: str, pid: int, rank: int, nranks: int, dev: int, version: str = "2.21.5",
               iface: str = "eth0", ip: str = "10.0.0.1", net: str = "IB", nchannels: int = 4,
               complete: bool = True) -> list[str]:
    p = nccl_prefix(host, pid, pid, dev)
    q = nccl_prefix(host, pid, pid + 57, dev)
    lines = [
        f"{p} NCCL INFO Bootstrap : Using {iface}:{ip}<0>",
        f"{p} NCCL INFO NET/Plugin: No plugin found (libnccl-net.so)",
        f"{p} NCCL INFO cudaDriverVersion 12040",
        f"{p} NCCL INFO NCCL version {version}+cuda12.4" if rank == 0 or True else "",
    ]
    if net == "IB":
        lines += [f"{q} NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [RO]; OOB {iface}:{ip}<0>",
                  f"{q} NCCL INFO Using network IB"]
    else:
        lines += [f"{q} NCCL INFO NET/IB : No device found.",
                  f"{q} NCCL INFO NET/Socket : Using [0]{iface}:{ip}<0>",
                  f"{q} NCCL INFO Using network Socket"]
    lines.append(f"{q} NCCL INFO comm 0x55d0a{rank:04x} rank {rank} nranks {nranks} cudaDev {dev} nvmlDev {dev} "
                 f"busId {dev + 1}b000 commId 0x9f3e1c2a7b6d5e40 - Init START")
    lines.append(f"{q} NCCL INFO Setting affinity for GPU {dev} to ffff,ffffffff")
    lines.append(f"{q} NCCL INFO Trees [0] {(rank + 1) % nranks}/-1/-1->{rank}->{(rank - 1) % nranks}")
    for ch in range(nchannels):
        nxt = (rank + 1) % nranks
        if nxt // 8 != rank // 8:
            lines.append(f"{q} NCCL INFO Channel {ch:02d}/0 : {rank}[{dev}] -> {nxt}[{nxt % 8}] [send] via NET/{net}/{ch % 2}/GDRDMA")
        else:
            lines.append(f"{q} NCCL INFO Channel {ch:02d}/0 : {rank}[{dev}] -> {nxt}[{nxt % 8}] via P2P/CUMEM/read")
    lines.append(f"{q} NCCL INFO Connected all rings, use ring PXN 0 GDR 1")
    if complete:
        lines.append(f"{q} NCCL INFO ncclCommInitRank comm 0x55d0a{rank:04x} rank {rank} nranks {nranks} cudaDev {dev} "
                     f"nvmlDev {dev} busId {dev + 1}b000 commId 0x9f3e1c2a7b6d5e40 - Init COMPLETE")
    return lines


def glog(rank: int, level: str, seconds: float, msg: str, file: str = "ProcessGroupNCCL.cpp:1625") -> str:
    return f"[rank{rank}]:[{level}0314 {ts(seconds)}000 {file}] {msg}"


def timeout_lines(rank: int, seq: int, op: str, numel: int, seconds: float, timeout_ms: int = 600000,
                  enqueued: int | None = None, completed: int | None = None) -> list[str]:
    pg = f"[PG ID 0 PG GUID 0(default_pg) Rank {rank}]"
    lines = [glog(rank, "E", seconds, f"{pg} Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, "
                  f"OpType={op}, NumelIn={numel}, NumelOut={numel}, Timeout(ms)={timeout_ms}) ran for "
                  f"{timeout_ms + 73} milliseconds before timing out.")]
    if enqueued is not None:
        lines.append(glog(rank, "E", seconds, f"{pg}  failure detected by watchdog at work sequence id: {seq} PG status: "
                          f"last enqueued work: {enqueued}, last completed work: {completed}"))
    lines += [
        glog(rank, "E", seconds + 0.1, f"{pg} Some NCCL operations have failed or timed out. Due to the asynchronous "
             "nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data."),
        glog(rank, "E", seconds + 0.1, f"{pg} To avoid data inconsistency, we are taking the entire process down."),
    ]
    return lines


def train_lines(rank: int, steps: range, seconds: float) -> list[str]:
    return [f"[rank{rank}]: step {s} | loss {2.5 - s * 0.0007:.4f} | lr 3.0e-04 | {seconds + s * 0.4:.1f}s"
            for s in steps]


# ---------------------------------------------------------------------------- small fixture cases

def case_timeout_silent_rank(root: Path) -> dict:
    """8 ranks on 2 hosts, one file per rank; rank 5 never reaches the collective (stuck in its data loader)."""
    for rank in range(8):
        host = f"node{rank // 4}"
        lines = init_block(host, 4100 + rank, rank, 8, rank % 4, ip=f"10.0.0.{rank // 4 + 1}")
        lines += train_lines(rank, range(0, 40), 10.0)
        if rank == 5:
            lines.append("[rank5]: Loading next shard /data/shard-00417.arrow")
        else:
            lines += timeout_lines(rank, 81, "ALLREDUCE", 262144, 640.0, enqueued=81, completed=80)
        (root / f"rank-{rank}.log").write_text("\n".join(lines) + "\n")
    return {"category": "collective_timeout_desync", "culprit_ranks": [5], "culprit_hosts": ["node1"],
            "note": "rank 5 left output but never reported the timeout"}


def case_timeout_seq_behind(root: Path) -> dict:
    """Combined torchrun log: rank 2 times out one collective behind the others (enqueued 40 < 41)."""
    lines = []
    for rank in range(4):
        lines += [f"[rank{rank}]:" + ln for ln in init_block("gpu-a", 900 + rank, rank, 4, rank)]
    for rank in range(4):
        seq = 40 if rank == 2 else 41
        lines += timeout_lines(rank, seq, "ALLREDUCE", 4096, 1900.0 + rank, timeout_ms=1800000,
                               enqueued=seq, completed=seq - 1)
    (root / "train.log").write_text("\n".join(lines) + "\n")
    return {"category": "collective_timeout_desync", "culprit_ranks": [2]}


def case_desync_report(root: Path) -> dict:
    """TORCH_NCCL_DESYNC_DEBUG report names the lagging rank."""
    lines = timeout_lines(0, 12, "ALLREDUCE", 1048576, 700.0)
    lines += [glog(0, "E", 700.2, "[PG ID 0 PG GUID 0(default_pg) Rank 0]  Desync report:"),
              "\t - [0] Timeout at collective: ALLREDUCE, #12",
              "\t - To our best knowledge, ranks [3] are the lagging ranks that caused this timeout. "
              "They never joined any collectives"]
    (root / "rank0.log").write_text("\n".join(lines) + "\n")
    return {"category": "collective_timeout_desync", "culprit_ranks": [3]}


def case_version_mismatch(root: Path) -> dict:
    """srun --label log of 2 hosts with different NCCL builds: only the cryptic family error is visible."""
    lines = []
    for rank in range(4):
        host = "hpc-a01" if rank < 2 else "hpc-a02"
        version = "2.18.1" if rank < 2 else "2.21.5"
        lines += [f"{rank}: " + ln for ln in init_block(host, 7000 + rank, rank, 4, rank % 2, version=version,
                                                        ip=f"10.1.0.{rank // 2 + 1}", complete=False)]
    lines += [
        "2: hpc-a02:7002:7060 [0] misc/socket.cc:484 NCCL WARN ncclSocketInit: connecting to address  with family 0 "
        "is neither AF_INET(2) nor AF_INET6(10)",
        "2: hpc-a02:7002:7060 [0] NCCL INFO misc/socket.cc:570 -> 3",
        "2: hpc-a02:7002:7060 [0] NCCL INFO bootstrap.cc:252 -> 3",
        "0: hpc-a01:7000:7058 [0] misc/socket.cc:49 NCCL WARN socketProgress: Connection closed by remote peer "
        "hpc-a02<45120>",
        "0: [rank0]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, "
        "internal error - please report this issue to the NCCL developers, NCCL version 2.18.1",
        "3: [rank3]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, "
        "remote process exited or there was a network error, NCCL version 2.21.5",
    ]
    (root / "slurm-4242.out").write_text("\n".join(lines) + "\n")
    return {"category": "nccl_version_mismatch", "cause": "nccl-version-mismatch",
            "culprit_hosts": ["hpc-a01", "hpc-a02"]}


def case_echo_suppression(root: Path) -> dict:
    """Rank 6 runs out of GPU memory first; seven peers report lost connections, remote errors and timeouts."""
    lines = []
    t0 = 1000.0
    for rank in range(8):
        if rank == 6:
            continue
        lines.append(glog(rank, "E", t0 + 3 + rank, f"[PG ID 0 PG GUID 0(default_pg) Rank {rank}] Process group "
                          "watchdog thread terminated with exception: NCCL error: remote process exited or there was "
                          "a network error, NCCL version 2.21.5"))
        lines.append(f"[rank{rank}]:node{rank // 4}:{3300 + rank}:{3390 + rank} [{rank % 4}] misc/socket.cc:50 NCCL WARN "
                     f"socketProgress: Connection closed by remote peer node1<51{rank}22>")
    # rank 6's own error is printed late in the combined file but happened first
    lines.append(f"[rank6]:[E0314 {ts(t0)}000 ProcessGroupNCCL.cpp:1500] CUDA out of memory. Tried to allocate "
                 "2.00 GiB. GPU 2 has a total capacity of 79.10 GiB of which 1.02 GiB is free.")
    lines.append("[rank6]:torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.")
    lines += ["W0314 00:17:02.000000 139 torch/distributed/elastic/multiprocessing/api.py:890] Sending process 3306 "
              "closing signal SIGTERM"]
    (root / "torchrun.log").write_text("\n".join(lines) + "\n")
    return {"category": "cuda_error", "cause": "cuda-oom", "culprit_ranks": [6]}


def case_rank0_tokenize(root: Path) -> dict:
    """Ranks 1-3 wait in the first barrier while rank 0 tokenizes the dataset."""
    lines = ["[rank0]:Running tokenizer on dataset:  61%|██████    | 610000/1000000 [29:58<19:10, 339.10 examples/s]"]
    for rank in range(1, 4):
        lines += timeout_lines(rank, 1, "BARRIER", 1, 1801.0, timeout_ms=1800000)
    (root / "job.log").write_text("\n".join(lines) + "\n")
    return {"category": "timeout_rank0_only_work", "cause": "rank0-preprocessing", "culprit_ranks": [0]}


def case_ib_socket_mixed(root: Path) -> dict:
    """Host node2 falls back to sockets while the others use IB; init then times out there."""
    for rank in range(3):
        host = f"node{rank}"
        net = "Socket" if rank == 2 else "IB"
        lines = init_block(host, 5000 + rank, rank * 8, 24, 0, net=net, ip=f"10.2.0.{rank + 1}")
        (root / f"{host}.rank{rank * 8}.log.gz").write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    return {"category": "infiniband_roce", "cause": "ib-not-used", "culprit_hosts": ["node2"]}


def case_ifname_differs(root: Path) -> dict:
    lines = []
    for rank, (host, iface) in enumerate([("srv-a", "enp6s0"), ("srv-b", "enp4s0")]):
        lines += init_block(host, 6100 + rank, rank, 2, 0, iface=iface, ip=f"192.168.1.{rank + 10}", complete=False)
    lines.append("srv-b: Test NCCL failure common.cu:959 'internal error - please report this issue to the NCCL developers'")
    (root / "nccl-tests.log").write_text("\n".join(lines) + "\n")
    return {"category": "network_interface", "cause": "ifname-differs-between-hosts"}


def case_flight_recorder(root: Path) -> dict:
    """Flight-recorder dumps of 4 ranks: rank 1 never enqueued collective #7."""
    for rank in range(4):
        last = 6 if rank == 1 else 7
        entries = []
        for seq in range(1, last + 1):
            entries.append({
                "record_id": seq - 1, "pg_id": 0, "process_group": ("0", "default_pg"), "thread_name": "python",
                "collective_seq_id": seq, "p2p_seq_id": 0, "op_id": seq, "profiling_name": "nccl:all_reduce",
                "time_created_ns": 1741910400000000000 + seq, "input_sizes": [[1024, 1024]],
                "input_dtypes": ["Float"], "output_sizes": [[1024, 1024]], "output_dtypes": ["Float"],
                "state": "completed" if seq < 7 else "started", "time_discovered_started_ns": None,
                "time_discovered_completed_ns": None, "retired": seq < 7, "timeout_ms": 600000, "is_p2p": False,
            })
        dump = {"version": "2.10", "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"}},
                "comm_lib_version": "2.21.5", "pg_status": {"0": {"last_enqueued_collective": last,
                                                                  "last_started_collective": last,
                                                                  "last_completed_collective": 6}},
                "entries": entries}
        (root / f"nccl_trace_rank_{rank}").write_bytes(pickle.dumps(dump, protocol=2))
    lines = timeout_lines(0, 7, "ALLREDUCE", 1048576, 601.0, enqueued=7, completed=6)
    (root / "rank0.log").write_text("\n".join(lines) + "\n")
    return {"category": "collective_timeout_desync", "culprit_ranks": [1]}


def case_coll_mismatch(root: Path) -> dict:
    """NCCL_DEBUG_SUBSYS=COLL: rank 3 issues AllGather where the others issue AllReduce."""
    lines = []
    for rank in range(4):
        lines += [f"[rank{rank}]:" + ln for ln in init_block("dgx1", 8800 + rank, rank, 4, rank)]
    for opcount in range(0x40, 0x43):
        for rank in range(4):
            op = "AllGather" if rank == 3 and opcount == 0x42 else "AllReduce"
            lines.append(f"[rank{rank}]:dgx1:{8800 + rank}:{8800 + rank} [{rank}] NCCL INFO {op}: opCount {opcount:x} "
                         f"sendbuff 0x7f00{rank}0000 recvbuff 0x7f00{rank}0000 count 262144 datatype 7 op 0 root 0 "
                         f"comm 0x55d0a{rank:04x} [nranks=4] stream 0x55aa{rank}")
    (root / "coll.log").write_text("\n".join(lines) + "\n")
    return {"category": "mismatched_collectives", "cause": "collective-mismatch", "culprit_ranks": [3]}


def case_nothing_recognised(root: Path) -> dict:
    lines = ["epoch 1 step 10 loss 2.31", "Traceback (most recent call last):",
             '  File "train.py", line 12, in <module>', "KeyError: 'labels'"]
    (root / "train.log").write_text("\n".join(lines) + "\n")
    return {"category": None}


CASES = {
    "timeout-silent-rank": case_timeout_silent_rank,
    "timeout-seq-behind": case_timeout_seq_behind,
    "desync-report": case_desync_report,
    "version-mismatch-hosts": case_version_mismatch,
    "echo-suppression-oom": case_echo_suppression,
    "rank0-tokenize-barrier": case_rank0_tokenize,
    "ib-socket-mixed": case_ib_socket_mixed,
    "ifname-differs": case_ifname_differs,
    "flight-recorder-lag": case_flight_recorder,
    "coll-mismatch": case_coll_mismatch,
    "nothing-recognised": case_nothing_recognised,
}


def write_fixtures(root: Path) -> None:
    for name, make in CASES.items():
        case = root / name
        case.mkdir(parents=True, exist_ok=True)
        for old in case.iterdir():
            old.unlink()
        truth = make(case)
        truth["source"] = "synthetic (bench/logs_generate.py)"
        (case / "truth.json").write_text(json.dumps(truth, indent=2) + "\n")


# ---------------------------------------------------------------------------- big corpus for the benchmark

FAULT_RANK = 37  # hits an IB retry-exceeded error; everyone else echoes it
OLD_VERSION = "2.20.3"  # what the last host loads (the others 2.21.5)


def comm_round(host: str, pid: int, rank: int, nranks: int, dev: int, comm: int, per_host: int) -> list[str]:
    """One more communicator (a job that makes them as it goes, e.g. an RL weight-sync group): init lines and
    the channel lines NCCL prints for it, most of an NCCL_DEBUG=INFO log."""
    q = nccl_prefix(host, pid, pid + 57, dev)
    ident = f"comm 0x7f{comm:06x}{rank:04x} rank {rank} nranks {nranks} cudaDev {dev} nvmlDev {dev} busId {dev + 1}b000 " \
            f"commId 0x{comm:08x}5e40"
    lines = [f"{q} NCCL INFO {ident} - Init START"]
    for ch in range(32):
        nxt, prv = (rank + 1) % nranks, (rank - 1) % nranks
        for peer, way in ((nxt, "send"), (prv, "receive")):
            via = f"NET/IB/{ch % 2}/GDRDMA" if peer // per_host != rank // per_host else "P2P/CUMEM/read"
            lines.append(f"{q} NCCL INFO Channel {ch:02d}/0 : {rank}[{dev}] -> {peer}[{peer % per_host}] [{way}] via {via}")
    lines.append(f"{q} NCCL INFO Connected all rings, use ring PXN 0 GDR 1")
    lines.append(f"{q} NCCL INFO ncclCommInitRank {ident} - Init COMPLETE")
    return lines


def write_corpus(root: Path, total_bytes: int, ranks: int = 64, hosts: int = 8, seed: int = 7) -> dict:
    """One NCCL_DEBUG=INFO(+COLL) log per rank, ~total_bytes in all, mostly channel and init lines of communicators
    made as the job goes, training lines and COLL calls, with planted faults: rank FAULT_RANK's IB completion
    error 12 first, echoes on its peers, watchdog timeouts everywhere else, and the last host loading another
    NCCL release (OLD_VERSION)."""
    rng = random.Random(seed)
    per_rank = total_bytes // ranks
    per_host = ranks // hosts
    root.mkdir(parents=True, exist_ok=True)
    for rank in range(ranks):
        host_i = rank // per_host
        host = f"gpu-node{host_i:02d}"
        pid = 20000 + rank
        dev = rank % per_host
        prefix = nccl_prefix(host, pid, pid, dev)
        version = OLD_VERSION if host_i == hosts - 1 else "2.21.5"
        head = init_block(host, pid, rank, ranks, dev, version=version, ip=f"10.8.0.{host_i + 1}", nchannels=16)
        body_parts = ["\n".join(head), "\n"]
        size = sum(len(p) for p in body_parts)
        step = 0
        opcount = 0
        comm = 0
        while size < per_rank - 4096:
            comm += 1
            block = comm_round(host, pid, rank, ranks, dev, comm, per_host)
            for _ in range(20):
                step += 1
                block.append(f"[rank{rank}]: step {step} | loss {2.0 + rng.random():.4f} | tokens/s 41{rng.randint(100, 999)}")
                opcount += 1
                block.append(f"{prefix} NCCL INFO AllReduce: opCount {opcount:x} sendbuff 0x7f3a{opcount:08x} "
                             f"recvbuff 0x7f3a{opcount:08x} count 33554432 datatype 7 op 0 root 0 "
                             f"comm 0x55d0a{rank:04x} [nranks={ranks}] stream 0x55e1c3a0")
            text = "\n".join(block) + "\n"
            body_parts.append(text)
            size += len(text)
        t_fault = 7200.0
        if rank == FAULT_RANK:
            tail = [f"[2025-03-14 02:00:00] {host}:{pid}:{pid + 9} [{dev}] transport/net_ib.cc:1696 NCCL WARN NET/IB : "
                    f"Got completion from peer 10.8.0.{host_i + 2}<45221> with status=12 opcode=0 len=0 vendor err 129 (Send) "
                    f"localGid ::ffff:10.8.0.{host_i + 1} remoteGids::ffff:10.8.0.{host_i + 2} hca mlx5_0",
                    f"{host}:{pid}:{pid + 9} [{dev}] NCCL INFO transport/net.cc:1298 -> 6",
                    f"{host}:{pid}:{pid + 9} [{dev}] NCCL INFO proxy.cc:694 -> 6"]
        elif rank in (FAULT_RANK - 1, FAULT_RANK + 1):
            tail = [f"[2025-03-14 02:00:04] {host}:{pid}:{pid + 9} [{dev}] misc/socket.cc:50 NCCL WARN socketProgress: "
                    f"Connection closed by remote peer gpu-node{FAULT_RANK // per_host:02d}<35012>"]
            tail += timeout_lines(rank, opcount, "ALLREDUCE", 33554432, t_fault + 600)
        else:
            tail = timeout_lines(rank, opcount, "ALLREDUCE", 33554432, t_fault + 600 + rng.random())
        body_parts.append("\n".join(tail) + "\n")
        out = root / host / f"rank-{rank}.log"
        out.parent.mkdir(exist_ok=True)
        with open(out, "w") as fh:
            fh.writelines(body_parts)
    return {"fault_rank": FAULT_RANK, "cause": "ib-retry-exceeded", "also": "nccl-version-mismatch",
            "also_hosts": [f"gpu-node{hosts - 1:02d}"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    c = sub.add_parser("corpus")
    c.add_argument("dir", type=Path)
    c.add_argument("--gib", type=float, default=1.0)
    c.add_argument("--ranks", type=int, default=64)
    c.add_argument("--hosts", type=int, default=8)
    f = sub.add_parser("fixtures")
    f.add_argument("dir", type=Path)
    args = ap.parse_args()
    if args.what == "corpus":
        truth = write_corpus(args.dir, int(args.gib * (1 << 30)), args.ranks, args.hosts)
        (args.dir / "truth.json").write_text(json.dumps(truth) + "\n")
        print(f"wrote {sum(p.stat().st_size for p in args.dir.rglob('*.log')) / (1 << 30):.2f} GiB to {args.dir}")
    else:
        write_fixtures(args.dir)
        print(f"wrote {len(CASES)} cases to {args.dir}")


if __name__ == "__main__":
    os.umask(0o022)
    main()
