"""A peer's wait for node 0's decision (issue 45): it comes back to node 0 a bounded number
of times a second whatever the job's size, and a signal ends it at once however long its
store waits are."""

from __future__ import annotations

import datetime
import os
import signal
import threading
import time
from collections.abc import Sequence

import pytest

from slurm_ft.launch.rendezvous import localstore, longwaits, stores
from slurm_ft.launch.rendezvous import protocol as proto
from slurm_ft.launch.rendezvous.beatperiod import NODE0_BEATS_PER_S, look_period
from slurm_ft.launch.rendezvous.client import Client
from slurm_ft.launch.rendezvous.decisionwait import REJOIN_S, await_decision, wait_slice
from slurm_ft.launch.rendezvous.reads import WAIT_CHUNK_S
from slurm_ft.launch.rendezvous.sealing import Sealer
from slurm_ft.launch.signals import SignalBox
from tests.support.waiting import wait_until

SEALER = Sealer(b"d" * 32)
DECISION = proto.Decision(proto.Action.RUN, 1, master_port=1234, nodes=("a", "b"))


class Counting(localstore.LocalConnection):
    """A connection that notes every request it sends to the store."""

    def __init__(self, store: localstore.LocalStore, calls: list[str]) -> None:
        super().__init__(store)
        self.calls = calls

    def wait(self, keys: Sequence[str], timeout: datetime.timedelta) -> None:
        self.calls.append("wait")
        super().wait(keys, timeout)

    def check(self, keys: Sequence[str]) -> bool:
        self.calls.append("check")
        return super().check(keys)

    def compare_set(self, key: str, expected: str | bytes, desired: str | bytes) -> bytes:
        self.calls.append("compare_set")
        return super().compare_set(key, expected, desired)

    def set(self, key: str, value: str | bytes) -> None:
        self.calls.append("set")
        super().set(key, value)


def test_the_look_period_is_as_configured_within_the_budget_and_stretched_past_it() -> None:
    for n in (1, 2, 64, 256, NODE0_BEATS_PER_S + 1):
        assert look_period(n, 1.0) == 1.0
        assert look_period(n, 0.2) == max(0.2, (n - 1) / NODE0_BEATS_PER_S)
    for n in (1024, 4096, 16384):
        assert (n - 1) / look_period(n, 1.0) == pytest.approx(NODE0_BEATS_PER_S)  # requests a second
    assert (look_period(4096, 1.0), look_period(4096, 0.2)) == (4095 / 512, 4095 / 512)
    assert look_period(4096, 30.0) == 30.0  # a longer period is kept


@pytest.mark.parametrize("n", [2, 4096])
def test_a_waiting_peer_comes_back_to_node0_once_per_look_period(n: int) -> None:
    """Before: a store wait every 0.2 s and the join record written again every second,
    whatever N: 6 requests a second per launcher, 24,000 a second at node 0 for 4,096
    nodes. Now as before for small jobs, and one of each every 8 s at 4,096 nodes."""
    store = localstore.LocalStore()
    calls: list[str] = []
    peer = Client(Counting(store, calls), proto.Keys("dw-a0"), sealer=SEALER)
    peer.join(1, proto.JoinInfo(1, "b", "h", 1))
    calls.clear()
    waited = 2.5
    t = time.monotonic()
    assert await_decision(peer, 1, n, deadline=t + waited, abort=lambda: False) is None
    assert time.monotonic() - t == pytest.approx(waited, abs=0.5)
    waits = waited / wait_slice(n) + 1
    rejoins = waited / look_period(n, REJOIN_S) + 1
    assert 1 <= calls.count("wait") <= waits, calls
    assert calls.count("compare_set") <= rejoins, calls  # the join record, written again
    assert len(calls) <= waits + 2 * rejoins + 1, calls  # and a check where a rejoin woke a wait
    if n == 4096:
        assert len(calls) <= 3, calls


@pytest.mark.parametrize("n", [2, 4096])
def test_a_peer_that_just_joined_waits_first_and_reads_the_decision_once_it_is_set(n: int) -> None:
    """The decision cannot be there before node 0 saw the join: a read before the first
    wait was one request more from every launcher of every cycle (4,095 at 4,096 nodes).
    A decision already there is still taken at once: the wait on it returns."""
    store = localstore.LocalStore()
    calls: list[str] = []
    peer = Client(Counting(store, calls), proto.Keys("dw-f0"), sealer=SEALER)
    host = Client(store.connect(), peer.keys, sealer=SEALER)
    peer.join(1, proto.JoinInfo(1, "b", "h", 1))
    calls.clear()

    def decide_once_waiting() -> None:
        wait_until(lambda: "wait" in calls, timeout=10)
        host.publish_decision(1, DECISION)

    deciding = threading.Thread(target=decide_once_waiting)
    deciding.start()
    assert await_decision(peer, 1, n, deadline=time.monotonic() + 10, abort=lambda: False) == DECISION
    deciding.join()
    assert calls[0] == "wait", calls
    assert calls[-2:] == ["check", "compare_set"] and calls.count("check") == 1, calls  # read once, set
    calls.clear()
    t = time.monotonic()
    assert await_decision(peer, 1, n, deadline=t + 10, abort=lambda: False) == DECISION
    assert calls == ["wait", "check", "compare_set"]
    assert time.monotonic() - t < 1.0


def test_a_signal_ends_a_long_wait_at_once_and_the_connection_serves_on() -> None:
    """4,096 nodes: each store wait is 8 s long; a real signal (the launcher's signal box,
    its wake-up fd) must not wait for it to end, nor for the next look at the predicate."""
    host = Client.host(0, proto.Keys("dw-b0"), 10.0, SEALER)
    host.prepare(2, proto.Base(0, "u"))
    peer = Client.connect(
        "127.0.0.1",
        host.port,
        host.keys,
        deadline=time.monotonic() + 10,
        op_timeout=10.0,
        abort=lambda: False,
        sleep=time.sleep,
        sealer=SEALER,
    )
    box = SignalBox([signal.SIGUSR1])
    try:
        threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGUSR1)).start()
        with pytest.raises(stores.Interrupted):
            await_decision(peer, 1, 4096, deadline=time.monotonic() + 60, abort=box.arrived, signal_fd=box.fd)
        assert box.received_at is not None
        assert time.monotonic() - box.received_at < 0.05
    finally:
        box.close()
    # The abandoned wait still holds the connection; the decision ends it at once, and the
    # connection's next request is answered.
    host.publish_decision(1, DECISION)
    t = time.monotonic()
    assert peer.wait_decision(1, deadline=t + 5, abort=lambda: False) == DECISION
    assert time.monotonic() - t < 1.0


def test_without_the_signal_fd_the_predicate_is_looked_at_every_abort_look() -> None:
    store = localstore.LocalStore()
    peer = Client(store.connect(), proto.Keys("dw-d0"), sealer=SEALER)
    signalled = threading.Event()
    threading.Timer(0.3, signalled.set).start()
    t = time.monotonic()
    with pytest.raises(stores.Interrupted):
        await_decision(peer, 1, 4096, deadline=t + 60, abort=signalled.is_set)
    assert 0.3 <= time.monotonic() - t < 0.3 + longwaits.ABORT_LOOK_S + 0.1
    peer.sever()


def test_the_store_host_lost_meanwhile_ends_the_wait_as_the_abort_says() -> None:
    """The abort predicate also raises (the heart-beat found the store host silent): that
    too is noticed within a tenth of a second, not at the end of the store wait."""
    store = localstore.LocalStore()
    peer = Client(store.connect(), proto.Keys("dw-c0"), sealer=SEALER)
    lost_at = time.monotonic() + 0.3

    def abort() -> bool:
        if time.monotonic() >= lost_at:
            raise stores.StoreLost("store host silent for 20 s")
        return False

    with pytest.raises(stores.StoreLost, match="silent"):
        await_decision(peer, 1, 4096, deadline=time.monotonic() + 60, abort=abort)
    assert time.monotonic() - lost_at < longwaits.ABORT_LOOK_S + 0.1
    peer.sever()  # what a succession does: the abandoned wait's thread ends too


def test_jobs_within_the_budget_wait_in_short_slices_as_before_and_bigger_ones_stretch() -> None:
    for n in (1, 2, 64, 256, NODE0_BEATS_PER_S + 1):
        assert wait_slice(n) == WAIT_CHUNK_S <= longwaits.ABORT_LOOK_S  # on the caller's thread
    for n in (NODE0_BEATS_PER_S + 2, 1024, 4096, 16384):
        assert wait_slice(n) == look_period(n, REJOIN_S) > longwaits.ABORT_LOOK_S
        assert (n - 1) / wait_slice(n) == pytest.approx(NODE0_BEATS_PER_S)  # waits a second at node 0


def test_a_store_host_with_more_than_1024_descriptors_waits_as_well() -> None:
    """A successor's process holds a connection per launcher: select() takes no descriptor
    past 1,023 (the scale harness's successor at 1,024 nodes failed 56 followers so)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"open-files hard limit {hard}")
    resource.setrlimit(
        resource.RLIMIT_NOFILE, (max(soft, 1200) if hard == resource.RLIM_INFINITY else hard, hard)
    )
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        store = localstore.LocalStore()
        threading.Timer(0.3, store.connect().set, ("k", "1")).start()
        assert longwaits.LongWaits(store.connect()).wait(["k"], 5.0, lambda: False) is True
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
