"""Reading: layouts, compressions, stdin, line attribution, and bad input that must never stop the analysis."""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import os
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from nccl_doctor.logs import collect_paths, diagnose_paths, diagnose_text
from nccl_doctor.logs.attribution import attribute, rank_from_path
from nccl_doctor.logs.sources import WIDE_COUNT, ReadStats, iter_chunks, looks_binary, newlines
from nccl_doctor.model import InputError

SHM_LINE = "node-1:41588:41837 [0] include/shm.h:28 NCCL WARN Call to posix_fallocate failed : No space left on device\n"
FIXTURES = Path(__file__).parent / "fixtures" / "logs"


# ---------------------------------------------------------------- attribution

@pytest.mark.parametrize("line, rank, host, pid", [
    ("[rank3]:[E709 17:05:38.162555850 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught", 3, None, None),
    ("[default5]:node-2:1234:1290 [5] NCCL INFO Using network IB", 5, "node-2", 1234),
    ("12: node-7:77:78 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.7<0>", 12, "node-7", 77),
    ("[1,50]<stderr>:[compute-7:21766] Signal: Segmentation fault (11)", 50, None, None),
    ("[trainer0|0]:ncclInternalError: Internal check failed.", 0, None, None),
    ("(RayWorkerVllm pid=5085) [E ProcessGroupNCCL.cpp:475] [Rank 4] Watchdog caught", 4, None, 5085),
    ("[PG ID 1 PG GUID 1(pp) Rank 9] Process group watchdog thread terminated", 9, None, None),
    ("[E ProcessGroupNCCL.cpp:485] [PG 0 Rank 25] Heartbeat monitor timed out!", 25, None, None),
    ("2024-05-01T10:00:00.123Z node-3:55:56 [2] NCCL INFO NET/IB : No device found.", None, "node-3", 55),
    ("[2025-03-14 02:00:00] gpu-node04:20037:20046 [5] transport/net_ib.cc:1696 NCCL WARN NET/IB", None, "gpu-node04", 20037),
    ("fengyun: Test NCCL failure common.cu:959 'internal error'", None, "fengyun", None),
])
def test_attribution(line, rank, host, pid):
    info = attribute(line)
    assert (info.rank, info.host, info.pid) == (rank, host, pid)


def test_timestamps_are_read():
    iso = attribute("[2025-03-14 02:00:04] h:1:2 [0] misc/socket.cc:50 NCCL WARN x")
    glog = attribute("[rank1]:[E0314 00:16:43.000000000 ProcessGroupNCCL.cpp:1] y")
    assert iso.ts_kind == "iso" and iso.ts is not None
    assert glog.ts_kind == "glog" and glog.ts is not None


@pytest.mark.parametrize("path, rank", [
    ("logs/rank-3.log", 3), ("logs/rank_12.txt.gz", 12), ("job.7.err", 7), ("out/worker-2.log", 2),
    ("/tmp/nccl_trace_rank_5", 5), ("run/abc_1/attempt_0/4/stderr.log", 4), ("train.log", None),
])
def test_rank_from_path(path, rank):
    assert rank_from_path(path) == rank


_HOSTS = st.one_of(st.text(alphabet="abz09.-_", min_size=1, max_size=12),
                   st.sampled_from(["gpu-node07", "node.log", "a.out", "2024-01-01T10", "12345", "h.LOG", "x-1.err"]))
_AFTER_NCCL = st.one_of(st.sampled_from(["INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC", "WARN [Rank 3] x",
                                         "INFO [rank=2] || y", "[rank=1] || z", "INFO comm 0x1 rank 9 nranks 16",
                                         "", " 12: x", "INFO [PG 0 Rank 5] Watchdog"]),
                        st.text(alphabet="aN []:|1.|-", max_size=20))
_IDS = st.one_of(st.integers(10, 99), st.integers(0, 99999))  # two digits: a pid and tid that read as a time
_NCCL_LINES = st.builds("{}:{}:{} [{}] {}NCCL {}".format, _HOSTS, _IDS, _IDS, st.integers(0, 15),
                        st.sampled_from(["", " ", "[3] "]), _AFTER_NCCL)


_AFTER_TAG = st.one_of(st.sampled_from([" step 3 | loss 2.1", "  12: x", " 12: x", " [Rank 3] y",
                                        "[E0314 02:10:00 a.cpp:1] z", " host-1: Test NCCL failure x", " x [rank4]: y"]),
                        st.text(alphabet=" aZ1[]:|.-", max_size=20))
_TAGGED = st.builds("[{}{}]:{}".format, st.sampled_from(["rank", "rank=", "default", ""]), st.integers(0, 99),
                    _AFTER_TAG)


@settings(max_examples=500, deadline=None)
@example("2024-01-01T10:20:57 [0] NCCL INFO Bootstrap")  # a host that reads as a timestamp: the loop's way
@given(st.one_of(_NCCL_LINES, _TAGGED, st.builds("[rank{}]:{}".format, st.integers(0, 9), _NCCL_LINES),
                 st.text(max_size=40)))
def test_common_prefixes_are_read_as_the_loop_reads_them(line):
    """attribute_common, the shortcut for NCCL's own prefix and torchrun's tag, gives what peeling prefixes one by
    one gives."""
    from unittest import mock

    from nccl_doctor.logs import attribution

    fast = attribute(line)
    with mock.patch.object(attribution, "attribute_common", lambda text: None):
        assert fast == attribute(line)


# ---------------------------------------------------------------- layouts and compression

def test_directory_of_compressed_per_rank_files(tmp_path):
    (tmp_path / "rank-0.log.gz").write_bytes(gzip.compress(b"hello\n"))
    (tmp_path / "rank-1.log.bz2").write_bytes(bz2.compress(SHM_LINE.encode()))
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "rank-2.log.xz").write_bytes(lzma.compress(SHM_LINE.encode()))
    report = diagnose_paths([str(tmp_path)])
    primary = report.ordered()[0]
    assert primary.cause == "shm-too-small"
    assert set(primary.ranks) == {1, 2}
    assert len(report.facts["inputs"]["read"]) == 3


def test_glob_and_stdin(tmp_path, monkeypatch):
    (tmp_path / "a.log").write_text(SHM_LINE)
    assert diagnose_paths([str(tmp_path / "*.log")]).ordered()[0].cause == "shm-too-small"
    fake = io.TextIOWrapper(io.BytesIO(SHM_LINE.encode()))
    monkeypatch.setattr("sys.stdin", fake)
    assert diagnose_paths(["-"]).ordered()[0].cause == "shm-too-small"


def test_diagnose_text_classifies_exception_strings():
    text = ("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, "
            "invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.20.5\n"
            "ncclInvalidUsage: This usually reflects invalid usage of NCCL library.\nLast error:\n"
            "Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 10")
    findings = diagnose_text(text, "rank1.stderr")
    assert findings[0].cause == "duplicate-gpu"
    assert findings[0].evidence[0].source == "rank1.stderr"
    assert diagnose_text("all good, loss 0.1") == []


# ---------------------------------------------------------------- bad input

def test_long_line_is_cut_and_counted():
    data = b"a" * 300_000 + b"\n" + SHM_LINE.encode()
    stats = ReadStats()
    chunks = list(iter_chunks(io.BytesIO(data), stats, chunk_size=4096, max_line=1000))
    text = b"".join(c.data for c in chunks)
    assert stats.truncated_lines == 1
    assert text.split(b"\n")[1] == SHM_LINE.encode().rstrip(b"\n")
    assert chunks[-1].first_line + chunks[-1].data.count(b"\n") - 1 == 2


def test_100mb_line_without_newline(tmp_path):
    big = tmp_path / "huge.log"
    with open(big, "wb") as fh:
        block = b"x" * (1 << 20)
        for _ in range(100):
            fh.write(block)
    (tmp_path / "rank-1.log").write_text(SHM_LINE)
    report = diagnose_paths([str(big), str(tmp_path / "rank-1.log")])
    assert report.ordered()[0].cause == "shm-too-small"
    assert any("longer than 64 KiB" in p for p in report.facts["inputs"]["problems"])


def test_bad_inputs_are_reported_and_the_rest_is_analysed(tmp_path):
    (tmp_path / "good.log").write_text(SHM_LINE)
    (tmp_path / "empty.log").write_text("")
    (tmp_path / "binary.bin").write_bytes(bytes(range(256)) * 64)
    (tmp_path / "latin1.log").write_bytes("Fehler: \xe4\xf6\xfc \xff\xfe\n".encode("latin-1") + SHM_LINE.encode())
    (tmp_path / "cut.log.gz").write_bytes(gzip.compress(SHM_LINE.encode() * 2000)[:300])
    loop = tmp_path / "loop"
    loop.mkdir()
    os.symlink(str(loop), str(loop / "again"))
    os.symlink(str(tmp_path / "nowhere"), str(tmp_path / "dangling.log"))
    report = diagnose_paths([str(tmp_path), str(tmp_path / "missing.log")])
    problems = report.facts["inputs"]["problems"]
    joined = "\n".join(problems)
    assert "missing.log: no such file" in joined
    assert "empty.log: empty" in joined
    assert "binary.bin: binary file" in joined
    assert "cut.log.gz: compressed data ends early" in joined
    assert "symbolic link loop" in joined
    assert "dangling.log: broken symbolic link" in joined
    assert all("\n" not in p for p in problems)
    assert report.ordered()[0].cause == "shm-too-small"
    assert str(tmp_path / "latin1.log") in report.facts["inputs"]["read"]


def test_unreadable_file(tmp_path, monkeypatch):
    (tmp_path / "secret.log").write_text(SHM_LINE)
    (tmp_path / "ok.log").write_text(SHM_LINE)
    real_open = open

    def fake_open(path, *args, **kwargs):
        if str(path).endswith("secret.log"):
            raise PermissionError(13, "Permission denied")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr("builtins.open", fake_open)
    col = collect_paths([str(tmp_path)])
    assert any("secret.log: cannot read (Permission denied)" in p for p in col.problems)
    assert len(col.sources_read) == 1


def test_nothing_readable_is_an_input_error(tmp_path):
    (tmp_path / "empty.log").write_text("")
    with pytest.raises(InputError, match="nothing could be read"):
        diagnose_paths([str(tmp_path / "empty.log"), str(tmp_path / "missing")])


def test_memory_is_bounded_for_many_matches(tmp_path):
    """Events are capped per signature and process: a log of a million echoes stays small."""
    line = "[rank1]:node:1:2 [0] misc/socket.cc:50 NCCL WARN socketProgress: Connection closed by remote peer x<1>\n"
    (tmp_path / "echo.log").write_text(line * 20000)
    col = collect_paths([str(tmp_path / "echo.log")])
    assert len(col.events) <= 10
    assert col.dropped_events > 19000


def test_json_fields_are_serialisable(tmp_path):
    (tmp_path / "a.log").write_text(SHM_LINE)
    json.dumps(diagnose_paths([str(tmp_path)]).to_json())


def test_old_nccl_22_wording():
    """NCCL 2.2-2.3 printed 'INFO'/'WARN' without 'NCCL' and other words (NVIDIA/nccl-tests#15)."""
    text = "\n".join([
        "gpu-bql-144-103:18553:18553 [0] INFO NET : Using interface enp3s0:192.168.144.103<0>",
        "gpu-bql-144-103:18553:18553 [0] INFO Using internal Network Socket",
        "NCCL version 2.2.13+cuda9.0",
        "gpu-bql-144-103:18553:18611 [0] include/socket.h:360 WARN Call to connect failed : Connection timed out",
        "gpu-bql-144-103:18553:18611 [0] INFO transport/net_socket.cu:118 -> 2",
        "gpu-bql-144-103:18553:18612 [0] include/socket.h:371 WARN Connection closed by remote peer",
    ])
    findings = diagnose_text(text, "old.log")
    causes = [findings[0].cause] + [s.cause for s in findings[0].secondary]
    # NCCL's own socket connect timing out: the peer host is unreachable (not MASTER_ADDR, which is the TCPStore's)
    assert "host-unreachable" in causes and "rank-died" in causes


def test_rank_tag_before_nccl_prefix_and_column_viewers(tmp_path):
    (tmp_path / "a.log").write_text(
        "[1] node2:22555:22555 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>\n"
        "  | 2024-11-28T07:42:14.532Z | algo-1:17774:17862 [1] misc/socket.cc:717 NCCL WARN ncclSocketInit: "
        "connecting to address with family 33022 is neither AF_INET(2) nor AF_INET6(10)\n")
    report = diagnose_paths([str(tmp_path)])
    rows = {r["label"]: r for r in report.facts["ranks"]}
    assert rows["rank 1"]["host"] == "node2"
    assert report.ordered()[0].hosts == ["algo-1"]


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=64), st.integers(0, 3), st.integers(0, WIDE_COUNT * 3), st.integers(0, WIDE_COUNT * 3))
def test_newlines_counts_like_bytes_count_short_and_wide(unit, repeat_log, a, b):
    """numpy counts wide spans, bytes.count short ones: the same answer either way, on any bytes and bounds."""
    data = (unit or b"\n") * (1 + (WIDE_COUNT * 3 // max(len(unit), 1)) // (1 + 3 * repeat_log))
    start, end = sorted((min(a, len(data)), min(b, len(data))))
    assert newlines(data, start, end) == data.count(b"\n", start, end)
    assert newlines(data) == data.count(b"\n")


def test_line_numbers_survive_wide_chunks(tmp_path):
    """Line numbers across 1 MiB chunks (counted by numpy) point at the right lines."""
    filler = b"node-1:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC\n" * 40_000
    log = tmp_path / "rank-0.log"
    log.write_bytes(filler + SHM_LINE.encode() + b"\n" + filler)
    report = diagnose_paths([str(log)])
    lines = {e.line for f in report.findings for e in f.evidence if "shm" in e.text.lower() or "Bus" in e.text}
    assert 40_001 in lines, lines


def test_coll_calls_kept_shrink_with_the_number_of_sources(tmp_path):
    """Thousands of per-rank files share one budget of COLL calls: memory stays bounded at any job size."""
    from nccl_doctor.logs.records import COLL_BUDGET, COLL_TAIL, COLL_TAIL_MIN, coll_tail

    assert coll_tail(1) == coll_tail(64) == COLL_TAIL
    assert coll_tail(4096) == max(COLL_TAIL_MIN, COLL_BUDGET // 4096) < COLL_TAIL
    assert coll_tail(10**6) == COLL_TAIL_MIN
    call = ("node-1:{pid}:1 [0] NCCL INFO AllReduce: opCount {op:x} sendbuff 0x1 recvbuff 0x1 count 8 datatype 7 "
            "op 0 root 0 comm 0x5 [nranks=2] stream 0x6\n")
    files = 3000
    for r in range(files):
        (tmp_path / f"rank-{r}.log").write_text("".join(call.format(pid=100 + r, op=i) for i in range(100)))
    kept = [len(p.colls) for p in collect_paths([str(tmp_path)]).procs if p.colls]
    assert kept and max(kept) == coll_tail(files)


PREFIX_PARTS = ["[1,3]<stderr>:", "[rank3]:", "[default5]:", "3: ", "(RayWorker pid=12, ip=10.0.0.1) ", "| ",
                "2024-11-28T07:42:14.532Z ", "[2024-11-28 07:42:14,532] ", "[E0709 17:05:38.16 file.cpp:12] ",
                "node-1:41588:41837 [0] ", "[4] ", "rank3.log:", "rank3.log:12:", "fa88a9df [rank=1] || ",
                "[3] node-1:1:2 [0] ", " ", "NCCL INFO ", "[PG 0 Rank 3] ", "x"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(PREFIX_PARTS), max_size=7), st.text(max_size=30))
def test_one_alternation_attributes_as_the_prefixes_in_turn(parts, tail):
    """attribute() finds which prefix matches with one alternation: the same as trying each prefix in order."""
    from types import SimpleNamespace
    from unittest import mock

    from nccl_doctor.logs import attribution

    class InTurn:
        def match(self, rest):
            for i, prefix in enumerate(attribution._LAUNCHER_PREFIXES):
                if prefix.match(rest):
                    return SimpleNamespace(lastgroup=f"p{i}")
            return None

    line = "".join(parts) + tail
    with mock.patch.object(attribution, "_ANY_PREFIX", InTurn()):
        expected = attribute(line)
    assert attribute(line) == expected


@pytest.mark.parametrize("case", ["synthetic/timeout-silent-rank", "synthetic/ib-socket-mixed",
                                  "synthetic/flight-recorder-lag", "flight_recorder/gloo-torch2.13"])
def test_worker_processes_read_as_one_process_does(case, monkeypatch):
    """Big inputs are read by worker processes and their readings added up in order: the report is the same."""
    import io as _io

    from nccl_doctor.logs import reading
    from nccl_doctor.render import emit

    path = str(Path(__file__).parent / "fixtures" / "logs" / case)

    def report_json() -> str:
        out = _io.StringIO()
        emit(diagnose_paths([path]), as_json=True, out=out)
        return out.getvalue()

    alone = report_json()
    monkeypatch.setattr(reading, "PARALLEL_BYTES", 0)  # any input is big enough for workers
    monkeypatch.setattr(reading, "_cpus", lambda: 2)
    used = []
    in_parallel = reading.Collector._add_in_parallel
    monkeypatch.setattr(reading.Collector, "_add_in_parallel",
                        lambda self, *args: (used.append(True), in_parallel(self, *args))[1])
    assert report_json() == alone
    assert used  # the workers did read it


@pytest.mark.parametrize("parallel", [False, True])
def test_what_runs_meanwhile_runs_once_whether_workers_read_or_not(parallel, monkeypatch):
    """The diagnosis loads while the workers read (collect_paths' meanwhile): once, on either road."""
    from nccl_doctor.logs import collect_paths, reading

    if parallel:
        monkeypatch.setattr(reading, "PARALLEL_BYTES", 0)
        monkeypatch.setattr(reading, "_cpus", lambda: 2)
    path = Path(__file__).parent / "fixtures" / "logs" / "corpus" / "batch-14"
    calls = []
    col = collect_paths([str(path)], meanwhile=lambda: calls.append(1))
    assert calls == [1] and len(col.sources_read) == 4  # two cases, a log and a truth.json each


# ---------------------------------------------------------------- readings added up in any grouping

def _writer_line(host: str, pid: int, dev: int, rank: int, kind: int, n: int) -> str:
    nccl = f"{host}:{pid}:{pid + 1} [{dev}] NCCL INFO "
    return [
        f"{nccl}comm 0x{n % 3:x} rank {rank} nranks {2 + n % 3} cudaDev {dev} busId 1000 commId 0x{n % 5:x} - Init START",
        f"{nccl}comm 0x{n % 3:x} rank {rank} nranks {2 + n % 3} cudaDev {dev} busId 1000 commId 0x{n % 5:x} - "
        "Init COMPLETE",
        f"{nccl}Channel 0{n % 4}/0 : {rank}[{dev}] -> {rank + 1}[0] via {['P2P/IPC', 'NET/IB/0', 'SHM'][n % 3]}",
        f"{nccl}AllReduce: opCount {n:x} sendbuff 0x1 recvbuff 0x1 count {n} datatype 7 op 0 root 0 comm 0x5 "
        "[nranks=2] stream 0x6",
        f"{nccl}NCCL version 2.{18 + n % 3}.5+cuda12.4",
        f"[rank{rank}]:{host}:{pid}:{pid + 1} [{dev}] misc/socket.cc:50 NCCL WARN socketProgress: "
        "Connection closed by remote peer x<1>",
        f"[rank{rank}]: RuntimeError: step {n} failed for no known reason",
        f"[rank{rank}]: step {n} | loss 2.5",
    ][kind]


_LINES = st.builds(_writer_line, st.sampled_from(["node-1", "node-2"]), st.integers(1, 3), st.integers(0, 7),
                   st.integers(0, 5), st.integers(0, 7), st.integers(0, 40))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(_LINES, min_size=1, max_size=40), min_size=2, max_size=6), st.data())
def test_readings_add_up_the_same_in_any_grouping(sources, data):
    """Workers add up the readings of a batch of sources, the collector adds up the batches: the same as adding
    up the readings of the sources one by one (in order), whatever the batches. Caps are reached (events per
    signature and process, hint lines, COLL calls, GPUs per process), except communicators per process (64):
    past that cap, which ones are forgotten may depend on the batches."""
    from unittest import mock

    from nccl_doctor.logs import reading, records
    from nccl_doctor.logs.engine import default_engine
    from nccl_doctor.logs.sources import Source

    def read(i: int, lines: list[str]) -> reading.Reading:
        source = Source(name=f"rank-{i % 3}.log", stream=io.BytesIO("\n".join(lines).encode()))
        return reading.SourceReader(source, i + 1, default_engine(), None, reading.Shares(coll_tail=4)).read()

    def added_up(readings: list[reading.Reading]) -> records.Collection:
        collector = reading.Collector(default_engine())
        for one in readings:
            collector.reading.absorb(one)
        return collector.finish()

    cuts = sorted(data.draw(st.sets(st.integers(1, len(sources) - 1))))
    with mock.patch.object(records, "COLL_TAIL", 3):
        one_by_one = added_up([read(i, lines) for i, lines in enumerate(sources)])
        batches = []
        for start, end in zip([0, *cuts], [*cuts, len(sources)]):
            batch = reading.Reading()
            for i in range(start, end):
                batch.absorb(read(i, sources[i]))
            batches.append(batch)
        in_batches = added_up(batches)
    assert in_batches == one_by_one


def test_comm_init_lines_tell_the_rank_and_are_kept_as_four_values_up_to_the_cap():
    """A process that printed its pid keeps its first COMM_RANKS comm init lines as (source, line, nranks, rank),
    across readings too; identity resolution takes the rank of its largest communicator from them."""
    from nccl_doctor.logs import reading, records
    from nccl_doctor.logs.engine import default_engine
    from nccl_doctor.logs.sources import Source

    def comm_line(i: int, rank: int, nranks: int) -> str:
        return (f"node-1:42:43 [1] NCCL INFO comm 0x{i:x}0 rank {rank} nranks {nranks} cudaDev 1 busId 1000 "
                f"commId 0x{i:x}1 - Init START")

    lines = [comm_line(i, 1, 2) for i in range(10)] + [comm_line(10 + i, 13, 16) for i in range(10)]
    data = "\n".join(lines).encode()
    first = reading.SourceReader(Source("job.log", stream=io.BytesIO(data)), 1, default_engine()).read()
    proc = first.ids.procs[("hp", "node-1", 42)]
    assert proc.comm_ranks[0] == ("job.log", 1, 2, 1)
    assert proc.comm_ranks[-1] == ("job.log", records.COMM_RANKS, 16, 13)
    assert len(proc.comm_ranks) == records.COMM_RANKS and "comm_rank" not in proc.facts
    second = reading.SourceReader(Source("job.log", stream=io.BytesIO(data)), 2, default_engine()).read()
    first.absorb(second)
    assert len(first.ids.procs[("hp", "node-1", 42)].comm_ranks) == records.COMM_RANKS
    procs, _ = first.ids.resolve()
    assert [p.ranks for p in procs] == [{13}]


def test_a_process_keeps_its_last_calls_and_shares_its_phase_sets():
    """Thousands of processes: one without COLL calls has no deque, and communicators with the same init phases
    share one set; what they hold is what a deque and a set per communicator would."""
    from nccl_doctor.logs.records import COLL_TAIL, Proc

    idle, busy = Proc(), Proc()
    idle.add_colls([])
    assert idle.colls == ()
    busy.add_colls((n, "AllReduce", 1, "0x1", None) for n in range(COLL_TAIL + 5))  # type: ignore[misc]
    assert [c[0] for c in busy.colls] == list(range(5, COLL_TAIL + 5))
    for comm in ("0xa", "0xb"):
        busy.add_comm_phase(comm, "START", 8)
        busy.add_comm_phase(comm, "COMPLETE", 8)
    idle.add_comm_phase("0xc", "START", 8)
    idle.merge(busy)
    assert busy.init_phases["0xa"] is busy.init_phases["0xb"] is idle.init_phases["0xa"]
    assert idle.init_phases == {"0xa": {"START", "COMPLETE"}, "0xb": {"START", "COMPLETE"}, "0xc": {"START"}}
    assert list(idle.colls) == list(busy.colls)


def test_a_short_paste_full_of_escapes_is_text_and_nul_bytes_are_binary():
    # hypothesis found it: a one-line paste with five control characters was skipped as a binary file
    assert not looks_binary(b"[rank1]: RuntimeError: BEGINP \x1f\x1f\x1f\x1f\x1f ENDP\n")
    assert looks_binary(b"\x7fELF\x02\x01\x01\x00")
    assert looks_binary(bytes(range(1, 32)) * 200)  # a long head that is mostly control characters


def test_transport_lines_read_once_per_writer_still_tell_every_transport(tmp_path):
    """A writer's channel lines that end alike are read once (logs/reading.py _transport_key); another transport
    of the same writer, or the same line from another process, is still read (before the lines saturate)."""
    line = "{host}:42:42 [0] NCCL INFO Channel {ch:02d}/0 : 0[0] -> 1[1] via {via}\n"
    lines = [line.format(host="node-1", ch=i % 32, via="P2P/CUMEM/read") for i in range(3000)]
    lines.insert(30, line.format(host="node-1", ch=5, via="NET/IB/0/GDRDMA"))
    lines.insert(40, line.format(host="node-2", ch=6, via="P2P/CUMEM/read"))
    lines.insert(50, line.format(host="node-2", ch=6, via="SHM/direct/direct"))
    log = tmp_path / "job.log"
    log.write_text("".join(lines))  # over 64 KiB: not a pasted excerpt, whose every line is kept
    procs = collect_paths([str(log)]).procs
    assert sorted(sorted(p.transports) for p in procs) == [["NET/IB", "P2P"], ["P2P", "SHM"]]


def test_shares_of_a_source_shrink_with_thousands_of_sources_to_a_floor():
    from nccl_doctor.logs.reading import TAIL_QUIET, TAIL_QUIET_MIN, Shares

    assert Shares.of(1).tail_quiet == Shares.of(128).tail_quiet == TAIL_QUIET
    many = Shares.of(4096)
    assert TAIL_QUIET_MIN <= many.tail_quiet < TAIL_QUIET and many.coll_tail < Shares().coll_tail
    assert Shares.of(10**6).tail_quiet == TAIL_QUIET_MIN
