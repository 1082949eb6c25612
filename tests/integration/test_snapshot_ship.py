"""A complete snapshot shipped as bytes over a real socket into another area, and the
streams that must be refused: cut, corrupted, or torn at the source."""

from __future__ import annotations

import contextlib
import io
import socket
import threading
from pathlib import Path

import pytest

from slurm_ft.snapshot import area as areas
from slurm_ft.snapshot import layout, reader, ship
from tests.support.snaptrainer import Trainer, start

pytestmark = pytest.mark.torch
KEY = layout.rank_key(2)


@pytest.fixture
def other_area(tmp_path: Path) -> Path:
    made = tmp_path / "other"
    made.mkdir(mode=0o700)
    return made


def _shipped(info: reader.SnapshotInfo) -> bytes:
    out = io.BytesIO()
    ship.send(info, out)
    return out.getvalue()


def test_a_snapshot_shipped_over_a_socket_restores_on_the_other_node(
    snap_area: Path,
    other_area: Path,
    trainers: list[Trainer],
) -> None:
    t = start(trainers, snap_area, rank=2, world=4, cycle=1)
    assert t.ask("snap 41") == "snap 41 True"
    info = reader.newest(snap_area, KEY)
    assert info is not None
    left, right = socket.socketpair()
    sender = threading.Thread(target=lambda: ship.send(info, left.makefile("wb")))
    sender.start()
    got = ship.receive(other_area, right.makefile("rb"), origin=layout.Origin.PEER, max_size=1 << 30)
    sender.join(timeout=30)
    left.close()
    right.close()
    assert (got.key, got.step, got.header.origin) == (KEY, 41, layout.Origin.PEER)
    assert [(i.key, i.step, i.header.origin) for i in reader.describe(other_area)] == [
        (KEY, 41, layout.Origin.PEER)
    ]
    there = start(trainers, other_area, rank=2, world=4, cycle=2)
    assert there.ask("restore") == "restored 41 peer-memory True"


@pytest.mark.parametrize(
    ("spoil", "message"),
    [
        (lambda b: b[: len(b) // 2], "the stream ended after"),
        (
            lambda b: b[:-3000] + bytes([b[-3000] ^ 1]) + b[-2999:],
            "the shipped bytes do not match their checksum",
        ),
        (lambda b: b[:40] + bytes([b[40] ^ 1]) + b[41:], "header is not sealed"),
        (lambda b: b"X" + b[1:], "not a shipped snapshot"),
    ],
)
def test_a_spoilt_stream_is_refused_and_the_area_keeps_what_it_had(
    snap_area: Path,
    other_area: Path,
    trainers: list[Trainer],
    spoil: object,
    message: str,
) -> None:
    t = start(trainers, snap_area, rank=2, world=4, cycle=1)
    assert t.ask("snap 1") == "snap 1 True"
    first = reader.newest(snap_area, KEY)
    assert first is not None
    ship.receive(other_area, io.BytesIO(_shipped(first)), origin=layout.Origin.REPLICA, max_size=1 << 30)
    assert t.ask("snap 2") == "snap 2 True"
    second = reader.newest(snap_area, KEY)
    assert second is not None and callable(spoil)
    with pytest.raises(ship.ShipError, match=message):
        ship.receive(
            other_area, io.BytesIO(spoil(_shipped(second))), origin=layout.Origin.REPLICA, max_size=1 << 30
        )
    assert [(i.step, i.header.origin) for i in reader.describe(other_area)] == [(1, layout.Origin.REPLICA)]
    kept = reader.complete_slots(other_area, KEY)
    assert len(kept) == 1


def test_a_slot_rewritten_while_it_is_sent_is_refused_on_arrival(
    snap_area: Path,
    other_area: Path,
    trainers: list[Trainer],
) -> None:
    t = start(trainers, snap_area, rank=2, world=4, cycle=1)
    assert t.ask("snap 1") == "snap 1 True"
    stale = reader.newest(snap_area, KEY)
    assert t.ask("snap 2") == "snap 2 True"
    assert t.ask("snap 3") == "snap 3 True"  # the slot `stale` names now holds step 3
    assert stale is not None
    assert len(_shipped(stale)) < stale.header.file_size  # the sender stopped at once: nothing of it sent
    with pytest.raises(ship.Superseded, match="rewritten while it was sent"):
        ship.receive(other_area, io.BytesIO(_shipped(stale)), origin=layout.Origin.PEER, max_size=1 << 30)
    assert reader.describe(other_area) == []
    with pytest.raises(ship.ShipError, match="at most 4096 taken"):
        fresh = reader.newest(snap_area, KEY)
        assert fresh is not None
        ship.receive(other_area, io.BytesIO(_shipped(fresh)), origin=layout.Origin.PEER, max_size=4096)


def test_a_slot_being_sent_is_held_still_while_the_trainer_snapshots_into_a_new_file(
    snap_area: Path, other_area: Path, trainers: list[Trainer]
) -> None:
    t = start(trainers, snap_area, rank=2, world=4, cycle=1, mib=20)  # three pieces of 8 MiB
    assert t.ask("snap 1") == "snap 1 True"
    info = reader.newest(snap_area, KEY)
    assert info is not None

    class Rewritten(io.BytesIO):
        """The stream to the next node; once the first piece has left, the trainer writes
        two more snapshots (the second where the slot being sent is)."""

        pieces = 0

        def write(self, data: object) -> int:
            n = super().write(data)  # type: ignore[call-overload]
            if n >= 1 << 20:
                self.pieces += 1
                if self.pieces == 1:
                    assert [t.ask(f"snap {s}") for s in (2, 3)] == ["snap 2 True", "snap 3 True"]
            return int(n)

    out = Rewritten()
    sent = ship.send(info, out)
    assert sent.whole and out.pieces == 3  # the whole of step 1, though its slot's place now holds 3
    # the trainer's two newest where readers look: step 3 went to a new file, step 1's is gone
    assert [i.step for i in reader.complete_slots(snap_area, KEY)] == [3, 2]
    assert areas.held(snap_area) == 2 * info.header.file_size  # the held file, unlinked, is not counted
    got = ship.receive(other_area, io.BytesIO(out.getvalue()), origin=layout.Origin.REPLICA, max_size=1 << 30)
    assert got.step == 1 and whole_in(got)
    assert t.ask("snap 4") == "snap 4 True"  # into its older slot, in place
    assert [i.step for i in reader.complete_slots(snap_area, KEY)] == [4, 3]


def whole_in(info: reader.SnapshotInfo) -> bool:
    from tests.integration.snapshot_worker import whole

    return whole(info.step, reader.load(info, copy=True))


def test_a_trainer_goes_on_writing_where_readers_look_after_a_copy_arrives_in_its_area(
    snap_area: Path, other_area: Path, trainers: list[Trainer]
) -> None:
    here = start(trainers, snap_area, rank=2, world=4, cycle=1)
    assert [here.ask(f"snap {s}") for s in (1, 2)] == ["snap 1 True", "snap 2 True"]
    elsewhere = start(trainers, other_area, rank=2, world=4, cycle=1)
    assert elsewhere.ask("snap 50") == "snap 50 True"
    info = reader.newest(other_area, KEY)
    assert info is not None
    ship.receive(snap_area, io.BytesIO(_shipped(info)), origin=layout.Origin.PEER, max_size=1 << 30)
    assert [(i.step, i.header.origin) for i in reader.complete_slots(snap_area, KEY)] == [
        (50, layout.Origin.PEER),
        (2, layout.Origin.WRITTEN),
    ]
    assert here.ask("snap 3") == "snap 3 True"  # into the slot of step 2, now the older one
    assert [(i.step, i.header.origin) for i in reader.complete_slots(snap_area, KEY)] == [
        (3, layout.Origin.WRITTEN),
        (50, layout.Origin.PEER),
    ]


def test_a_persist_and_a_send_hold_one_slot_at_once_and_the_trainer_never_waits(
    snap_area: Path, other_area: Path, trainers: list[Trainer]
) -> None:
    t = start(trainers, snap_area, rank=2, world=4, cycle=1, mib=20)  # three pieces of 8 MiB
    assert [t.ask(f"snap {s}") for s in (1, 2)] == ["snap 1 True", "snap 2 True"]
    with contextlib.ExitStack() as persist:
        info = persist.enter_context(reader.held_still(snap_area, KEY, wait_s=5))
        assert info is not None and info.step == 2

        class Midway(io.BytesIO):
            """Once the first piece has left: a snapshot while the persist holds the key
            (skipped), the persist done, then two (the second where the slot being sent is)."""

            pieces = 0

            def write(self, data: object) -> int:
                n = super().write(data)  # type: ignore[call-overload]
                if n >= 1 << 20:
                    self.pieces += 1
                    if self.pieces == 1:
                        assert info is not None and whole_in(info)  # the persist's read, beside the send
                        assert t.ask("snap 3") == "snap 3 False"
                        persist.close()
                        assert [t.ask(f"snap {s}") for s in (4, 5)] == ["snap 4 True", "snap 5 True"]
                return int(n)

        out = Midway()
        sent = ship.send(info, out)
    assert sent.whole and out.pieces == 3
    assert [i.step for i in reader.complete_slots(snap_area, KEY)] == [5, 4]
    got = ship.receive(other_area, io.BytesIO(out.getvalue()), origin=layout.Origin.REPLICA, max_size=1 << 30)
    assert got.step == 2 and whole_in(got)
