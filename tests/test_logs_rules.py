"""The correlation rules on small logs: timeouts (one-rank work versus a lagging rank), known NCCL defects by
version, fingerprints across ranks, the peer-to-peer hang after init, and the fallback for unrecognised errors."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nccl_doctor.catalog import cause
from nccl_doctor.logs import diagnose_text
from nccl_doctor.model import Severity

WATCHDOG = ("[rank{r}]:[E ProcessGroupNCCL.cpp:563] [Rank {r}] Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn={n}, NumelOut={n}, Timeout(ms)=1800000) ran for 1800093 "
            "milliseconds before timing out.")


def _timeouts(ranks, op="ALLREDUCE", n=1, seq=40) -> str:
    return "\n".join(WATCHDOG.format(r=r, op=op, n=n, seq=seq) for r in ranks)


def _primary(text: str):
    findings = diagnose_text(text)
    assert findings, "nothing found"
    return findings[0]


def _ranked(findings) -> list[str]:
    return [f.cause for f in findings] + [s.cause for f in findings for s in f.secondary]


# ---------------------------------------------------------------------------- timeouts

def test_barrier_like_timeout_without_rank0_points_at_rank0_work_with_the_alternative_kept():
    findings = diagnose_text(_timeouts([1, 2, 3], op="ALLREDUCE", n=1, seq=67))
    primary = findings[0]
    assert primary.cause == "rank0-only-work" and primary.category == "timeout_rank0_only_work"
    assert primary.ranks == [0] and primary.confidence <= 0.5
    # the other reading of the same lines - rank 0 stopped issuing collectives - stays as a ranked alternative
    assert "uneven-batches" in [f.cause for f in findings[1:3]]


def test_broadcast_timeout_waits_for_its_source():
    text = ("[E ProcessGroupNCCL.cpp:587] [Rank 2] Watchdog caught collective operation timeout: "
            "WorkNCCL(OpType=BROADCAST, Timeout(ms)=1800000) ran for 1802157 milliseconds before timing out.")
    assert _primary(text).cause == "rank0-only-work"


def test_rank0_that_times_out_was_waiting_too():
    primary = _primary(_timeouts([0, 1, 2, 3], n=1, seq=3))
    assert primary.category == "collective_timeout_desync"


def test_gradient_sized_timeout_is_not_rank0_work():
    primary = _primary(_timeouts([1, 2, 3], n=26214400, seq=812))
    assert primary.cause == "collective-timeout"


def test_early_barrier_means_preprocessing():
    primary = _primary(_timeouts([1, 2, 3], op="BARRIER", n=1, seq=1))
    assert primary.cause == "rank0-preprocessing"


def test_checkpoint_context_names_the_work_and_raises_confidence():
    text = "[rank0]:Saving model checkpoint to /ckpt/step-500\n" + _timeouts([1, 2, 3], n=1, seq=500)
    primary = _primary(text)
    assert primary.cause == "checkpoint-io" and primary.confidence >= 0.5
    assert not primary.secondary or "collective-timeout" not in [s.cause for s in primary.secondary]


def test_latest_context_wins():
    text = ("[rank0]:Saving model checkpoint to /ckpt/step-500\n[rank0]:***** Running Evaluation *****\n"
            + _timeouts([1, 2, 3], n=26214400, seq=600))
    assert _primary(text).cause == "rank0-evaluation"


def test_context_long_before_the_timeout_is_an_earlier_phase():
    text = ("[rank0]:Saving model checkpoint to /ckpt/step-500\n" + "step done\n" * 3000
            + _timeouts([1, 2, 3], n=26214400, seq=812))
    assert _primary(text).cause == "collective-timeout"


def test_watchdog_stack_alone_is_a_timeout():
    text = ("Running predictions on sample ttbar on rank=0:  75%|███████▌  | 3/4 [01:51<00:25, 25.36s/it]\n"
            "frame #1: c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(std::optional<std::chrono::duration<long, "
            "std::ratio<1l, 1000l> > >) + 0x1d2 (0x1554e9e0f8f2 in libtorch_cuda.so)\n")
    primary = _primary(text)
    assert primary.cause == "rank0-evaluation"
    assert "checkTimeout stack" in primary.message


def test_a_progress_bar_alone_is_the_training_loop():
    text = "  1%|▏         | 24/1752 [01:08<1:22:56,  2.88s/it]" + _timeouts([5], n=26214400, seq=1580)
    assert _primary(text).cause == "collective-timeout"


def test_a_lagging_rank_beats_a_progress_bar():
    text = ("[rank0]: 35%|████      | 350/1000 [10:00<20:00, 1.7s/it]\n"
            + _timeouts([0, 1, 3], n=4096, seq=41) + "\n" + _timeouts([2], n=4096, seq=40))
    primary = _primary(text)
    assert primary.category == "collective_timeout_desync" and primary.ranks == [2]


# ---------------------------------------------------------------------------- known defects by NCCL version

MAX_SHARED = "host:1:2 [0] NCCL INFO ncclMaxSharedMem 82240 exceeds device/fn maxSharedMem 79856"
CPU_ATTR = ("host:1:2 [1] graph/xml.h:101 NCCL WARN Attribute arch of node cpu not found\n"
            "host:1:2 [1] NCCL INFO graph/topo.cc:493 -> 3")


def test_shared_memory_defect_on_an_old_release():
    primary = _primary("host:1:1 [0] NCCL INFO NCCL version 2.25.1+cuda12.8\n" + MAX_SHARED)
    assert primary.cause == "nccl-known-bug" and primary.confidence >= 0.9
    assert any("2.26.2" in f for f in primary.fix)


def test_shared_memory_message_on_a_release_with_the_fix_asks_for_a_newer_one():
    primary = _primary("host:1:1 [0] NCCL INFO NCCL version 2.27.3+cuda12.9\n" + MAX_SHARED)
    # the release judgement is the finding's reasoning ("because: ..."), under the line that shows the defect
    assert primary.cause == "nccl-known-bug" and any("newer release still" in r for r in primary.reasons)


def test_topology_attribute_with_old_nccl_is_the_defect():
    findings = diagnose_text("NCCL version 2.7.8+cuda11.0\n" + CPU_ATTR)
    assert findings[0].cause == "nccl-known-bug" and "2.8.3" in findings[0].message


def test_topology_attribute_with_new_nccl_is_the_file():
    findings = diagnose_text("NCCL version 2.21.5+cuda12.4\n" + CPU_ATTR)
    assert findings[0].cause == "nccl-graph-file"
    assert "nccl-known-bug" not in _ranked(findings)


def test_topology_attribute_without_version_keeps_both_readings():
    findings = diagnose_text(CPU_ATTR)
    assert _ranked(findings)[:2] == ["nccl-graph-file", "nccl-known-bug"]


# ---------------------------------------------------------------------------- mismatched collectives

def test_fingerprints_name_the_rank_that_diverged():
    fp = ("[I ProcessGroupWrapper.cpp:562] [Rank {r}] Running collective: CollectiveFingerPrint("
          "SequenceNumber={s}, OpType=BROADCAST, TensorShape=[{shape}], TensorDtypes={dt}, "
          "TensorDeviceTypes=TensorOptions(dtype=float))")
    text = "\n".join([fp.format(r=1, s=3, shape=1, dt="Long"), fp.format(r=0, s=4, shape=73, dt="Byte"),
                      fp.format(r=2, s=4, shape=73, dt="Byte"),
                      "RuntimeError: Detected mismatch between collectives on ranks. Rank 1 is running collective: "
                      "CollectiveFingerPrint(SequenceNumber=21, OpType=BROADCAST, TensorShape=[1], memory_format"])
    primary = _primary(text)
    assert primary.cause == "collective-mismatch" and primary.ranks == [1]


def test_fingerprints_without_a_failure_say_nothing():
    fp = ("[I ProcessGroupWrapper.cpp:562] [Rank {r}] Running collective: "
          "CollectiveFingerPrint(SequenceNumber={s}, OpType=ALLREDUCE)")
    assert diagnose_text(fp.format(r=0, s=5) + "\n" + fp.format(r=1, s=6)) == []


def test_nccl_device_side_mismatch():
    text = ("init.cc:1247 NCCL WARN Mismatched collective detected, please check your collective calls at and around "
            "rank 39. You can use NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS=COLL to see the collective logs")
    primary = _primary(text)
    assert primary.category == "mismatched_collectives" and 39 in primary.ranks


# ---------------------------------------------------------------------------- sockets that cannot bind

STORE_BIND = ("[W socket.cpp:436] [c10d] The server socket has failed to bind to 10.0.0.5:29500 (errno: {errno} - {text}).\n"
              "[E socket.cpp:472] [c10d] The server socket has failed to listen on any local network address.\n")


def test_a_store_that_cannot_bind_an_address_not_of_its_host_is_no_port_in_use():
    findings = diagnose_text(STORE_BIND.format(errno=99, text="Cannot assign requested address"))
    assert findings[0].cause == "address-not-local" and findings[0].category == "rendezvous_network"
    assert "port-in-use" in _ranked(findings)  # the generic 'failed to listen' keeps its usual reading second


def test_a_store_that_cannot_bind_a_taken_port_is_port_in_use():
    findings = diagnose_text(STORE_BIND.format(errno=98, text="Address already in use"))
    assert findings[0].cause == "port-in-use" and findings[0].confidence > 0.7


def test_a_bind_to_a_foreign_address_outside_c10d_is_read_from_the_os_error_alone():
    text = "zmq.error.ZMQError: Cannot assign requested address (addr='tcp://172.17.0.5:34762')"
    findings = diagnose_text(text)
    assert findings[0].cause == "address-not-local"
    assert "wrong-interface-selected" not in _ranked(findings)  # a bind names no path to another host


# ---------------------------------------------------------------------------- messages as other tools print them

@pytest.mark.parametrize("text", ["Test HIP failure common.cu:1129 'hipErrorInvalidDevice'",
                                  "cudaErrorInvalidDevice raised by cudaSetDevice(3)",
                                  "RuntimeError: CUDA error: invalid device ordinal"])
def test_a_cuda_error_is_read_by_its_text_or_by_its_name_in_cuda_or_hip_spelling(text):
    assert _primary(text).cause == "more-ranks-than-gpus"


def test_an_enum_name_is_not_read_as_a_longer_one_it_begins():
    from nccl_doctor.logs.signatures import template_signature
    from nccl_doctor.logs.templates import templates

    def sig(name):
        return template_signature(next(t for t in templates() if t.function == name))

    line = "error: cudaErrorInvalidDevicePointer"
    assert sig("cudaErrorInvalidDevicePointer").regex.search(line)
    assert not sig("cudaErrorInvalidDevice").regex.search(line)


def test_a_long_cuda_error_string_is_read_without_the_words_cuda_prints_before_it():
    assert _primary("peer mapping resources exhausted").category == "p2p_peer_access"
    assert all(f.cause != "cuda-oom" for f in diagnose_text("the cache is out of memory"))  # a short one needs them


def test_the_older_wording_of_a_cuda_error_is_read_like_the_current_one():
    old = _primary("RuntimeError: CUDA error: all CUDA-capable devices are busy or unavailable")
    new = _primary("RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable")
    assert old.cause == new.cause and old.category == "device_binding"


@pytest.mark.parametrize("text", ["<node ip>: fabric manager config file item: FABRIC_NODE_CONFIG_FILE has an invalid value",
                                  "[  212.870394] timeout waiting for: FM starting NvLink Inband",
                                  "nv-fabricmanager.service: Failed with result 'exit-code'."])
def test_fabric_managers_own_failures_name_it(text):
    assert _primary(text).cause == "fabric-manager"


STORE_WAITING = ("I0510 07:28:04.417845 139863945226048 distributed_c10d.py:337] Waiting in store based barrier to "
                 "initialize process group for rank: {r}, key: store_based_barrier_key:2 (world_size=8, worker_count=7, "
                 "timeout=0:30:00)")


def test_a_log_that_ends_in_a_store_barrier_still_waiting_for_a_rank_is_a_weak_store_wait():
    primary = _primary("\n".join(STORE_WAITING.format(r=r) for r in (2, 7)))
    assert primary.cause == "store-wait-timeout" and primary.confidence < 0.5
    assert primary.severity == Severity.WARNING and "6 of 8" not in primary.message and "7 of 8" in primary.message


def test_a_store_barrier_that_waited_and_went_on_is_no_clue():
    went_on = "\n".join(f"epoch 1 step {i} loss 2.31" for i in range(100))
    assert diagnose_text("\n".join(STORE_WAITING.format(r=r) for r in (2, 7)) + "\n" + went_on) == []


def test_a_library_that_demands_a_setting_names_it():
    text = ("[FATAL ERROR]: HSA_NO_SCRATCH_RECLAIM=1 must be set to avoid performance\n"
            "degradation with the current HIP configuration.\n")
    primary = _primary(text)
    assert primary.cause == "env-invalid-value" and primary.category == "nccl_config"
    assert diagnose_text("WANDB_API_KEY=xyz must be set") == []  # only the communication stack's variables


def test_an_allocation_the_remote_allocator_failed_is_a_stray_bootstrap_connection_not_an_oom():
    # NCCL 2.10's order: a stray connection closes, the next one sends a garbage size, its calloc fails
    rem = "h:39:298 [0] bootstrap.cc:279 NCCL WARN [Rem Allocator] Allocation failed (segment 0, fd 130)\n"
    text = ("h:39:298 [0] include/socket.h:423 NCCL WARN Net : Connection closed by remote peer 10.0.0.4<52638>\n"
            "h:39:298 [0] NCCL INFO bootstrap.cc:229 -> 2\n" + rem +
            "h:39:298 [0] include/alloc.h:48 NCCL WARN Cuda failure 'out of memory'\n"
            "h:39:298 [0] NCCL INFO bootstrap.cc:231 -> 1\n" + rem)
    findings = diagnose_text(text)
    assert findings[0].cause == "nccl-bootstrap-stray-connection"
    assert "cuda-oom" not in [f.cause for f in findings[1:]]  # folded under it, not a rival


def test_the_check_macros_of_nccl_examples_give_a_result_string_its_context():
    assert _primary("Failed, NCCL error a.cpp:106 'invalid usage'").category == "device_binding"
    assert _primary("Test NCCL failure all_reduce.cu:55 'unhandled system error'") is not None


def test_a_corrupted_heap_is_a_weak_library_defect():
    primary = _primary("free(): corrupted unsorted chunks\n[host:1] *** Process received signal ***\n")
    assert primary.cause == "nccl-known-bug" and primary.confidence < 0.5


def test_libfabric_finding_no_efa_device_names_the_efa_network():
    text = ("libfabric:...:core:core:fi_getinfo_():1391<warn> fi_getinfo: provider efa output empty list\n"
            "fi_getinfo: -61 (No data available)\n")
    assert _primary(text).cause == "efa-network-error"


# ---------------------------------------------------------------------------- hang right after init

NCCL_TESTS_START = """# nThread 1 nGpus 4 minBytes 8 maxBytes 268435456 step: 2(factor) warmup iters: 5
# Using devices
#   Rank  0 Pid  15833 on box device  0 [0x02] GeForce GTX 1080 Ti
#   Rank  1 Pid  15833 on box device  1 [0x03] GeForce GTX 1080 Ti
box:15833:15833 [0] NCCL INFO Bootstrap : Using [0]eth0:10.2.3.32<0>
NCCL version 2.4.8+cuda10.0
box:15833:15833 [0] NCCL INFO nranks 2
"""


def test_init_then_silence_on_pcie_gpus_is_a_weak_p2p_hang():
    primary = _primary(NCCL_TESTS_START)
    assert primary.cause == "p2p-acs-iommu" and primary.severity == Severity.WARNING
    assert primary.confidence <= 0.5 and "GeForce GTX 1080 Ti" in primary.message


OLD_NCCL_ONE_HOST_OF_TWO = """gpu2:46654:46654 [0] NCCL INFO NET : Using interface ib0:12.12.12.102<0>
NCCL version 2.3.7+cuda9.0
gpu2:46654:46654 [0] NCCL INFO rank 0 nranks 8
gpu2:46655:46655 [1] NCCL INFO rank 1 nranks 8
gpu2:46656:46656 [2] NCCL INFO rank 2 nranks 8
gpu2:46655:47153 [1] NCCL INFO comm 0x7f132405ad20 rank 1 nranks 8
gpu2:46655:47153 [1] NCCL INFO NET/Socket : 1 interfaces found
"""


@pytest.mark.parametrize("line", ["NCCL INFO nranks 8", "NCCL INFO rank 0 nranks 8", "NCCL INFO comm 0x7f13 rank 1 nranks 8",
                                  "NCCL INFO comm 0x7f13 rank 1 nranks 8 - COMPLETE",
                                  "NCCL INFO comm 0x7f13 rank 1 nranks 8 cudaDev 1 nvmlDev 1"])
def test_old_nccl_communicator_size_lines_are_read(line):
    from nccl_doctor.logs.signatures import signatures

    sig = next(s for s in signatures() if s.id == "nccl-old-nranks")
    assert sig.regex.search(f"gpu2:1:1 [0] {line}").group("ws") == "8"


def test_silence_after_init_with_ranks_on_hosts_the_log_lacks_is_no_local_p2p_hang():
    findings = diagnose_text(OLD_NCCL_ONE_HOST_OF_TWO)
    assert findings[0].cause == "master-unreachable" and "communicator of 8 ranks" in findings[0].message
    assert "3 of them" in findings[0].message and "p2p-acs-iommu" not in _ranked(findings)
    assert "host-unreachable" in _ranked(findings)


def test_results_mean_no_hang():
    row = "     8388608       2097152     float     sum      -1   1234.5    6.80   11.90      0"
    assert diagnose_text(NCCL_TESTS_START + row + "\n") == []


def test_a_crash_after_init_is_no_hang():
    assert diagnose_text(NCCL_TESTS_START + "Traceback (most recent call last):\nKeyError: 'labels'\n") == []


def test_output_after_init_means_no_hang():
    assert diagnose_text(NCCL_TESTS_START + "epoch 1 step 10 loss 2.31\n" * 60) == []


# ---------------------------------------------------------------------------- fallback

def test_unrecognised_warn_with_error_chain_is_an_error_by_result_code():
    text = ("node-1:1:9 [0] misc/strongstream.cc:395 NCCL WARN Some brand new failure\n"
            "node-1:1:9 [0] NCCL INFO misc/strongstream.cc:400 -> 3\nnode-1:1:9 [0] NCCL INFO init.cc:1500 -> 3\n")
    primary = _primary(text)
    assert primary.cause == "nccl-internal-error" and primary.severity == Severity.ERROR
    assert primary.message.startswith("fallback") and primary.confidence < 0.4
    assert "brand new failure" in primary.message


def test_unrecognised_warn_is_judged_by_its_source_file():
    text = ("node-1:1:9 [0] graph/xml.cc:999 NCCL WARN Something odd\n"
            "node-1:1:9 [0] NCCL INFO graph/topo.cc:700 -> 3\n")
    assert _primary(text).cause == "nccl-graph-file"


def test_lone_unrecognised_warn_is_only_a_warning():
    primary = _primary("node-1:1:9 [0] misc/foo.cc:12 NCCL WARN A heads-up\nepoch 1 loss 2.3\n")
    assert primary.severity == Severity.WARNING


def test_recognised_warn_lines_are_not_unrecognised():
    assert diagnose_text("node:1:1 [0] misc/ibvwrap.cc:63 NCCL WARN Failed to open libibverbs.so[.1]\n") == []


def test_unknown_distributed_error_is_an_error():
    primary = _primary("torch.distributed.DistBackendError: [3] something new happened\n")
    assert primary.severity == Severity.ERROR and primary.message.startswith("fallback")


def test_application_errors_are_not_nccl_findings():
    assert diagnose_text("Traceback (most recent call last):\nKeyError: 'labels'\n") == []


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from([
    "node-1:1:9 [0] misc/x.cc:1 NCCL WARN odd", "node-1:1:9 [0] NCCL INFO init.cc:1 -> 5", "epoch 3 loss 1.0",
    "torch.distributed.DistNetworkError: new", "frame #3: c10d::ProcessGroupNCCL::ncclCommWatchdog() + 0x10c",
    "[rank1]: 10%|█         | 1/10", "NCCL version 2.21.5+cuda12.4", MAX_SHARED]), max_size=12))
def test_fallback_is_never_confident(lines):
    for finding in diagnose_text("\n".join(lines) + "\n"):
        if finding.message.startswith("fallback"):
            assert finding.confidence < 0.5


# ---------------------------------------------------------------------------- heldout2 gaps (general wordings)

@pytest.mark.parametrize("line", [
    "NET/IBP:Got completion from peer 10.0.0.2<36315> with status=12 opcode=0 len=0 vendor err 129 (Send)",
    "NET/IB : Got completion from peer 10.0.0.2<36315> with error 12, opcode 0, len 0, vendor err 129",
    "Got completion from peer 10.0.0.2<36315> with status=IBV_WC_RETRY_EXC_ERR(12) opcode=0 len=0",
])
def test_ib_completion_status_whatever_the_prefix(line):
    assert diagnose_text(line)[0].cause == "ib-retry-exceeded"


def test_c10d_wait_for_input_timeout_is_a_store_wait():
    text = ("[rank1]:[W516 14:34:56.854 socket.cpp:489] [c10d] waitForInput: socket SocketImpl(fd=79, "
            "addr=[localhost]:41170, remote=[localhost]:29500) timed out after 1800000ms\n")
    assert diagnose_text(text)[0].cause == "store-wait-timeout"
    with_bar = "Running tokenizer on dataset:  92%|█████████▏| 9200/10000 [29:58<02:05, 4.1 examples/s]\n" + text
    assert diagnose_text(with_bar)[0].cause == "rank0-preprocessing"


CRASH = "[node-1:4242:0:4300] Caught signal 11 (Segmentation fault: address not mapped to object at address 0x48)\n"


def test_segfault_with_frames_in_libnccl_is_a_crash_in_nccl():
    text = CRASH + " 3  /usr/lib/x86_64-linux-gnu/libnccl.so.2(+0x120057) [0x7ff1c18c1057]\n"
    finding = diagnose_text(text)[0]
    assert finding.cause == "nccl-known-bug" and any("Upgrade NCCL" in f for f in finding.fix)


def test_segfault_without_nccl_frames_is_not_blamed_on_nccl():
    text = CRASH + " 3  /usr/lib/python3.10/site-packages/torch/lib/libtorch_cpu.so(+0x120057) [0x7ff1c18c1057]\n"
    assert all(f.cause != "nccl-known-bug" for f in diagnose_text(text))


def test_undefined_symbol_in_libnccl_is_not_a_crash_frame():
    text = CRASH + "ImportError: /usr/lib/libnccl.so.2: undefined symbol: ncclCommRegister\n"
    assert all(f.cause != "nccl-known-bug" or "backtrace" not in f.message for f in diagnose_text(text))


def test_open_mpi_signal_banner_right_after_nccl_output():
    text = ("node-1:405884:407462 [0] NCCL INFO RAS client listening socket at ::1<28028>\n"
            "[node-1:405884] *** Process received signal ***\n")
    finding = diagnose_text(text)[0]
    assert finding.cause == "nccl-known-bug" and any("NCCL_RAS_ENABLE=0" in f for f in finding.fix)


def test_acs_enabled_in_lspci_points_at_p2p():
    text = ("node:225:240 [1] NCCL INFO Channel 00 : 1[c2000] -> 0[c1000] via P2P/direct pointer\n"
            "                ACSCtl: SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-\n")
    assert diagnose_text(text)[0].cause == "p2p-acs-iommu"
    disabled = text.replace("SrcValid+", "SrcValid-").replace("Redir+", "Redir-")
    assert all(f.cause != "p2p-acs-iommu" for f in diagnose_text(disabled))


# ---------------------------------------------------------------------------- shared resources, link-local addresses

DF_SHM = "Filesystem      Size  Used Avail Use% Mounted on\nshm              {size}     0  {size}   0% /dev/shm"


@pytest.mark.parametrize("failure", ["", "\nRuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1269, unhandled system "
                                         "error, NCCL version 2.18.1"])
def test_a_64mb_dev_shm_is_named_and_a_warning_until_something_fails(failure):
    primary = _primary(DF_SHM.format(size="64M") + failure)
    assert primary.cause == "shm-too-small" and "/dev/shm is 64 MB" in primary.message
    assert (primary.severity == Severity.WARNING) == (not failure)


def test_a_large_dev_shm_is_not_blamed():
    assert not [f for f in diagnose_text(DF_SHM.format(size="32G")) if f.cause == "shm-too-small"]


@given(st.integers(min_value=1, max_value=1 << 40))
def test_shm_sizes_read_as_bytes_or_with_a_unit_agree(size):
    from nccl_doctor.logs.rules.resources import shm_bytes
    assert shm_bytes({"bytes": str(size)}) == size
    assert shm_bytes({"size": f"{size / (1 << 20):.4f}M"}) == pytest.approx(size, abs=(1 << 20) / 10_000 + 1)


def test_ray_reporting_a_small_dev_shm_names_it():
    line = ("2023-11-18 03:39:16,283 WARNING services.py:1996 -- WARNING: The object store is using /tmp instead of "
            "/dev/shm because /dev/shm has only 67108864 bytes available.")
    assert _primary(line).cause == "shm-too-small"


@pytest.mark.parametrize("event,error", [("local access violation work queue error", True),
                                         ("local catastrophic error", True), ("CQ error", True),
                                         ("port active", False), ("GID table change", False)])
def test_ib_async_events_are_errors_only_when_the_event_is_one(event, error):
    text = f"host-2:94639:94647 [0] transport/net_ib.cc:100 NCCL WARN NET/IB : mlx5_0:1 Got async event : {event}"
    assert ("ib-async-fatal" in _ranked(diagnose_text(text))) == error


def test_a_refused_connection_to_an_ipv4_link_local_address_is_a_wrong_interface():
    text = ("node-1:7:7 [0] NCCL INFO NET/Socket : Using [0]enp73s0:10.1.216.156<0> [1]pod-id-link0:169.254.170.23<0>\n"
            "node-1:7:9 [0] misc/socket.cc:484 NCCL WARN socketPollConnect: connect to 169.254.170.23<41233> returned "
            "Connection refused, retrying (13/34)")
    primary = _primary(text)
    assert primary.cause == "wrong-interface-selected" and "169.254.170.23" in primary.message


def test_the_net_stack_reading_of_an_einval_memory_registration_keeps_efa_as_the_alternative():
    findings = diagnose_text("register_mr_buffers:544 NCCL WARN NET/OFI Unable to register memory (type = 2) for "
                             "device 0. RC: -22, Error: Invalid argument")
    assert findings[0].cause == "net-stack-too-old" and findings[0].confidence < 0.5
    assert "efa-network-error" in _ranked(findings)


def test_every_device_of_a_socket_list_is_judged_not_only_the_first():
    text = ("node-1:7:7 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.4<0> [1]docker0:172.17.0.1<0>\n"
            "node-2:7:7 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.5<0> [1]docker0:172.17.0.1<0>")
    assert "docker0" in " ".join(f.message for f in diagnose_text(text))


# ---------------------------------------------------------------------------- main_process_first

MAIN_PROCESS_FIRST = ('  File "/src/train.py", line 216, in preprocess\n'
                      '    with training_args.main_process_first(desc="dataset map pre-processing"):\n'
                      '  File "/usr/lib/python3.10/contextlib.py", line 135, in __enter__\n'
                      '    return next(self.gen)\n')


def test_a_timeout_inside_main_process_first_is_the_main_process_preprocessing():
    text = MAIN_PROCESS_FIRST + _timeouts([1], op="_ALLGATHER_BASE", n=1, seq=1)
    assert "rank0-preprocessing" in _ranked(diagnose_text(text))[:1]


def test_an_error_the_barrier_raised_at_once_is_not_waiting_for_the_main_process():
    text = MAIN_PROCESS_FIRST + (
        "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1331, unhandled cuda error "
        "(run with NCCL_DEBUG=INFO for details), NCCL version 2.18.5\n"
        "ncclUnhandledCudaError: Call to CUDA function failed.\nLast error:\nCuda failure 'invalid argument'\n")
    findings = diagnose_text(text)
    assert findings[0].cause == "nccl-known-bug"  # NCCL's own CUDA call rejected an argument (2.18.x)
    assert not any("barrier" in f.message for f in findings)  # the waiting reading is not offered at all


# ---------------------------------------------------------------------------- settings

def test_an_nccl_setting_is_read_where_more_text_follows_on_its_line():
    # a paste that lost its newlines: every NCCL message on one line
    text = ("[0] NCCL INFO NCCL_IB_DISABLE set by environment to 0. [0] NCCL INFO NET/IB : No device found. "
            "[0] NCCL INFO NET/Socket : Using [0]eth0:10.1.2.3<0> [0] NCCL INFO Using network Socket")
    assert _primary(text).category == "infiniband_roce"


# ---------------------------------------------------------------------------- lessons of blind batches 18-19

def test_a_failed_connection_to_dockers_default_bridge_names_the_interface():
    text = ("[E socket.cpp:922] [c10d] The client socket has timed out after 1800s while trying to connect to "
            "(172.17.0.2, 44737).")
    assert "wrong-interface-selected" in _ranked(diagnose_text(text))[:3]
    elsewhere = text.replace("172.17.0.2", "10.20.0.2")
    assert "wrong-interface-selected" not in _ranked(diagnose_text(elsewhere))


def test_a_process_that_sees_no_gpu_is_not_one_with_too_few():
    primary = _primary("[rank=0] RuntimeError: ProcessGroupNCCL is only supported with GPUs, no GPUs found!")
    assert primary.cause == "no-gpu-visible" and primary.category == "cuda_error"


def test_no_network_transport_at_all_outweighs_a_bare_invalid_usage():
    primary = _primary("NCCL error: invalid usage\nNCCL WARN Failed to initialize any NET plugin\n")
    assert primary.cause in ("ib-missing-in-container", "socket-ifname-no-match", "net-plugin-differs")
    assert primary.cause != "duplicate-gpu"


# ---------------------------------------------------------------------------- lessons of blind batches 31-36

def test_nccls_own_bind_finding_its_address_in_use_is_out_of_ephemeral_ports():
    primary = _primary("node-3:1234:1290 [0] misc/socket.cc:409 NCCL WARN Call to bind failed : Address already in use")
    assert primary.cause == "ephemeral-ports-exhausted"  # NCCL binds port 0 unless NCCL_COMM_ID forces one
    store = _primary("[W socket.cpp:401] [c10d] The server socket has failed to bind to [::]:29400 (errno: 98 - "
                     "Address already in use).")
    assert store.cause == "port-in-use"  # the store binds the port it was given


def test_iommu_faults_in_dmesg_name_the_iommu_breaking_peer_to_peer():
    text = ("[1478401.486981] DMAR: [DMA Write] Request device [02:00.0] fault addr cd139000 [fault reason 05] "
            "PTE Write access is not set\n"
            "[ 512.3] nvidia 0000:41:00.0: AMD-Vi: Event logged [IO_PAGE_FAULT domain=0x000d address=0x1f0 "
            "flags=0x0020]\n")
    assert _primary(text).cause == "p2p-acs-iommu"


def test_tensorflow_stopping_at_its_first_nccl_all_reduce_is_the_local_peer_to_peer_hang():
    text = ("Epoch 1/500\nINFO:tensorflow:batch_all_reduce: 4 all-reduces with algorithm = nccl, num_packs = 1\n"
            "INFO:tensorflow:Reduce to /job:localhost/replica:0/task:0/device:CPU:0 then broadcast to "
            "('/job:localhost/replica:0/task:0/device:CPU:0',).\n")
    assert _primary(text).cause == "p2p-acs-iommu"
    went_on = text + "".join(f"{i}/500 [====] - loss: 0.{i}\n" for i in range(60))
    assert not diagnose_text(went_on)


def test_a_batch_skipped_after_an_oom_on_one_rank_desynchronises_the_others():
    text = ("WARNING: ran out of memory with exception: CUDA out of memory. Tried to allocate 332.00 MiB (GPU 0; "
            "10.91 GiB total capacity);\n Skipping batch\n")
    findings = diagnose_text(text)
    assert findings[0].cause == "uneven-batches" and "cuda-oom" in _ranked(findings)
    assert _primary("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n").cause == "cuda-oom"


def test_the_watchdogs_timeout_at_work_line_is_a_timeout_on_its_own():
    text = ("[rank4]:[E114 15:08:00.554388780 ProcessGroupNCCL.cpp:1709] [PG 0 (default_pg) Rank 4] Timeout at NCCL "
            "work: 175, last enqueued NCCL work: 175, last completed NCCL work: 174.\n")
    primary = _primary(text)
    assert primary.category == "collective_timeout_desync" and primary.cause != "rank-died"


def test_a_gloo_full_mesh_that_fails_after_the_store_worked_is_an_advertised_address():
    primary = _primary("RuntimeError: Gloo connectFullMesh failed with [../third_party/gloo/gloo/transport/tcp/"
                       "pair.cc:144] no error")
    assert primary.cause == "wrong-interface-selected"


def test_nccls_cuda_call_rejecting_its_argument_reads_as_an_nccl_defect_unless_nvls_explains_it():
    text = "NCCL WARN Cuda failure 'invalid argument'\nNCCL version 2.18.1\n"
    assert _primary(text).cause == "nccl-known-bug"
    nvls = ("node-1:1:1 [0] transport/nvls.cc:376 NCCL WARN Failed to bind NVLink SHARP (NVLS) Multicast memory of "
            "size 1073741824 : CUDA error 1 'invalid argument'.\n" + text)
    assert _primary(nvls).category == "nvls_nvlink"


# ---------------------------------------------------------------------------- lessons of blind batches 37-39

def test_the_kernel_oom_killer_and_torchruns_sigkill_name_host_memory():
    killed = _primary("[856341.770960] Out of memory: Killed process 410126 (python) total-vm:79905000kB, "
                      "anon-rss:22957108kB, file-rss:72036kB, shmem-rss:15143164kB, UID:1000 oom_score_adj:0")
    assert killed.cause == "host-oom-killed" and killed.category == "resource_exhaustion"
    elastic = _primary("torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: -9) local_rank: 1 "
                       "(pid: 14447) of binary: /usr/bin/python")
    assert elastic.cause == "host-oom-killed"
    aborted = diagnose_text("torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: -6) "
                            "local_rank: 1 (pid: 14447) of binary: /usr/bin/python")
    assert "host-oom-killed" not in _ranked(aborted)  # SIGABRT is the watchdog's own abort


def test_sockets_over_an_infiniband_interface_mean_nccls_ib_transport_was_not_usable():
    verbs = "node1:1:1 [0] NCCL INFO Failed to open libibverbs.so[.1]\n"
    socket = ("node1:1:1 [0] NCCL INFO NET/Socket : Using [0]ib0:10.1.0.5<0>\nnode1:1:1 [0] NCCL INFO Using network "
              "Socket\nnode2:7:7 [0] NCCL INFO NET/Socket : Using [0]ib0:10.1.0.6<0>\n")
    assert _primary(verbs + socket).cause == "ib-missing-in-container"
    assert _primary(socket).cause == "ib-not-used"
    assert not diagnose_text(socket.replace("ib0", "eth0"))
    one_host = diagnose_text(socket.split("node2")[0])  # a single-host job sets up sockets it never uses
    assert one_host[0].confidence < 0.5 and one_host[0].severity.name == "WARNING"


def test_paddles_nccl_context_then_silence_is_a_setup_across_hosts():
    text = "I0302 02:01:36.274989 31267 nccl_context.cc:83] init nccl context nranks: 4 local rank: 0 gpu id: 0\n"
    assert _primary(text).cause == "master-unreachable"
    assert "host-unreachable" in _ranked(diagnose_text(text))[:3]


def test_a_shared_memory_segment_of_size_zero_is_a_misread_descriptor():
    text = "[rank1]: Error while attaching to shared memory segment /dev/shm/nccl-{} (size {}), error: No such file " \
           "or directory (2)\n"
    assert _primary(text.format("\u040c", 0)).cause == "nccl-known-bug"
    assert _primary(text.format("abc123", 9637888)).cause == "shm-not-shared"


# ---------------------------------------------------------------------------- launchers and wrappers

def test_launcher_messages_of_the_wrappers_name_their_cause():
    ssh = _primary("RuntimeError: Using hostfile at /job/hostfile but host=worker-1 was not reachable via ssh. If you "
                   "are running with a single node please remove /job/hostfile or setup passwordless ssh.")
    assert ssh.category == "rendezvous_network"
    port = _primary("ConnectionError: Tried to launch distributed communication on port `29500`, but another process "
                    "is utilizing it. Please specify a different port (such as using the `--main_process_port` flag or "
                    "specifying a different `main_process_port` in your config file) and rerun your script.")
    assert port.cause == "port-in-use"
    slurm = _primary("ValueError: You set `num_nodes=2` in Lightning, but the number of nodes configured in SLURM "
                     "`--nodes=1` does not match. HINT: Set `num_nodes=1`.")
    assert slurm.cause == "rank-config-invalid"


def test_a_wrappers_hostfile_notice_is_a_weak_clue_at_most():
    local = diagnose_text("[WARNING] Unable to find hostfile, will proceed with training with local resources only.")
    assert not local or local[0].confidence < 0.5  # printed by every single-node run: a weak clue at most


# ---------------------------------------------------------------------------- lessons of batches 41-46

def test_exit_signals_read_the_same_from_every_launcher():
    for line in ("[2023-07-20 15:45:13,982] [ERROR] [launch.py:321:sigkill_handler] ['/usr/bin/python3', '-u', "
                 "'main.py', '--local_rank=1'] exits with return code = -7",
                 "subprocess.CalledProcessError: Command '['/usr/bin/python', 'train.py']' died with "
                 "<Signals.SIGBUS: 7>."):
        assert _primary(line).cause == "shm-too-small"
    killed = _primary("[ERROR] [launch.py:321:sigkill_handler] ['/usr/bin/python3', '-u', 'main.py'] exits with "
                      "return code = -9")
    assert killed.cause == "host-oom-killed"
    assert "shm-too-small" not in _ranked(diagnose_text("[ERROR] [launch.py:321:sigkill_handler] ['python', "
                                                         "'main.py'] exits with return code = -70"))


def test_gloos_address_family_check_names_ipv4_and_ipv6_peers():
    primary = _primary("[rank0]: RuntimeError: [enforce fail at ../third_party/gloo/gloo/transport/tcp/device.cc:276] "
                       "ss1.ss_family == ss2.ss_family. 2 vs 10")
    assert primary.cause == "address-family-differs" and primary.category == "rendezvous_network"


@pytest.mark.parametrize("line, named, fix_word", [
    # a PyTorch without libuv (Windows' wheels) asked for the default libuv TCPStore
    ("RuntimeError: use_libuv was requested but PyTorch was build without libuv support", "tcpstore-libuv-missing",
     "USE_LIBUV=0"),
    # Envoy's answer where an Istio sidecar denies the rendezvous port
    ("rbac_access_denied_matched_policy[none]", "master-unreachable", "sidecar"),
    # the NCCL backend asked of a build without NCCL (Windows, macOS, CPU wheels)
    ("RuntimeError: Distributed package doesn't have NCCL built in", "nccl-backend-unavailable", "gloo"),
])
def test_a_message_names_its_cause_and_the_fix_that_applies(line, named, fix_word):
    primary = _primary(line)
    assert primary.cause == named
    assert any(fix_word in step for step in cause(primary.cause).fix)


def test_compiler_errors_naming_nccl_mean_headers_older_than_the_code():
    for line in ('nccl.cu(99): error: class "ncclDevCommRequirements" has no member "ginTrafficClass"',
                 'csrc/ops.cu(12): error: identifier "ncclCommRegister" is undefined',
                 "pynccl.cpp:40:5: error: 'ncclGroupSimulateEnd' was not declared in this scope",
                 "comm.cc:7:3: error: use of undeclared identifier 'NCCL_CONFIG_UNDEF_INT'"):
        assert _primary(line).cause == "nccl-too-old-for-build", line
    assert not diagnose_text("main.cu(3): error: identifier \"cudaFooBar\" is undefined") or \
        _primary("main.cu(3): error: identifier \"cudaFooBar\" is undefined").cause != "nccl-too-old-for-build"


@pytest.mark.parametrize("text, category", [
    # accelerate refusing RTX 4000 boards names missing peer-to-peer
    ("NotImplementedError: Using RTX 4000 series doesn't support faster communication broadband via P2P or IB. Please "
     "set `NCCL_P2P_DISABLE=\"1\"` and `NCCL_IB_DISABLE=\"1\" or use `accelerate launch` which will do this "
     "automatically.", "p2p_peer_access"),
    # a worker killed by SIGBUS points at shared memory
    ("The worker fails with {0: ProcessFailure(local_rank=0, pid=54, exitcode=-7, error_file='<N/A>', "
     "message='Signal 7 (SIGBUS) received by PID 54', timestamp=1711419181)}", "shm_too_small"),
    # Fabric Manager refusing a driver of another version than its own
    ("fabric manager NVIDIA GPU driver interface version 590.48.01 don't match with driver version 580.126.09.\n"
     "Please update with matching NVIDIA driver package.", "nvls_nvlink"),
    # NCCL's queue-pair failure as users quote it, without 'Call to'
    ("NCCL error: unhandled system error\nibv_modify_qp failed with 110 Connection timed out, on dev rocep1s0f0:1\n",
     "infiniband_roce"),
    # the driver's failed probe of a GPU
    ("NVRM: The NVIDIA GPU 000a:00:00.0 (PCI ID: 10de:2330) installed in this system\n"
     "NVRM: The NVIDIA probe routine failed for 1 device(s).\n", "hardware_fault"),
    ("    torch._C._cuda_setDevice(device)", "device_binding"),  # set_device as a traceback's last frame
    ("INFO 2020-08-18 05:27:18,490 Keep-alive key /torchelastic/p2p/run_x/rdzv/v_4/rank_1 is not renewed.\n"
     "INFO 2020-08-18 05:27:18,490 Rendevous version 4 is incomplete.", "rendezvous_network"),
    ("WARNING 07-10 12:00:01 custom_all_reduce.py:134] Custom allreduce is disabled because your platform lacks GPU "
     "P2P capability or P2P test failed. To silence this warning, specify disable_custom_all_reduce=True explicitly.",
     "p2p_peer_access"),
    ("RuntimeError: Unable to meet other processes at the rendezvous store. If you are using P2P communication, "
     "please check if tensors are put in the correct GPU.", "rendezvous_network"),
    ("RuntimeError: Failed to recognize coordinator address 10.0.0.1:1234 on host vm-0", "rendezvous_network"),
])
def test_a_message_reads_as_its_category(text, category):
    assert _primary(text).category == category


def test_tracebacks_cut_before_their_message_still_name_the_rendezvous_step():
    unset = _primary('  File "/env/lib/python3.8/site-packages/torch/distributed/rendezvous.py", line 166, in '
                     '_env_rendezvous_handler\n    raise _env_error("MASTER_ADDR")\n')
    assert unset.cause == "rank-config-invalid"
    store = _primary('  File "/env/lib/python3.7/site-packages/torch/distributed/rendezvous.py", line 133, in '
                     '_tcp_rendezvous_handler\n    store = TCPStore(result.hostname, result.port, world_size, '
                     'start_daemon, timeout)\n')
    assert store.category == "rendezvous_network" and store.confidence < 0.5


# ---------------------------------------------------------------------------- lessons of batches 47-49

def test_a_watchdog_line_with_placeholders_is_still_a_timeout():
    primary = _primary("Watchdog caught collective operation timeout: WorkNCCL(... OpType=BROADCAST ...)\n"
                       "ran for 3600001 ms before timing out  ->  Signal 6 (SIGABRT)")
    assert primary.category in ("collective_timeout_desync", "timeout_rank0_only_work")
    gloo = _primary("[../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting xxxx ms for recv "
                    "operation to complete")
    assert gloo.cause == "collective-timeout"


def test_a_workers_network_settings_overwritten_by_the_drivers():
    ib = _primary("Overwriting environment variable NCCL_IB_HCA from 'rocep1s0f0,roceP2p1s0f0' to "
                  "'rocep1s0f1,roceP2p1s0f1'")
    assert ib.cause == "network-setting-propagated"
    ifname = _primary("Overwriting environment variable NCCL_SOCKET_IFNAME from 'enp1s0f0np0' to 'enp1s0f1np1'")
    assert ifname.category == "network_interface"
    assert not diagnose_text("Overwriting environment variable HF_HOME from '/a' to '/b'")


def test_a_file_rendezvous_points_at_a_leftover_file():
    primary = _primary("init method: file://distributed.dpt\nbackend: nccl\nrank: 0\n")
    assert primary.cause == "rendezvous-file-stale" and primary.confidence < 0.5
    assert not diagnose_text("Saved checkpoint to file:///tmp/ckpt.pt")


# ---------------------------------------------------------------------------- lessons of batches 51-60

HOROVOD_STALL = ("[2021-03-01 10:00:00.000000: W /tmp/horovod/common/stall_inspector.cc:107] One or more tensors were "
                 "submitted to be reduced, gathered or broadcasted by subset of ranks and are waiting for remainder of "
                 "ranks for more than 60 seconds. This may indicate that different ranks are trying to submit different "
                 "tensors or that only subset of ranks is submitting tensors, which will cause deadlock. \n"
                 "Missing ranks:\n1: [DistributedAdamOptimizer_Allreduce/HorovodAllreduce_grads_0]\n")


@pytest.mark.parametrize("text, cause", [
    # ncclGetErrorString's default case: a code from another NCCL build in the process
    ("Failed, NCCL error /src/plugins/ncclPlugin/allreducePlugin.cpp:183 'unknown result code'",
     "conflicting-nccl-packages"),
    ("NCCL WARN NET/IB : Got async event : port error", "ib-port-down"),  # NCCL <= 2.22's wording
    ("fi_getinfo: -61 (No data available)", "efa-network-error"),  # fi_info -p efa finding no device
    ("XGBoostError: device_helpers.cu:64: Check failed: n_uniques == world (1 vs. 2) : Multiple processes within "
     "communication group running on same CUDA device is not supported", "duplicate-gpu"),
    ("WARNING 07-10 12:10:00 shm_broadcast.py:396] No available block found in 60 second. ", "rank-hang"),
    ("RuntimeError: world_size (8) is not equal to tensor_model_parallel_size (4) x pipeline_model_parallel_size (1)",
     "rank-config-invalid"),
    # every attribute of a config struct read with another release's layout, not only `blocking`
    ("node-1:1:1 [0] init.cc:1813 NCCL WARN Invalid config cgaClusterSize attribute value -2147483648",
     "torch-nccl-incompatible"),
    # cudawrap resolves the driver's entry points: a missing one is a driver older than the build expects
    ("node-1:1:1 [0] misc/cudawrap.cc:188 NCCL WARN Failed to load CUDA missing symbol cuInit", "cuda-driver-too-old"),
    # words such as 'resolve' in a hint and 'socket' in a message no longer decide
    ("Skipping IntraNodeComm::rendezvous() because participants have overlapping devices. To resolve this, call "
     "torch.cuda.set_device() before init_process_group().", "collective-before-set-device"),
    ("torch.distributed.DistNetworkError: Failed to recv, got 0 bytes. Connection was likely closed. Did the remote "
     "server shutdown or crash?", "rank-died"),
    ("ncclSystemError: System call (socket, malloc, munmap, etc) failed.", "shm-too-small"),
    (HOROVOD_STALL, "collective-mismatch"),
])
def test_a_message_reads_as_its_cause(text, cause):
    assert _primary(text).cause == cause


@pytest.mark.parametrize("line", [
    "NCCL WARN NET/IB : Got async event : port active",
    "INFO 05-21 10:01:12 pynccl.py:63] vLLM is using nccl==2.21.5",
    "[INFO] The node 'gpu-node01_4242_0' has joined round 0 of the rendezvous 'job42' as rank 0 in a world of size 2.",
    "gpu-node01:1:1 [0] NCCL INFO Could not get device class for NVLink target 0000:07:00.0, assuming NVSwitch",
    "INFO 05-01 10:00:00 ray_utils.py:200] No current placement group found. Creating a new placement group.",
    # an elastic job that grows restarts its workers
    "[INFO] 2020-08-18 05:27:13,224 api: [default] Detected 1 new nodes from group_rank=0; will restart worker group",
    "UserWarning: It is recommended to use `self.log('loss', ..., sync_dist=True)` when logging on epoch level in "
    "distributed setting to accumulate the metric across devices.",
])
def test_a_notice_of_a_healthy_run_is_not_a_failure(line):
    assert not diagnose_text(line)


def test_a_bare_system_error_weighs_the_interface_only_where_no_host_is_named():
    bare = diagnose_text("NCCL failure :unhandled system error /src/common/device_helpers.cu(67)")
    assert bare[0].cause == "shm-too-small" and bare[0].confidence < 0.5
    assert "wrong-interface-selected" in [f.cause for f in bare[:3]]
    one_host = diagnose_text("node-1:11:11 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n"
                             "node-1:11:11 [0] NCCL INFO NCCL version 2.18.3+cuda12.1\n"
                             "RuntimeError: NCCL error: unhandled system error, NCCL version 2.18.3")
    assert one_host[0].cause == "shm-too-small"
    assert "wrong-interface-selected" not in [f.cause for f in one_host]
    xgboost = diagnose_text("XGBoostError: [10:00:00] src/collective/nccl_stub.cc:25: NCCL failure: unhandled system "
                            "error. This might be caused by a network configuration issue. Please consider specifying "
                            "the network interface for NCCL via environment variables listed in its reference: "
                            "`https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html`.")
    assert "wrong-interface-selected" in [f.cause for f in xgboost[:2]]


def test_a_log_that_ends_in_nvls_setup_names_nvls():
    text = ("c2ce1c877ea3:1023:1032 [0] NCCL INFO NVLS multicast support is available on dev 0\n"
            "c2ce1c877ea3:1023:1032 [0] NCCL INFO NVLS Bind mem 0xac0000000 UC handle 0x7f3310ccb240 MC handle "
            "0x7f3310ccaa20 size 1073741824\n")
    assert _primary(text).cause == "nvls-failure"
    went_on = text + "\n".join(f"step {i} loss 0.5" for i in range(10)) + "\n"
    assert all(f.cause != "nvls-failure" for f in diagnose_text(went_on))


def test_a_store_wait_that_ran_out_keeps_the_rank_that_never_joined_as_the_alternative():
    findings = diagnose_text("torch.distributed.DistStoreError: Socket Timeout")
    assert findings[0].cause == "store-wait-timeout"
    assert "store-timeout" in [f.cause for f in findings[1:3]]


def test_a_log_cut_after_nvls_support_is_announced_is_not_an_nvls_hang():
    text = "c2ce1c877ea3:1023:1032 [0] NCCL INFO NVLS multicast support is available on dev 0\n"
    assert all(f.cause != "nvls-failure" for f in diagnose_text(text))
