"""A launcher's snapshot service in a process of its own (another node, as the tests see
it): serves AREA with the job secret from SLURM_FT_JOB_SECRET, prints ``port N``, and
serves until its stdin closes. ``--die-mid-send`` makes it SIGKILL itself half way
through the first snapshot it sends (the peer holding the only copy dies in the transfer);
``--stall-mid-send`` makes it send half and then nothing more, the connection open, until
its stdin closes (a frozen peer); ``--trickle`` makes it send a few bytes at a time, never
long idle but never done (a peer on a dying link).

    python -m tests.integration.snapshot_peer AREA [--die-mid-send | --stall-mid-send | --trickle]
    python -m tests.integration.snapshot_peer AREA --push HOST:PORT KEY --die-mid-send
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path
from typing import BinaryIO

from slurm_ft.launch.snapshots import peer
from slurm_ft.snapshot import reader, ship


def _shipped(info: reader.SnapshotInfo) -> bytes:
    ship_bytes = bytearray()

    class Half:
        def write(self, data: bytes) -> int:
            ship_bytes.extend(data)
            return len(data)

        def flush(self) -> None:
            pass

    ship.send(info, Half())  # type: ignore[arg-type]
    return bytes(ship_bytes)


def die_half_way(info: reader.SnapshotInfo, out: BinaryIO) -> ship.Sent:
    """Send the preamble and half the slot, then die as a lost node does: at once."""
    data = _shipped(info)
    out.write(data[: len(data) // 2])
    out.flush()
    os.kill(os.getpid(), signal.SIGKILL)
    return ship.Sent(0, False)


FREED = threading.Event()  # set when stdin closes: a stalled or trickling sender lets go


def stall_half_way(info: reader.SnapshotInfo, out: BinaryIO) -> ship.Sent:
    """Send half the slot, then nothing, holding the connection open (a frozen peer)."""
    data = _shipped(info)
    out.write(data[: len(data) // 2])
    out.flush()
    FREED.wait()
    return ship.Sent(0, False)


def trickle(info: reader.SnapshotInfo, out: BinaryIO) -> ship.Sent:
    """Send 64 bytes every 20 ms: never idle for long, never done (a dying link)."""
    data = _shipped(info)
    for begin in range(0, len(data), 64):
        out.write(data[begin : begin + 64])
        out.flush()
        if FREED.wait(0.02):
            break
    return ship.Sent(0, False)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("area", type=Path)
    parser.add_argument("--die-mid-send", action="store_true")
    parser.add_argument("--stall-mid-send", action="store_true")
    parser.add_argument("--trickle", action="store_true")
    parser.add_argument("--push", nargs=2, metavar=("ADDRESS", "KEY"))
    args = parser.parse_args()
    secret = os.environ["SLURM_FT_JOB_SECRET"].encode()
    if args.push:
        info = reader.newest(args.area, args.push[1])
        assert info is not None
        address = peer.Address.parse(args.push[0])
        _conn, f = peer._open(address, secret, {"op": "put"}, 30.0)
        die_half_way(info, f)  # type: ignore[arg-type]
        return 1
    server = peer.PeerServer(
        args.area,
        secret,
        host="127.0.0.1",
        max_size=1 << 34,
        event=lambda line: print(line, file=sys.stderr, flush=True),
        send=next(
            (
                chosen
                for asked, chosen in (
                    (args.die_mid_send, die_half_way),
                    (args.stall_mid_send, stall_half_way),
                    (args.trickle, trickle),
                )
                if asked
            ),
            None,  # the launcher's own sender
        ),
    )
    print(f"port {server.port}", flush=True)
    sys.stdin.read()
    FREED.set()
    server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
