"""How long a lost node's snapshot takes to reach the node that needs it (issue #44).

One snapshot of fp32 tensors (``--gib`` each size) is written into an area on /dev/shm
the way a trainer writes it; a second process serves that area (the holder's launcher,
``slurm_ft.launch.snapshots.peer``), and this one fetches the snapshot over loopback TCP
with the job-secret handshake into another area, verified (CRC-32) and sealed: the time a
spare waits before its workers start. Beside it, in the same round, the physical floor on
one machine: a copy of the same slot file within /dev/shm. Loopback is not a network:
on real nodes the link's bandwidth bounds the transfer (e.g. 100 Gb/s: about 0.09 s/GiB).
Beside each, the longest the protocol lets that transfer take before the spare gives up
on the holder (:func:`slurm_ft.launch.snapshots.peer.bound` of the launcher's 30 s
timeout).

A size's run holds two copies of it in /dev/shm at once (the holder's slot and the
fetched one) and the state itself while it is made: a size that does not fit the
memory available now is refused in one line, before anything is made.

    python -m benchmarks.snapshot_transfer [--gib 1 2 4] [--rounds 3] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import cmdline
from slurm_ft import privatefiles
from slurm_ft.snapshot import area, layout, reader, session

SHM = Path("/dev/shm")
SECRET_ENV = "SLURM_FT_BENCH_SECRET"


def write_snapshot(where: Path, gib: float) -> reader.SnapshotInfo:
    import torch

    n = 64 << 20 >> 2
    count = max(1, round(gib * 1024 / 64))
    state: dict[str, object] = {f"layer{i}": torch.empty(n).fill_(i + 0.5) for i in range(count)}
    placement = session.Placement(
        rank=0, world_size=2, local_rank=0, local_world_size=1, node_rank=0, cycle=1
    )
    trainer = session.Session(session.Settings(where, None, placement, None))
    assert trainer.snapshot(1, state, replicated=True)
    info = reader.newest(where, layout.REPLICATED)
    assert info is not None
    return info


def serve(where: Path) -> int:
    """The holder's launcher: serves ``where`` until stdin closes."""
    from slurm_ft.launch.snapshots.peer import PeerServer

    server = PeerServer(where, os.environ[SECRET_ENV].encode(), host="127.0.0.1", max_size=1 << 40)
    print(server.port, flush=True)
    sys.stdin.read()
    server.close()
    return 0


def available_bytes() -> int:
    for line in Path("/proc/meminfo").read_text(encoding="ascii").splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


def measure(gib: float, rounds: int) -> dict[str, object]:
    from slurm_ft.launch.snapshots import lostnode, peer

    source = privatefiles.create_dir(SHM, "slurm-ft-bench-src-")
    target = privatefiles.create_dir(SHM, "slurm-ft-bench-dst-")
    secret = secrets.token_hex(32)
    holder: subprocess.Popen[bytes] | None = None
    fetch: list[float] = []
    plain: list[float] = []
    try:
        info = write_snapshot(source, gib)
        holder = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.snapshot_transfer", "--serve", str(source)],
            env={**os.environ, SECRET_ENV: secret},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert holder.stdout is not None
        address = peer.Address("127.0.0.1", int(holder.stdout.readline()))
        for _ in range(rounds):
            t0 = time.perf_counter()
            got = peer.fetch(address, secret.encode(), layout.REPLICATED, 1, target, max_size=1 << 40)
            fetch.append(time.perf_counter() - t0)
            assert got.step == 1 and got.header.file_size == info.header.file_size
            got.path.unlink()  # the next round reserves and fills a fresh slot, as a spare does
            t0 = time.perf_counter()
            shutil.copyfile(info.path, target / "plain-copy")
            plain.append(time.perf_counter() - t0)
            (target / "plain-copy").unlink()
    finally:
        if holder is not None:
            holder.communicate(b"", timeout=60)
        privatefiles.remove_tree(source)
        privatefiles.remove_tree(target)
    size = info.header.file_size
    return {
        "bytes": size,
        "bound_s": peer.bound(lostnode.FETCH_TIMEOUT_S).seconds(size),
        "rounds": rounds,
        "fetch_s": fetch,
        "plain_copy_s": plain,
        "fetch_median_s": statistics.median(fetch),
        "plain_median_s": statistics.median(plain),
        "fetch_gib_per_s": size / (1 << 30) / statistics.median(fetch),
        "fetch_over_plain": statistics.median(f / p for f, p in zip(fetch, plain, strict=True)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = cmdline.Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=cmdline.positive_float, nargs="+", default=[1.0])
    parser.add_argument("--rounds", type=cmdline.positive_int, default=3)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve is not None:
        return serve(args.serve)
    need = max(args.gib) * (3 << 30) + (2 << 30)
    if available_bytes() < need:
        print(
            f"snapshot_transfer: {max(args.gib):g} GiB needs about {need / (1 << 30):.0f} GiB of memory "
            f"available, {available_bytes() / (1 << 30):.1f} GiB is now",
            file=sys.stderr,
        )
        return 2
    results = [measure(g, args.rounds) for g in args.gib]
    print(f"snapshot transfer over loopback TCP, {args.rounds} rounds (median)")
    print(f"{'state':>10}{'fetch s':>10}{'GiB/s':>8}{'shm copy s':>12}{'ratio':>8}{'bound s':>9}")
    for r in results:
        size = int(r["bytes"])  # type: ignore[call-overload]
        print(
            f"{area.human(size):>10}{r['fetch_median_s']:>10.3f}{r['fetch_gib_per_s']:>8.2f}"
            f"{r['plain_median_s']:>12.3f}{r['fetch_over_plain']:>7.1f}x{r['bound_s']:>9.0f}"
        )
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
