"""The detector on made-up heartbeats: every rule, and silence on a healthy job."""

from __future__ import annotations

import sys
import threading

import pytest
from hypothesis import given, settings as hsettings, strategies as st

from nccl_doctor.runtime.detect import MAX_COMPARED, Detector, arrival_lags
from nccl_doctor.runtime.heartbeat import cpu_times
from nccl_doctor.runtime.settings import Settings, phase_rule

SETTINGS = Settings.defaults().with_(hang_after=3.0, stale_after=6.0, beat=0.5)


def beat(rank: int, n: int, *, seq: int, idle: float = 0.0, step: int | None = None, phase: str = "train",
         arrivals: list | None = None, step_time: float | None = None, state: str = "running",
         stack: list[str] | None = None, max_gap: float = 0.0, pg_timeout: float = 1800.0) -> dict:
    return {"rank": rank, "host": f"node{rank // 2}", "pid": 100 + rank, "beat": n, "state": state, "step": step,
            "step_time": step_time, "phase": phase, "phase_s": 1.0, "seq": seq, "idle": idle,
            "arrivals": arrivals or [], "max_gap": max_gap, "max_gap_phases": ["train"], "max_gap_step": step,
            "pg_timeout": pg_timeout, "stack": stack or []}


def arrivals(start_seq: int, count: int, period: float, delay: float = 0.0, jitter: float = 0.0) -> list:
    return [[start_seq + i, 1000.0 + i * period + delay + (jitter if i % 2 else -jitter)] for i in range(count)]


def run_polls(detector: Detector, make, polls: int, every: float = 0.5) -> list:
    found = []
    for i in range(polls):
        found += detector.observe(make(i), now=i * every)
    return found


def test_a_healthy_job_yields_nothing():
    d = Detector(SETTINGS, 4)
    found = run_polls(d, lambda i: {r: beat(r, i, seq=30 + i, step=10 + i, step_time=1.0, idle=0.2,
                                            arrivals=arrivals(i, 30, 1.0, jitter=0.005 * r)) for r in range(4)}, 8)
    assert found == [] and d.report().findings == []


def test_a_rank_late_at_every_collective_is_a_straggler_reported_once():
    d = Detector(SETTINGS, 4)
    make = lambda i: {r: beat(r, i, seq=30 + i, step=10 + i, step_time=1.0,  # noqa: E731
                              arrivals=arrivals(i, 30, 1.0, delay=0.3 if r == 2 else 0.0)) for r in range(4)}
    found = run_polls(d, make, 6)
    assert [(f.cause, f.ranks) for f in found] == [("straggler-rank", [2])]
    assert "0.30 s after the others" in found[0].message and "waits for it 30% of the time" in found[0].message
    assert "rising" not in found[0].message
    assert found[0].hosts == ["node1"]


def test_a_lag_that_grows_after_a_resume_is_named_as_rising():
    """The culprit's loader gets slower every step (as after a resume that skips batches unevenly)."""
    d = Detector(SETTINGS, 4)

    def window(i: int, rank: int) -> list:
        return [[i + k, 1000.0 + (i + k) + (0.05 * (i + k) if rank == 2 else 0.0)] for k in range(30)]

    found = run_polls(d, lambda i: {r: beat(r, i, seq=30 + i, step=10 + i, step_time=1.0, arrivals=window(i, r))
                                    for r in range(4)}, 6)
    assert [(f.cause, f.ranks) for f in found] == [("straggler-rank", [2])]
    assert "rising from" in found[0].message, found[0].message


def test_a_lag_small_against_the_step_time_is_not_a_straggler():
    d = Detector(SETTINGS, 4)
    make = lambda i: {r: beat(r, i, seq=30 + i, step=10 + i, step_time=1.0,  # noqa: E731
                              arrivals=arrivals(i, 30, 1.0, delay=0.1 if r == 2 else 0.0)) for r in range(4)}
    assert run_polls(d, make, 6) == []


def test_a_rank_with_slow_steps_of_its_own_is_a_straggler():
    d = Detector(SETTINGS, 3)
    make = lambda i: {r: beat(r, i, seq=None, step=5 + i, step_time=2.0 if r == 1 else 1.0)  # noqa: E731
                      for r in range(3)}
    found = run_polls(d, make, 4)
    assert [(f.cause, f.ranks) for f in found] == [("straggler-rank", [1])]
    assert "2.0x the median" in found[0].message


def test_a_rank_stopped_before_the_collective_the_others_wait_in_is_hung_with_its_stack():
    d = Detector(SETTINGS, 4)
    stack = ["train.py:90 in <module>: main()", "train.py:40 in load_batch: queue.get()"]
    make = lambda i: {r: beat(r, i, seq=10 if r == 2 else 11, step=7, idle=1.0 + i,  # noqa: E731
                              stack=stack if r == 2 else None) for r in range(4)}
    found = run_polls(d, make, 4, every=1.0)
    assert [(f.cause, f.ranks, f.severity.value) for f in found] == [("rank-hang", [2], "error")]
    hang = found[0]
    assert "rank 2 (node1, pid 102)" in hang.message and "collective #11" in hang.message
    assert "train.py:40 in load_batch" in hang.message and "timeout fires in" in hang.message
    assert [e.text for e in hang.evidence if "stack" in e.source][0] == stack[-1]  # innermost first


def test_rank0_evaluating_alone_is_reported_as_evaluation_when_it_nears_the_timeout():
    d = Detector(SETTINGS, 4)
    make = lambda n, wait: {r: beat(r, n, seq=10 if r == 0 else 11, step=7, idle=wait,  # noqa: E731
                                    phase="eval" if r == 0 else "train", pg_timeout=600.0) for r in range(4)}
    assert d.observe(make(1, 100.0), now=0.0) == []  # working, not hung: quiet until half the timeout
    found = d.observe(make(2, 320.0), now=1.0)
    assert [(f.cause, f.ranks, f.severity.value) for f in found] == [("rank0-evaluation", [0], "warning")]
    assert "53% of the 600 s process-group timeout" in found[0].message


def test_a_silent_rank_is_dead_and_a_rank_that_ended_is_not():
    d = Detector(SETTINGS, 3)
    d.observe({0: beat(0, 1, seq=5), 1: beat(1, 1, seq=5), 2: beat(2, 1, seq=5, state="ended")}, now=0.0)
    found = d.observe({0: beat(0, 2, seq=6), 1: beat(1, 1, seq=5), 2: beat(2, 1, seq=5, state="ended")}, now=7.0)
    assert [(f.cause, f.ranks) for f in found] == [("rank-died", [1])]
    assert "stopped sending heartbeats 7 s ago" in found[0].message


def test_timeout_advice_from_the_largest_gap():
    d = Detector(SETTINGS, 2)
    d.observe({r: beat(r, 1, seq=5, max_gap=400.0 if r == 1 else 3.0, pg_timeout=600.0, step=9) for r in range(2)}, 0)
    advice, facts = d.timeout_advice()
    assert [(f.cause, f.severity.value) for f in advice] == [("pg-timeout-unfit", "warning")]
    assert facts["proposed_timeout_s"] == 840.0 and facts["rank"] == 1
    loose = Detector(SETTINGS, 2)
    loose.observe({r: beat(r, 1, seq=5, max_gap=2.0, pg_timeout=7200.0) for r in range(2)}, 0)
    assert [f.severity.value for f in loose.timeout_advice()[0]] == ["info"]
    fits = Detector(SETTINGS, 2)
    fits.observe({r: beat(r, 1, seq=5, max_gap=2.0, pg_timeout=1800.0) for r in range(2)}, 0)
    assert fits.timeout_advice()[0] == [] and fits.timeout_advice()[1]["proposed_timeout_s"] == 300.0


@given(delay=st.floats(0.0, 5.0), period=st.floats(0.01, 10.0), late=st.integers(0, 4), count=st.integers(3, 40))
@hsettings(max_examples=60, deadline=None)
def test_arrival_lags_recover_a_constant_delay(delay, period, late, count):
    lags, times = arrival_lags({r: arrivals(100, count, period, delay=delay if r == late else 0.0) for r in range(5)})
    assert len(times) == min(count - 1, MAX_COMPARED)  # the most recent collectives every rank reached
    assert len(lags[late]) == len(times)
    assert all(abs(lag - delay) < 1e-6 for lag in lags[late])
    assert all(abs(lag) < 1e-6 for r in range(5) if r != late for lag in lags[r])


def test_arrival_lags_need_collectives_every_rank_reached():
    assert arrival_lags({0: arrivals(0, 5, 1.0), 1: arrivals(50, 5, 1.0)}) == ({}, [])
    assert arrival_lags({0: arrivals(0, 5, 1.0)}) == ({}, [])


def test_a_straggler_late_only_at_the_first_collective_of_each_step_is_found():
    """Two collectives per step (as Lightning runs): the straggler holds the others up at the first only."""
    d = Detector(SETTINGS, 2)

    def window(i: int, rank: int) -> list:
        out = []
        for k in range(20):
            t = 1000.0 + (i + k) * 0.5
            out += [[2 * (i + k), t + (0.35 if rank == 1 else 0.0)], [2 * (i + k) + 1, t + 0.36]]
        return out

    found = run_polls(d, lambda i: {r: beat(r, i, seq=40 + 2 * i, step=i, arrivals=window(i, r)) for r in range(2)}, 5)
    assert [(f.cause, f.ranks) for f in found] == [("straggler-rank", [1])]


def test_settings_follow_a_small_hang_after_and_reject_unknown_names():
    s = Settings.defaults().with_(hang_after=2.0)
    assert s.beat <= 0.5 and s.stale_after >= 4 * s.beat and s.stack_after == 1.0
    with pytest.raises(TypeError):
        Settings.defaults().with_(hang_afterr=3)


@pytest.mark.parametrize("name,cause", [("eval", "rank0-evaluation"), ("Validation", "rank0-evaluation"),
                                        ("checkpoint-save", "checkpoint-io"), ("tokenize", "rank0-preprocessing"),
                                        ("resume", "dataloader-resume-skew"), ("train", None), (None, None)])
def test_phase_names_map_to_causes(name, cause):
    rule = phase_rule(name)
    assert (rule["cause"] if rule else None) == cause


def timed_arrivals(start_seq: int, count: int, period: float, delay: float, ran: float, waited: float) -> list:
    """Arrivals with the training thread's CPU time and CPU wait so far (both growing per collective)."""
    return [[start_seq + i, 1000.0 + i * period + delay, 10.0 + i * ran, 5.0 + i * waited] for i in range(count)]


def test_a_rank_late_because_it_waited_for_a_cpu_is_not_a_straggler():
    """Oversubscribed host: rank 2 got the same CPU time per step but waited 0.3 s longer for it each time."""
    d = Detector(SETTINGS, 4)
    make = lambda i: {r: beat(r, i, seq=30 + i, step=10 + i, step_time=1.0, arrivals=timed_arrivals(  # noqa: E731
        i, 30, 1.0, 0.3 if r == 2 else 0.0, ran=0.5, waited=0.8 if r == 2 else 0.5)) for r in range(4)}
    assert run_polls(d, make, 6) == []


def test_a_rank_late_with_more_work_is_a_straggler_even_on_a_busy_host():
    """Rank 2 needs more CPU and so also waits more for it, in the same proportion as the others: its work."""
    d = Detector(SETTINGS, 4)
    make = lambda i: {r: beat(r, i, seq=30 + i, step=10 + i, step_time=1.0, arrivals=timed_arrivals(  # noqa: E731
        i, 30, 1.0, 0.3 if r == 2 else 0.0, ran=0.65 if r == 2 else 0.5, waited=0.65 if r == 2 else 0.5))
        for r in range(4)}
    found = run_polls(d, make, 6)
    assert [(f.cause, f.ranks) for f in found] == [("straggler-rank", [2])]


def test_steps_published_at_different_moments_are_not_a_straggler():
    """Beats go out at different times: with collectives seen, their lags decide, not the steps as published."""
    d = Detector(SETTINGS, 4)
    make = lambda i: {r: {**beat(r, i, seq=30 + 5 * i, step=10 + 5 * i - (4 if r == 3 else 0), step_time=0.1,  # noqa: E731
                                 arrivals=arrivals(i, 30, 0.1)), "t": 1000.0 + i - (0.4 if r == 3 else 0.0)}
                      for r in range(4)}
    assert run_polls(d, make, 6) == []


def test_without_collectives_a_stale_beat_is_allowed_its_age_in_steps():
    d = Detector(SETTINGS, 3)
    stale = lambda i, lag: {r: {**beat(r, i, seq=None, step=100 + 10 * i - (lag if r == 1 else 0),  # noqa: E731
                                       step_time=0.1), "t": 1000.0 + i - (0.5 if r == 1 else 0.0)} for r in range(3)}
    assert run_polls(d, lambda i: stale(i, 6), 5) == []  # 0.5 s old at 0.1 s per step: 5 steps of it are age
    found = run_polls(d, lambda i: stale(i, 20), 5)
    assert [(f.cause, f.ranks) for f in found] == [("straggler-rank", [1])] and "20 steps behind" in found[0].message


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="schedstat is Linux's")
def test_the_heartbeat_reads_the_training_threads_cpu_time_and_wait():
    ran, waited = cpu_times(threading.get_native_id())
    assert ran > 0 and waited >= 0
    assert cpu_times(None) == ()
