"""Node 0's wait for the joins (issue 45): every join record that is there is taken in one
look, chunk after chunk, so a big job's gather is not one chunk of 64 per poll (at 4,096
launchers 64 polls, up to 16 s at the polls' 0.25 s, where the store succession's
successor spent most of its 28 s)."""

from __future__ import annotations

from collections.abc import Sequence

from slurm_ft.launch.rendezvous import localstore
from slurm_ft.launch.rendezvous import protocol as proto
from slurm_ft.launch.rendezvous.client import Client
from slurm_ft.launch.rendezvous.sealing import Sealer
from slurm_ft.launch.roles.joins import JOIN_CHUNK, JoinWait, gather

SEALER = Sealer(b"g" * 32)
KEYS = proto.Keys("gather-a0", SEALER.namespace)


def info(k: int) -> proto.JoinInfo:
    return proto.JoinInfo(k, f"node{k}", "127.0.0.1", 1000 + k)


def clients() -> tuple[localstore.LocalStore, Client]:
    store = localstore.LocalStore()
    return store, Client(store.connect(), KEYS, sealer=SEALER)


def test_every_join_already_there_is_taken_in_one_look() -> None:
    n = 10 * JOIN_CHUNK + 7
    store, host = clients()
    peer = Client(store.connect(), KEYS, sealer=SEALER)
    for k in range(1, n):
        peer.join(1, info(k))
    slept: list[float] = []
    wait = JoinWait(host, n, with_spares=False, departed=frozenset(), lost_peers=dict, own=info(0))
    roster = gather(wait, 1, None, (), 60.0, abort=lambda: False, sleep=slept.append)
    assert roster.complete and roster.names == tuple(f"node{k}" for k in range(n))
    assert slept == []  # one look, not one per chunk


def test_a_chunk_not_yet_whole_is_where_the_next_look_goes_on() -> None:
    n = 4 * JOIN_CHUNK
    store, host = clients()
    peer = Client(store.connect(), KEYS, sealer=SEALER)
    late = 2 * JOIN_CHUNK + 5  # in the third chunk
    for k in range(1, n):
        if k != late:
            peer.join(1, info(k))
    looks: list[float] = []

    def sleep(s: float) -> None:
        looks.append(s)
        if len(looks) == 3:
            peer.join(1, info(late))

    wait = JoinWait(host, n, with_spares=False, departed=frozenset(), lost_peers=dict, own=info(0))
    roster = gather(wait, 1, None, (), 60.0, abort=lambda: False, sleep=sleep)
    assert roster.complete and len(looks) == 3


class CountingReads(localstore.LocalConnection):
    """A connection that notes every key it reads a value of."""

    def __init__(self, store: localstore.LocalStore, read: list[str]) -> None:
        super().__init__(store)
        self.read = read

    def multi_get(self, keys: Sequence[str]) -> list[bytes]:
        self.read.extend(keys)
        return super().multi_get(keys)

    def compare_set(self, key: str, expected: str | bytes, desired: str | bytes) -> bytes:
        self.read.append(key)
        return super().compare_set(key, expected, desired)


def test_each_join_record_is_read_once_in_a_gather() -> None:
    """The wait's end read every record again: 4,096 sealed records opened twice on the way
    to a 4,096-node job's decision. A record read once stays read; a launcher late to the
    end is still read there."""
    n = 3 * JOIN_CHUNK + 5
    store = localstore.LocalStore()
    read: list[str] = []
    host = Client(CountingReads(store, read), KEYS, sealer=SEALER)
    peer = Client(store.connect(), KEYS, sealer=SEALER)
    for k in range(1, n):
        peer.join(1, info(k))
    wait = JoinWait(host, n, with_spares=False, departed=frozenset(), lost_peers=dict, own=info(0))
    roster = gather(wait, 1, None, (), 60.0, abort=lambda: False, sleep=lambda s: None)
    assert roster.complete
    records = [key for key in read if key.startswith(KEYS.join(1, 0).rpartition("/")[0])]
    assert sorted(records) == sorted(KEYS.join(1, k) for k in range(1, n))  # each once, none of node 0's


def test_the_gather_benchmark_gathers_the_late_launcher_after_the_looks_it_is_given() -> None:
    from benchmarks.gather_cost import one_gather

    assert one_gather(3 * JOIN_CHUNK + 1, None)[1] == 0  # every record there: one look
    assert one_gather(3 * JOIN_CHUNK + 1, 5)[1] == 5
