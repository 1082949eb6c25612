"""A connection's long store waits run on one thread kept for the connection (issue 45):
not a thread per wait, none for short waits, none left once the connection is gone, and a
wait given up on does not lose the next one's answer."""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable

import pytest

from slurm_ft.launch.rendezvous import localstore, stores
from slurm_ft.launch.rendezvous.waitthread import ABORT_LOOK_S, WaitThread

LONG = ABORT_LOOK_S + 4.0  # taken on the thread


def _wait_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "slurm-ft-store-wait"}


def _new_since(before: set[threading.Thread]) -> set[threading.Thread]:
    """The wait threads started since ``before`` was taken: not a count, because another
    test's connections may be collected (their threads end) at any moment of this one."""
    return _wait_threads() - before


def _until(cond: Callable[[], bool], deadline_s: float = 5.0) -> bool:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.01)
    return False


def test_many_long_waits_share_one_thread_and_short_ones_take_none() -> None:
    before = _wait_threads()
    store = localstore.LocalStore()
    waits = WaitThread(store.connect())
    assert waits.wait(["short"], 0.05, lambda: False) is False  # on the caller's thread
    assert not _new_since(before)
    for k in range(20):
        threading.Timer(0.01, store.connect().set, (f"k{k}", "1")).start()
        assert waits.wait([f"k{k}"], LONG, lambda: False) is True
    assert len(_new_since(before)) == 1


def test_the_thread_ends_once_its_connection_is_collected() -> None:
    before = _wait_threads()
    store = localstore.LocalStore()
    store.connect().set("k", "1")
    waits = WaitThread(store.connect())
    assert waits.wait(["k"], LONG, lambda: False) is True
    (thread,) = _new_since(before)
    del waits
    gc.collect()
    assert _until(lambda: not thread.is_alive())


def test_a_wait_given_up_on_ends_on_the_thread_and_the_next_wait_gets_its_own_answer() -> None:
    store = localstore.LocalStore()
    waits = WaitThread(store.connect())
    stop = threading.Event()
    threading.Timer(0.2, stop.set).start()
    t = time.monotonic()
    with pytest.raises(stores.Interrupted):
        waits.wait(["first"], LONG, stop.is_set)
    assert time.monotonic() - t < 0.2 + ABORT_LOOK_S + 0.2
    # the next wait queues behind the abandoned one, which the first key's write ends
    threading.Timer(0.2, store.connect().set, ("first", "1")).start()
    threading.Timer(0.4, store.connect().set, ("second", "1")).start()
    t = time.monotonic()
    assert waits.wait(["second"], LONG, lambda: False) is True
    assert time.monotonic() - t < 2.0


def test_a_lost_store_is_raised_on_the_callers_thread_and_the_thread_serves_on() -> None:
    store = localstore.LocalStore()
    conn = store.connect()
    waits = WaitThread(conn)
    threading.Timer(0.2, conn.close).start()
    with pytest.raises(stores.StoreLost):
        waits.wait(["never"], LONG, lambda: False)
    t = time.monotonic()
    with pytest.raises(stores.StoreLost):  # answered by the same thread, at once
        waits.wait(["again"], LONG, lambda: False)
    assert time.monotonic() - t < 1.0
