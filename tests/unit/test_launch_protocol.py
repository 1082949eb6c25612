"""The store protocol against a real TCPStore (in this process): keys, first writer wins,
counters, lost-peer detection on node 0's own clock, background threads that never die
silently."""

from __future__ import annotations

import contextlib
import queue
import time
from collections.abc import Callable

import pytest

from slurm_ft.launch.rendezvous import background, localstore, stores
from slurm_ft.launch.rendezvous import protocol as proto
from slurm_ft.launch.rendezvous.client import Client
from slurm_ft.records import Failure, FailureKind
from tests.support.waiting import wait_until

pytestmark = pytest.mark.torch


def never() -> bool:
    return False


@pytest.fixture(scope="module")
def host():
    keys = proto.Keys("job-a0")
    client = Client.host(0, keys, 5.0)
    client.prepare(3, proto.Base(first_cycle=4, run_uuid="u1"))
    return client


def peer(host: Client) -> Client:
    return Client.connect(
        "127.0.0.1",
        host.port,
        host.keys,
        deadline=time.monotonic() + 10,
        op_timeout=5.0,
        abort=never,
        sleep=time.sleep,
    )


def test_keys_are_namespaced_by_run_and_cycle():
    k = proto.Keys("123_4-a1")
    assert k.decision(2) == "slurm_ft/123_4-a1/c2/decision"
    assert k.failure(0) != proto.Keys("123_4-a2").failure(0)
    assert k.heartbeat(7) == "slurm_ft/123_4-a1/hb/7"


def test_base_join_and_decision(host):
    p = peer(host)
    assert p.wait_base(deadline=time.monotonic() + 5, abort=never) == proto.Base(4, "u1")
    assert not host.joined(0, [1, 2]) and not host.unhealthy_said(0)
    p.join(0, proto.JoinInfo(1, "node1", "h1", 11))
    p.join(0, proto.JoinInfo(2, "node2", "h2", 12, unhealthy="nic: ib0 down"))
    # A TCPStore set is not answered: the peer's writes reach node 0 after its return.
    wait_until(lambda: host.joined(0, [1, 2]) and host.unhealthy_said(0), 5, message="the join records")
    assert not host.joined(0, [0, 1, 2])
    infos = host.join_records(0, range(3))
    assert infos[0] is None and infos[2].unhealthy == "nic: ib0 down"
    d = proto.Decision(proto.Action.RUN, 4, master_port=1234, nodes=("a", "b", "c"))
    host.publish_decision(0, d)
    assert p.wait_decision(0, deadline=time.monotonic() + 5, abort=never) == d
    # the next cycle's failure key exists before anyone can join it
    assert host.poll(1, [1]).failure is None and not host.joined(1, [1])
    t = time.monotonic()
    assert p.wait_decision(1, deadline=time.monotonic() + 0.2, abort=never) is None
    assert time.monotonic() - t < 1.0


def test_first_failure_wins(host):
    a, b = peer(host), peer(host)
    f1 = Failure(kind=FailureKind.WORKER, node="node1", node_rank=1, time=1.0, rank=3, exit_code=7)
    f2 = Failure(kind=FailureKind.WORKER, node="node2", node_rank=2, time=2.0, rank=5, exit_code=1)
    assert host.poll(0, [0]).failure is None
    assert a.publish_failure(0, f1) == f1
    assert b.publish_failure(0, f2) == f1
    assert host.poll(0, [0]).failure == f1
    host.mark_done(0, 0)
    assert host.all_done(0, (0,)) and not host.all_done(0, (0, 1, 2))


def test_interrupted_wait():
    keys = proto.Keys("int-a0")
    h = Client.host(0, keys, 5.0)
    h.prepare(2, proto.Base(0, "u"))
    with pytest.raises(stores.Interrupted):
        h.wait_decision(0, deadline=time.monotonic() + 30, abort=lambda: True)


class BetweenLooks:
    """The test's steps, each run on the peer monitor's thread between two of its looks
    (its ``after_look`` hook), so that a look sees all of a step or none of it: the beats
    a step makes and the move of the monitor's clock arrive together."""

    def __init__(self) -> None:
        self.steps: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self.ran = 0
        self.looked_after = 0  # steps that a whole look has followed

    def __call__(self) -> None:
        self.looked_after = self.ran  # the look that just ended began after every step run
        with contextlib.suppress(queue.Empty):
            self.steps.get_nowait()()
            self.ran += 1

    def run(self, step: Callable[[], None]) -> None:
        """``step`` once, and a whole look after it."""
        self.steps.put(step)
        wanted = self.ran + 1
        wait_until(lambda: self.looked_after >= wanted, 10, message="a look after the step")


def test_peer_monitor_notices_a_silent_peer_on_its_own_clock():
    """Silence is measured on the monitor's clock, between its looks: a peer whose beat has
    not moved while that clock moved past the timeout is lost, one whose beat moved is not,
    and no time passes for it while the clock stands still. The clock is the test's, moved
    between two looks: with the wall clock and beating threads, a loaded host that stalled
    the test's process for the 0.5 s timeout made the beating peer look lost too."""
    keys = proto.Keys("hb-a0")
    h = Client.host(0, keys, 5.0)
    h.prepare(3, proto.Base(0, "u"))
    now = [100.0]
    mon = background.PeerMonitor(
        h.clone(5.0), [1, 2], interval=0.01, timeout=0.5, wake_fd=None, clock=lambda: now[0]
    )
    between = mon.after_look = BetweenLooks()
    one, two = h.clone(5.0), h.clone(5.0)

    def later(seconds: float, *beating: tuple[Client, int]) -> Callable[[], None]:
        def step() -> None:
            now[0] += seconds
            for client, node in beating:
                client.beat(node)

        return step

    mon.start()
    try:
        between.run(later(0.0, (one, 1), (two, 2)))
        assert min(h.beats([1, 2])) >= 1 and mon.ages() == {1: 0.0, 2: 0.0}
        for _ in range(3):  # real time passes, the monitor's clock stands still
            between.run(later(0.0, (one, 1)))
        assert mon.lost() == {}
        between.run(later(0.4, (one, 1)))  # peer 2 silent for 0.4 s: not yet
        assert mon.lost() == {}
        between.run(later(0.2, (one, 1)))  # 0.6 s
        assert mon.lost() == {2: pytest.approx(0.6)}
        assert mon.died() is None
    finally:
        mon.stop()


def test_port_in_use_is_a_bind_error(host):
    with pytest.raises(stores.StoreBindError):
        Client.host(host.port, proto.Keys("x"), 2.0)


def _ops(store) -> list:
    out = []
    store.multi_set(["a", "b"], ["0", "x"])
    out.append(store.add("a", 2))
    out.append(store.add("new", 1))
    out.append(store.check(["a", "b"]))
    out.append(store.check(["a", "zzz"]))
    out.append(store.multi_get(["a", "b", "new"]))
    store.set("f", "")
    out.append(store.compare_set("f", "", "first"))
    out.append(store.compare_set("f", "", "second"))
    out.append(store.compare_set("missing", "", "made"))
    out.append(store.compare_set("other", "x", "nope"))
    out.append(store.check(["other"]))
    out.append(store.get("f"))
    return out


def test_local_store_behaves_like_tcpstore():
    """Single-node runs use the in-process store: same answers as the real one."""
    import datetime

    import torch.distributed as dist

    real = dist.TCPStore("127.0.0.1", 0, None, True, datetime.timedelta(seconds=5), wait_for_workers=False)
    assert _ops(localstore.LocalStore().connect()) == _ops(real)


def test_halt_waiter_wakes_the_main_loop_at_once():
    import os
    import select

    h = Client.host(0, proto.Keys("halt-a0"), 5.0)
    h.prepare(2, proto.Base(0, "u"))
    r, w = os.pipe()
    waiter = background.HaltWaiter(h.clone(5.0), w)
    waiter.start()
    try:
        waiter.watch(0)
        assert select.select([r], [], [], 0.3)[0] == []  # nothing yet
        f = Failure(kind=FailureKind.WORKER, node="n1", node_rank=1, time=1.0, rank=2, exit_code=1)
        peer(h).publish_failure(0, f)
        t = time.monotonic()
        assert select.select([r], [], [], 5)[0] == [r]
        assert time.monotonic() - t < 1.0
        assert os.read(r, 10)  # one wake-up byte
    finally:
        waiter.stop()
        h.halt(0)
        os.close(r)
        os.close(w)


def test_a_background_thread_that_loses_the_store_is_never_silent():
    """The peer monitor's own connection failing must wake node 0 and say why."""
    import os
    import select

    h = Client.host(0, proto.Keys("blind-a0"), 5.0)
    h.prepare(2, proto.Base(0, "u"))
    r, w = os.pipe()
    mon = background.PeerMonitor(peer(h), [1], interval=0.02, timeout=5.0, wake_fd=w)
    mon.start()
    try:
        wait_until(lambda: mon.is_alive(), 5, message="monitor running")
        del h  # the store host goes away: the monitor's next read fails
        import gc

        gc.collect()
        assert select.select([r], [], [], 10)[0] == [r]
        died = mon.died()
        assert died is not None and died.startswith(
            "slurm-ft-peer-monitor stopped: rendezvous store unreachable"
        )
        checks = background.BackgroundSet()
        checks.monitor = mon
        with pytest.raises(background.BackgroundDied):
            checks.abort_check(lambda: False)()
    finally:
        mon.stop()
        os.close(r)
        os.close(w)


def test_store_errors_are_told_apart_by_type():
    import datetime

    real = stores.host(0, 5.0)
    real.set_timeout(datetime.timedelta(seconds=0.1))
    with pytest.raises(RuntimeError) as timeout:
        real.get("missing-key-times-out")
    assert stores.is_timeout(timeout.value)
    assert not stores.is_timeout(RuntimeError("Connection reset by peer"))


def _outsider(port: int):
    """A raw TCPStore client, as another user's script on the same network would hold."""
    import datetime

    import torch.distributed as dist

    return dist.TCPStore("127.0.0.1", port, None, False, datetime.timedelta(seconds=5), use_libuv=True)


def test_forged_values_from_a_raw_store_client_are_ignored_and_reported_once():
    from slurm_ft.launch.rendezvous.sealing import Sealer

    secret = b"this job's secret, 32 bytes long"
    reports: list[str] = []
    sealer = Sealer(secret, reports.append)
    keys = proto.Keys("sealed-a0", sealer.namespace)
    h = Client.host(0, keys, 5.0, sealer)
    h.prepare(2, proto.Base(0, "u"))
    p = Client.connect(
        "127.0.0.1",
        h.port,
        keys,
        deadline=time.monotonic() + 10,
        op_timeout=5.0,
        abort=never,
        sleep=time.sleep,
        sealer=sealer,
    )
    out = _outsider(h.port)
    forged = Failure(kind=FailureKind.WORKER, node="nodeX", node_rank=1, time=1.0, rank=1, exit_code=9)
    out.set(keys.failure(0), proto.encode_failure(forged))
    wrong = Sealer(b"a guessed secret, 32 bytes long!")
    out.set(
        keys.decision(0), wrong.seal(keys.decision(0), proto.encode(proto.Decision(proto.Action.STOP, 0)))
    )
    out.set(keys.heartbeat(1), "12345")
    for _ in range(3):
        assert p.poll(0, [0, 1]).failure is None
    assert p.wait_decision(0, deadline=time.monotonic() + 0.5, abort=never) is None
    assert h.beats([1]) == [None]
    # the real failure replaces the forgery: first real writer wins
    real = Failure(kind=FailureKind.WORKER, node="node1", node_rank=1, time=2.0, rank=1, exit_code=3)
    assert p.publish_failure(0, real) == real
    assert h.poll(0, [0, 1]).failure == real
    d = proto.Decision(proto.Action.RUN, 0, master_port=1234)
    h.publish_decision(0, d)
    assert p.wait_decision(0, deadline=time.monotonic() + 5, abort=never) == d
    ignored = "that is not sealed with this job's secret (written by someone else)"
    assert sorted(reports) == sorted(
        f"ignored a value of store key {k} {ignored}"
        for k in (keys.failure(0), keys.decision(0), keys.heartbeat(1))
    )
    # what an outsider without the secret would guess is not where the job looks
    assert keys.failure(0).startswith(f"slurm_ft/{sealer.namespace}/sealed-a0/")


def test_a_forgery_in_a_waited_key_is_cleared_and_the_writers_next_write_is_read_at_once():
    """Issue 47: a peer that looked again 0.2 s after each forgery, next to an outsider
    overwriting the base every 0.2 s, caught node 0's once-a-second rewrite only by luck
    (3 to 15 s, now and then past the join timeout). The forgery is deleted instead, so
    the peer's wait wakes at the very next write, node 0's included."""
    import threading

    from slurm_ft.launch.rendezvous.sealing import Sealer

    sealer = Sealer(b"this job's secret, 32 bytes long")
    keys = proto.Keys("cleared-a0", sealer.namespace)
    h = Client.host(0, keys, 5.0, sealer)
    base = proto.Base(0, "u")
    h.prepare(2, base)
    p = Client.connect(
        "127.0.0.1",
        h.port,
        keys,
        deadline=time.monotonic() + 10,
        op_timeout=5.0,
        abort=never,
        sleep=time.sleep,
        sealer=sealer,
    )
    out = _outsider(h.port)
    out.set(keys.base, b"sft1:" + b"0" * 64 + b":{}")
    got: list[proto.Base | None] = []
    reader = threading.Thread(
        target=lambda: got.append(p.wait_base(deadline=time.monotonic() + 60, abort=never))
    )
    reader.start()
    wait_until(lambda: not out.check([keys.base]), 10, message="the forged base deleted by its reader")
    assert reader.is_alive() and not got  # waiting for a write, not reading the forgery again
    h.reassert()  # node 0 restores the base, as its join loop does once a second
    reader.join(10)
    assert got == [base]


def _shapes(replay: bytes) -> list[bytes]:
    """What an outsider may write: empty, garbage, huge, numeric, JSON of the wrong shape,
    sealed-looking, another key's sealed value."""
    return [
        b"",
        b"\x01\xa3\xf8E1r garbage \xff" * 3,
        b"x" * 200_000,
        b"99999999999999999999999",
        b"-5",
        b"1",
        b"[]",
        b'{"kind": "worker", "node": 3}',
        b'{"action": "run", "cycle": "x"}',
        b"sft1:" + b"0" * 64 + b":1",
        replay,
    ]


@pytest.mark.parametrize("secret", [b"this job's secret, 32 bytes long", None], ids=["secret", "no-secret"])
def test_no_value_an_outsider_writes_or_deletes_breaks_a_read(secret):
    """Every key of a cycle, overwritten with each shape and then deleted: every read of
    the protocol answers at once (missing, forged or malformed reads as absent), none
    raises, none blocks for the store's timeout; writers put their values back."""
    from slurm_ft.launch.rendezvous.sealing import Sealer

    reports: list[str] = []
    sealer = Sealer(secret, reports.append)
    keys = proto.Keys("tamper-a0", sealer.namespace)
    h = Client.host(0, keys, 5.0, sealer)
    h.prepare(2, proto.Base(0, "u"))
    p = peer(h).rekeyed(keys, sealer)
    info = proto.JoinInfo(1, "node1", "h1", 11, unhealthy="nic: down")
    p.join(0, info)
    h.join(0, proto.JoinInfo(0, "node0", "h0", 10))
    nodes = tuple(f"node{k}" for k in range(65))  # a placement of its own (more than 64 nodes)
    h.publish_decision(0, proto.Decision(proto.Action.RUN, 0, master_port=1234, nodes=nodes))
    p.beat(1)
    p.report_silence(1, "0:5")
    p.mark_done(0, 1)
    h.mark_done(0, 0)
    h.publish_result(0, proto.CycleResult(proto.CycleOutcome.SUCCEEDED, 1.0))
    p.ack(1)
    p.halt(0)
    p.publish_snapshots(0, 1, "held")
    h.publish_snapshot_parts(0, {1: "plan"})
    out = _outsider(h.port)
    listed = [k for k in out.list_keys() if k.startswith(f"slurm_ft/{sealer.namespace}")]
    assert {proto.family(keys, k) for k in listed} == set(proto.FAMILIES) - {None}
    replay = out.get(keys.decision(0))
    soon = time.monotonic

    def read_everything() -> None:
        t = soon()
        h.joined(0, [0, 1])
        h.unhealthy_said(0)
        h.join_records(0, range(2))
        h.poll(0, [0, 1])
        p.result(0)
        h.acked([1])
        h.beats([1])
        h.silences([1])
        h.snapshot_holdings(0, [0, 1])
        p.snapshot_part(0, 1)
        assert soon() - t < 2.0  # nothing waited for the store's 5 s timeout on a missing key
        # (a TCPStore wait of 50 ms may now and then take the connection's timeout on a
        # loaded host: what these must not do is wait on until their own deadline)
        t = soon()
        p.wait_base(deadline=soon() + 0.01, abort=never)
        # as a launcher new to the placement (one that read it before does not read it again)
        p.rekeyed(keys, sealer).wait_decision(0, deadline=soon() + 0.01, abort=never)
        p.wait_result(0, deadline=soon() + 0.01, abort=never)
        assert soon() - t < 7.0

    for key in listed:
        original = out.get(key)
        for shape in _shapes(replay):
            out.set(key, shape)
            read_everything()
        out.delete_key(key)
        read_everything()
        out.set(key, original)
    # the writers' own values come back: beat, join record, failure, done mark
    p.beat(1)
    assert h.beats([1]) == [2]
    p.reassert()  # its join record (and its done mark) again
    assert h.join_records(0, range(2))[1] == info
    f = Failure(kind=FailureKind.WORKER, node="node1", node_rank=1, time=2.0, rank=1, exit_code=3)
    out.set(keys.failure(1), b"\xffnot a failure")
    assert p.publish_failure(1, f) == f and h.poll(1, [0, 1]).failure == f
    p.mark_done(0, 1)
    h.mark_done(0, 0)
    assert h.poll(0, [0, 1]).finished
    if secret is not None:  # each bad key said once, whatever it held and how often
        assert len(reports) == len(set(reports)) == len(sealer.rejected())
        unread = {keys.heartbeat(0), keys.activity(0), keys.halt(0), keys.unhealthy(0)}
        # done marks once read stay read (node 0's own needs none): never read again
        unread |= {keys.done_by(0, 0), keys.done_by(0, 1)}
        assert set(sealer.rejected()) == set(listed) - unread


def test_an_overwritten_heartbeat_key_is_no_sign_of_death_and_a_replayed_beat_no_sign_of_life():
    from slurm_ft.launch.rendezvous.sealing import Sealer

    sealer = Sealer(b"this job's secret, 32 bytes long")
    keys = proto.Keys("hb-tamper-a0", sealer.namespace)
    h = Client.host(0, keys, 5.0, sealer)
    h.prepare(2, proto.Base(0, "u"))
    mon = background.PeerMonitor(h.clone(5.0), [1], interval=0.05, timeout=1.0, wake_fd=None)
    beat = background.Heartbeat(h.clone(5.0), 1, interval=0.05, timeout=5.0)
    out = _outsider(h.port)
    mon.start()
    beat.start()
    try:
        wait_until(lambda: (h.beats([1])[0] or 0) > 2, 5, message="peer 1 beating")
        old = out.get(keys.heartbeat(1))  # a sealed beat of its own, to replay later
        until = time.monotonic() + 2.5
        while time.monotonic() < until:  # garbage over a live peer's key, again and again
            out.set(keys.heartbeat(1), b"\xff garbage")
            time.sleep(0.01)
        assert not mon.lost()
        beat.stop()
        t = time.monotonic()
        while not mon.lost() and time.monotonic() - t < 10:  # the dead peer's old beat, replayed
            out.set(keys.heartbeat(1), old)
            time.sleep(0.01)
        assert list(mon.lost()) == [1]  # (an old beat taken for a new one: never lost)
    finally:
        mon.stop()
        beat.stop()


def test_node0s_beat_reads_open_each_seal_once_and_still_see_every_change_and_forgery():
    """Issue 45: node 0 reads every peer's beat each second and most have not moved; a
    value read again unchanged is not opened again (its HMAC was most of the look's cost),
    and a new beat, a forgery and a beat again all still read as they did."""
    from slurm_ft.launch.rendezvous.sealing import Sealer

    class CountingSealer(Sealer):
        opened = 0

        def open(self, key: str, raw: bytes) -> bytes | None:
            CountingSealer.opened += 1
            return super().open(key, raw)

    reports: list[str] = []
    sealer = CountingSealer(b"this job's secret, 32 bytes long", reports.append)
    keys = proto.Keys("remembered-a0", sealer.namespace)
    h = Client.host(0, keys, 5.0, sealer)
    h.prepare(3, proto.Base(0, "u"))
    monitor = h.clone(5.0)
    one, two = h.clone(5.0), h.clone(5.0)
    one.beat(1)
    two.beat(2)
    assert monitor.beats([1, 2]) == [1, 1] and CountingSealer.opened == 2
    for _ in range(5):
        assert monitor.beats([1, 2]) == [1, 1]
    assert CountingSealer.opened == 2  # unchanged: not opened again
    one.beat(1)
    assert monitor.beats([1, 2]) == [2, 1] and CountingSealer.opened == 3
    _outsider(h.port).set(keys.heartbeat(2), b"sft1:" + b"0" * 64 + b":99")
    assert monitor.beats([1, 2]) == [2, None] and monitor.beats([1, 2]) == [2, None]
    assert len(reports) == 1 and keys.heartbeat(2) in reports[0]
    two.beat(2)
    assert monitor.beats([1, 2]) == [2, 2]


def test_a_big_jobs_monitor_looks_at_one_wake_in_several_and_still_finds_a_silent_peer():
    """Issue 45: past the beat budget node 0 reads the beats at one wake in ``look_every``;
    it still wakes (and calls its hook: the hang learning's samples) every interval."""
    keys = proto.Keys("look-every-a0")
    h = Client.host(0, keys, 5.0)
    h.prepare(2, proto.Base(0, "u"))
    wakes: list[float] = []
    mon = background.PeerMonitor(h.clone(5.0), [1], interval=0.02, timeout=0.5, wake_fd=None, look_every=5)
    mon.after_look = lambda: wakes.append(time.monotonic())
    beat = background.Heartbeat(h.clone(5.0), 1, interval=0.05, timeout=5.0)
    mon.start()
    beat.start()
    try:
        wait_until(lambda: h.beats([1])[0] > 2, 5, message="the peer beating")
        wait_until(lambda: len(wakes) > 20, 5, message="the monitor's wakes")
        assert mon.lost() == {}
        beat.stop()
        lost = wait_until(mon.lost, 5, message="the silent peer reported lost")
        assert list(lost) == [1]
    finally:
        mon.stop()
        beat.stop()
