"""Lines of a pasted excerpt that no signature recognised: a line wrapped at a terminal's width is read joined
with the next, and a message cut at the edge or reworded by a wrapper reads as its source template from most of
its words (logs/fragments.py), weaker than an exact match. Only in small sources."""

from __future__ import annotations

import io

from hypothesis import given, settings
from hypothesis import strategies as st

from nccl_doctor.logs import diagnose_text
from nccl_doctor.logs.fragments import MIN_COVERAGE, covered, index, template_tokens, tokens
from nccl_doctor.logs.reading import FRAGMENT_BYTES, Collector
from nccl_doctor.logs.sources import Source

HEALTHY = [
    "host-1:123:456 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC",
    "host-1:123:456 [0] NCCL INFO comm 0x55d1 rank 0 nranks 8 cudaDev 0 busId 1000 - Init COMPLETE",
    "Epoch 3: 100%|##########| 500/500 [01:02<00:00, 8.01it/s, loss=0.231]",
    "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid your system being "
    "overloaded, please further tune the variable for optimal performance in your application as needed.",
    "INFO: Saving checkpoint to /ckpt/step_1000 (rank 0 of 8, device cuda:0)",
]


def test_a_message_cut_at_its_last_letter_reads_as_its_template():
    primary = diagnose_text("peer access is not supported between these two device")[0]
    assert primary.cause == "p2p-not-supported"
    assert primary.confidence < 0.5  # a part of a message is weaker evidence than the message


def test_a_wrapper_that_keeps_the_middle_of_nccls_message_reads_as_it():
    text = ("Error: rank 27 and rank 19 both on CUDA device 53000 (PCI 53:00.0)\n"
            "Error: rank 29 and rank 21 both on CUDA device 91000 (PCI 91:00.0)\n")
    primary = diagnose_text(text)[0]
    assert primary.cause == "duplicate-gpu" and primary.category == "device_binding"
    assert "Duplicate GPU detected" in primary.message


def fragments(data: bytes) -> int:
    """How many lines of one source were read as a template from part of their words."""
    collector = Collector()
    collector.add_source(Source(name="x.log", stream=io.BytesIO(data)))
    return len(collector.finish().hints.get("template_fragment", []))


def test_an_exact_match_is_not_read_again_as_a_fragment():
    text = "node1:1:1 [0] init.cc:42 NCCL WARN Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1000"
    assert diagnose_text(text)[0].cause == "duplicate-gpu"
    assert fragments(text.encode()) == 0


def test_healthy_lines_read_as_no_template():
    for line in HEALTHY:
        assert index().read(line) is None, line
    assert fragments("\n".join(HEALTHY).encode()) == 0


def test_big_sources_are_read_by_their_exact_signatures_only():
    line = b"peer access is not supported between these two device\n"
    filler = b"host-1:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC\n"
    assert fragments(filler * 10 + line) == 1
    assert fragments(filler * (FRAGMENT_BYTES // len(filler) + 1) + line) == 0


def test_template_words_stand_numbers_as_one_word_and_strings_as_gaps():
    assert template_tokens("rank %d on device %lx: %s failed") == ["rank", "#", "on", "device", "#", "\x00",
                                                                   "failed"]
    assert tokens("PCI 53:00.0 mlx5_0 Error") == ["pci", "#", "#", "#", "#", "#", "error"]


def test_coverage_counts_words_in_order():
    template = tuple(tokens("peer access is not supported between these two devices"))
    assert covered(template, tokens("peer access is not supported between these two devices")) == 1.0
    assert covered(template, tokens("devices two these between supported not is access peer")) < MIN_COVERAGE
    assert covered(template, tokens("peer access")) == 0.0  # too few words to tell


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_any_text_reads_without_error(text):
    found = index().read(text)
    assert found is None or MIN_COVERAGE <= found.coverage <= 1.0


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_a_template_cut_by_a_word_at_either_end_still_reads_as_a_template_with_its_words(data):
    entry = data.draw(st.sampled_from([e for e in index().entries if len(e.words) >= 8]))
    words = [w if w != "#" else "7" for w in entry.words]
    cut = words[1:] if data.draw(st.booleans()) else words[:-1]
    found = index().read(" ".join(cut))
    assert found is not None
    assert covered(tuple(tokens(" ".join(cut))), tokens(" ".join(words))) == 1.0
    assert found.coverage >= round(covered(entry.words, tokens(" ".join(cut))), 2)


WATCHDOG = ("[rank3]:[E ProcessGroupNCCL.cpp:563] [Rank 3] Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum=15037, OpType=_ALLGATHER_BASE, NumelIn=131072512, NumelOut=524290048, "
            "Timeout(ms)=600000) ran for 600055 milliseconds before timing out.")


def test_a_line_wrapped_mid_word_is_read_joined_with_the_next():
    cut = WATCHDOG.index("Timeo") + len("Timeo")
    primary = diagnose_text(WATCHDOG[:cut] + "\n" + WATCHDOG[cut:] + "\n")[0]
    assert primary.cause == "collective-timeout" and primary.ranks == [3]
    assert "SeqNum=15037" in primary.message


def test_a_line_wrapped_at_a_space_is_read_joined_with_the_next():
    text = "host-1:1:1 [0] init.cc:42 NCCL WARN Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1000"
    cut = text.index(" both on")
    primary = diagnose_text(text[:cut] + "\n" + text[cut + 1:] + "\n")[0]
    assert primary.cause == "duplicate-gpu"


def test_lines_that_mean_nothing_joined_stay_nothing():
    assert diagnose_text("Loading checkpoint shards from /data/model, please wait\nEpoch 1 finished in 93 s\n") == []


def test_a_wrapped_line_that_only_a_context_hint_knows_is_still_joined():
    text = ("(RayWorkerVllm pid=207931, ip=10.0.1.75) [E socket.cpp:922] [c10d] The client socket has timed out "
            "after 1800s while trying to connect to (10.0.0.2\n, 44737).\n")
    assert "master-unreachable" in [f.cause for f in diagnose_text(text)]
