"""The launcher's kept threads (issue 45): a call runs at once whatever else blocks, a
thread that finished a call takes the next, a call that raises costs no thread, and a
forked child starts threads of its own."""

from __future__ import annotations

import os
import threading
import time

from slurm_ft.launch.rendezvous import keptthreads


def _kept() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == keptthreads.NAME}


def test_calls_that_block_run_at_once_each_on_a_thread() -> None:
    release, started = threading.Event(), threading.Semaphore(0)

    def blocked() -> None:
        started.release()
        release.wait(10)

    for _ in range(3):
        keptthreads.run(blocked)
    try:
        assert all(started.acquire(timeout=5) for _ in range(3))  # none queued behind another
    finally:
        release.set()


def test_a_finished_thread_takes_the_next_call_and_one_that_raised_serves_on() -> None:
    done = threading.Event()

    def fails() -> None:
        done.set()
        raise RuntimeError("lost")

    keptthreads.run(fails)
    assert done.wait(5)
    deadline = time.monotonic() + 5
    while keptthreads.idle() < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    before, ran = _kept(), threading.Event()
    keptthreads.run(ran.set)
    assert ran.wait(5)
    assert _kept() == before  # no thread started for it


def test_a_forked_child_runs_calls_on_threads_of_its_own() -> None:
    idle = threading.Event()
    keptthreads.run(idle.set)
    assert idle.wait(5)
    deadline = time.monotonic() + 5
    while keptthreads.idle() < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    pid = os.fork()
    if pid == 0:  # the child: its parent's idle thread is not here
        ran = threading.Event()
        keptthreads.run(ran.set)
        os._exit(0 if ran.wait(5) else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
