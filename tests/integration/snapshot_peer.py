"""A launcher's snapshot service in a process of its own (another node, as the tests see
it): serves AREA with the job secret from SLURM_FT_JOB_SECRET, prints ``port N``, and
serves until its stdin closes. ``--die-mid-send`` makes it SIGKILL itself half way
through the first snapshot it sends (the peer holding the only copy dies in the transfer).

    python -m tests.integration.snapshot_peer AREA [--die-mid-send]
    python -m tests.integration.snapshot_peer AREA --push HOST:PORT KEY --die-mid-send
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path
from typing import BinaryIO

from slurm_ft.launch.snapshots import peer
from slurm_ft.snapshot import reader, ship


def die_half_way(info: reader.SnapshotInfo, out: BinaryIO) -> int:
    """Send the preamble and half the slot, then die as a lost node does: at once."""
    ship_bytes = bytearray()

    class Half:
        def write(self, data: bytes) -> int:
            ship_bytes.extend(data)
            return len(data)

        def flush(self) -> None:
            pass

    ship.send(info, Half())  # type: ignore[arg-type]
    out.write(bytes(ship_bytes[: len(ship_bytes) // 2]))
    out.flush()
    os.kill(os.getpid(), signal.SIGKILL)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("area", type=Path)
    parser.add_argument("--die-mid-send", action="store_true")
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
        send=die_half_way if args.die_mid_send else ship.send,
    )
    print(f"port {server.port}", flush=True)
    sys.stdin.read()
    server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
