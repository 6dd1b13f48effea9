"""The in-job API without a job: lazy exports, phases and steps, stacks, a heartbeat losing its store."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

import nccl_doctor
from nccl_doctor.runtime.progress import PROGRESS, TRAIN
from nccl_doctor.runtime.stacks import one_thread, python_stack


def test_importing_nccl_doctor_and_its_api_does_not_import_torch():
    code = ("import sys, nccl_doctor; nccl_doctor.phase, nccl_doctor.step, nccl_doctor.watch, nccl_doctor.preflight;"
            "print('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "False", done.stderr


def test_unknown_attribute_is_an_attribute_error():
    with pytest.raises(AttributeError):
        nccl_doctor.no_such_thing  # noqa: B018


def test_phase_as_a_call_and_as_a_context_manager():
    nccl_doctor.phase(TRAIN)
    with nccl_doctor.phase("eval"):
        assert PROGRESS.phase == "eval"
        with nccl_doctor.phase("checkpoint"):
            assert PROGRESS.phase == "checkpoint"
        assert PROGRESS.phase == "eval"
    assert PROGRESS.phase == TRAIN
    nccl_doctor.phase("resume")
    assert PROGRESS.phase == "resume"
    nccl_doctor.phase(TRAIN)


def test_steps_count_and_time():
    before = PROGRESS.step
    nccl_doctor.step()
    nccl_doctor.step()
    assert PROGRESS.step == (before or 0) + 2 and PROGRESS.durations
    nccl_doctor.step(1000)
    assert PROGRESS.step == 1000


def test_python_stack_of_a_thread_blocked_in_a_call():
    release = threading.Event()

    def blocked_in_here() -> None:
        release.wait(10)

    thread = threading.Thread(target=blocked_in_here)
    thread.start()
    time.sleep(0.1)
    try:
        stack = python_stack(thread.ident)
    finally:
        release.set()
        thread.join()
    assert any("in blocked_in_here" in line and "release.wait(10)" in line for line in stack), stack
    assert python_stack(None) == [] and python_stack(1) == []


@pytest.mark.parametrize("head", ["Thread 4242 (idle): \"MainThread\"", "Thread 0x7F00AA (active): \"MainThread\""])
def test_py_spy_dump_is_cut_to_our_thread_outermost_first(head):
    dump = (f"Process 1: python train.py\nPython v3.11\n\n{head}\n    wait (threading.py:320)\n"
            "    main (train.py:9)\n\nThread 99 (idle): \"other\"\n    run (x.py:1)\n")
    assert one_thread(dump, 4242, 0x7F00AA) == ["main (train.py:9)", "wait (threading.py:320)"]
    assert one_thread(dump, 1, 2) == []


STORE_SERVER = """
import sys, time
from datetime import timedelta
from torch.distributed import TCPStore
store = TCPStore("127.0.0.1", 0, None, True, timedelta(seconds=30), wait_for_workers=False)
print(store.port, flush=True)
time.sleep(120)
"""


def test_heartbeat_gives_up_quietly_when_the_store_goes_away():
    pytest.importorskip("torch")
    from nccl_doctor.runtime.heartbeat import Heartbeat
    from nccl_doctor.runtime.job import keys, own_connection
    from nccl_doctor.runtime.progress import Progress
    from nccl_doctor.runtime.settings import Settings
    from torch.distributed import TCPStore
    from datetime import timedelta

    server = subprocess.Popen([sys.executable, "-c", STORE_SERVER], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    try:
        port = int(server.stdout.readline())
        client = TCPStore("127.0.0.1", port, None, False, timedelta(seconds=10))
        hb = Heartbeat(0, "here", Progress(), Settings.defaults().with_(beat=0.1, sample=0.02),
                       lambda: keys(own_connection(client, 1.0), "watch", "test"), frozen_guard=False)
        hb.start()
        time.sleep(0.5)
        assert hb.beats >= 2 and hb.is_alive()
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(10)
        hb.join(10)
        assert not hb.is_alive() and hb.gave_up
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(10)
