"""A connection's long store waits run on the process's kept threads (issue 45): not a
thread per wait nor per connection, none for short waits, no connection kept alive by an
idle thread, and a wait given up on does not lose the next one's answer."""

from __future__ import annotations

import gc
import threading
import time
import weakref
from collections.abc import Callable

import pytest

from slurm_ft.launch.rendezvous import keptthreads, localstore, stores
from slurm_ft.launch.rendezvous.longwaits import ABORT_LOOK_S, LongWaits

LONG = ABORT_LOOK_S + 4.0  # taken on the thread


def _kept_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == keptthreads.NAME}


def _until(cond: Callable[[], bool], deadline_s: float = 5.0) -> bool:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.01)
    return False


def test_long_waits_one_after_another_take_one_kept_thread_and_short_ones_none() -> None:
    """Not a count of the process's threads: another test's kept threads may be idle here
    (then none is started) or busy."""
    before = _kept_threads()
    store = localstore.LocalStore()
    waits = LongWaits(store.connect())
    assert waits.wait(["short"], 0.05, lambda: False) is False  # on the caller's thread
    assert _kept_threads() == before
    for k in range(20):
        threading.Timer(0.01, store.connect().set, (f"k{k}", "1")).start()
        assert waits.wait([f"k{k}"], LONG, lambda: False) is True
    assert len(_kept_threads() - before) <= 1


def test_another_connections_wait_takes_the_thread_a_wait_left() -> None:
    store = localstore.LocalStore()
    store.connect().set("k", "1")
    assert LongWaits(store.connect()).wait(["k"], LONG, lambda: False) is True
    assert _until(lambda: keptthreads.idle() >= 1)  # it is back once it handed the answer over
    before = _kept_threads()
    assert LongWaits(store.connect()).wait(["k"], LONG, lambda: False) is True
    assert _kept_threads() == before


def test_a_kept_thread_holds_no_connection_once_its_wait_ended() -> None:
    store = localstore.LocalStore()
    store.connect().set("k", "1")
    conn = store.connect()
    gone = weakref.ref(conn)
    waits = LongWaits(conn)
    assert waits.wait(["k"], LONG, lambda: False) is True
    del waits, conn
    assert _until(lambda: (gc.collect(), gone())[1] is None)


def test_a_wait_given_up_on_ends_on_the_thread_and_the_next_wait_gets_its_own_answer() -> None:
    store = localstore.LocalStore()
    waits = LongWaits(store.connect())
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
    waits = LongWaits(conn)
    threading.Timer(0.2, conn.close).start()
    with pytest.raises(stores.StoreLost):
        waits.wait(["never"], LONG, lambda: False)
    t = time.monotonic()
    with pytest.raises(stores.StoreLost):  # answered by the same thread, at once
        waits.wait(["again"], LONG, lambda: False)
    assert time.monotonic() - t < 1.0
