"""A peer's heart-beat and store watchdog against a store host that freezes or dies.

The in-memory store stands in for node 0's: holding its lock is a host that answers
nothing (every call blocks, as on a SIGSTOPped node 0), shutting it down is a dead host.
"""

from __future__ import annotations

import os
import select
import time
from collections.abc import Sequence

import pytest

from slurm_ft.launch.rendezvous import background, localstore
from slurm_ft.launch.rendezvous import protocol as proto
from slurm_ft.launch.rendezvous.client import Client
from slurm_ft.launch.rendezvous.sealing import Sealer
from tests.support.waiting import wait_until

TIMEOUT_S = 0.5
GRACE_S = 0.3


@pytest.fixture
def wake():
    r, w = os.pipe()
    yield r, w
    os.close(r)
    os.close(w)


def readable(fd: int, timeout: float) -> bool:
    return select.select([fd], [], [], timeout)[0] == [fd]


def start(
    store: localstore.LocalStore, wake_fd: int, timeout: float = TIMEOUT_S
) -> tuple[background.Heartbeat, background.StoreWatchdog, list[str]]:
    keys = proto.Keys("wd-a0")
    beat = background.Heartbeat(Client(store.connect(), keys), 1, interval=0.05, timeout=timeout)
    emergencies: list[str] = []
    dog = background.StoreWatchdog(beat, emergencies.append, grace=GRACE_S, wake_fd=wake_fd)
    beat.start()
    dog.start()
    reader = Client(store.connect(), keys)
    wait_until(lambda: (reader.beats([1])[0] or 0) >= 3, 5, message="beating")
    return beat, dog, emergencies


def test_a_frozen_host_wakes_the_main_loop_after_the_timeout_then_the_emergency(wake):
    r, w = wake
    store = localstore.LocalStore()
    beat, dog, emergencies = start(store, w)
    try:
        with store.changed:  # the host freezes: the heart-beat's next call blocks
            frozen = time.monotonic()
            assert not readable(r, TIMEOUT_S * 0.6)  # no alarm while beats may still be due
            assert readable(r, 5)
            woke = time.monotonic() - frozen
            assert woke >= TIMEOUT_S - 0.1  # silent since its last good beat, before the freeze
            assert emergencies == []  # the main loop gets its chance first
            wait_until(lambda: emergencies, 5, message="the emergency")
            assert time.monotonic() - frozen >= woke + GRACE_S - 0.05
            assert emergencies[0].startswith("rendezvous store silent for ")
            assert len(emergencies) == 1
    finally:
        dog.stop()
        beat.stop()
    dog.join(5)
    assert not dog.is_alive()


def test_a_dead_host_alarms_the_watchdog_at_once(wake):
    r, w = wake
    store = localstore.LocalStore()
    beat, dog, emergencies = start(store, w, timeout=5.0)
    try:
        store.shutdown()  # the heart-beat's next call fails: it dies and says why
        died_at = time.monotonic()
        wait_until(lambda: emergencies, 5, message="the emergency")
        # not a heart-beat timeout later: the death itself wakes the watchdog
        assert time.monotonic() - died_at < 4.0
        assert emergencies[0].startswith("slurm-ft-heartbeat stopped: ")
        assert readable(r, 0)
    finally:
        dog.stop()
        beat.stop()


def test_a_stopped_watchdog_ends_at_once_and_never_fires(wake):
    _, w = wake
    store = localstore.LocalStore()
    beat, dog, emergencies = start(store, w)
    dog.stop()
    beat.stop()
    dog.join(2)  # without the alarm it would sleep until the heart-beat could be lost
    assert not dog.is_alive()
    assert emergencies == []
    assert dog.died() is None


class Counting(localstore.LocalConnection):
    """A connection that notes the name of every write or check it is asked for."""

    def __init__(self, store: localstore.LocalStore, calls: list[str]) -> None:
        super().__init__(store)
        self.calls = calls

    def set(self, key: str, value: str | bytes) -> None:
        self.calls.append("set")
        super().set(key, value)

    def compare_set(self, key: str, expected: str | bytes, desired: str | bytes) -> bytes:
        self.calls.append("compare_set")
        return super().compare_set(key, expected, desired)

    def check(self, keys: Sequence[str]) -> bool:
        self.calls.append("check")
        return super().check(keys)

    def reconnect(self) -> Counting:
        return Counting(self.store, self.calls)


def test_a_beat_is_one_answered_round_trip_and_a_forged_value_is_replaced():
    store = localstore.LocalStore()
    calls: list[str] = []
    keys, sealer = proto.Keys("beat-a0"), Sealer(b"k" * 32)
    Client(store.connect(), keys, sealer=sealer).prepare(2, proto.Base(0, "u"))  # as node 0 starts
    client = Client(Counting(store, calls), keys, sealer=sealer)
    client.beat(1)  # the first one too: it expects what node 0 wrote
    client.beat(1)
    assert calls == ["compare_set", "compare_set"]
    assert client.beats([1]) == [2]
    key = client.keys.heartbeat(1)
    store.connect().set(key, "sft1:" + "0" * 64 + ":99")  # someone else's value
    calls.clear()
    client.beat(1)
    assert calls == ["compare_set", "set", "check"]
    assert client.beats([1]) == [3]


def test_a_connection_cloned_from_one_that_beat_beats_on_in_one_round_trip():
    """The heart-beat's connection is a clone of the one that beat once on finding the
    store: before, its first beat found that beat's value and took three requests."""
    store = localstore.LocalStore()
    keys, sealer = proto.Keys("beat-c0"), Sealer(b"k" * 32)
    Client(store.connect(), keys, sealer=sealer).prepare(2, proto.Base(0, "u"))
    calls: list[str] = []
    first = Client(Counting(store, calls), keys, sealer=sealer)
    first.beat(1)
    heartbeat = first.clone(5.0)
    calls.clear()
    heartbeat.beat(1)
    assert calls == ["compare_set"]
    assert first.beats([1]) == [2]  # a beat node 0 sees move on from the one before


def test_a_first_beat_on_a_key_node0_did_not_prepare_still_lands():
    store = localstore.LocalStore()
    calls: list[str] = []
    client = Client(Counting(store, calls), proto.Keys("beat-d0"), sealer=Sealer(b"k" * 32))
    client.beat(1)
    assert calls == ["compare_set", "set", "check"]
    assert client.beats([1]) == [1]
    calls.clear()
    client.beat(1)
    assert calls == ["compare_set"]
