"""What ``--snapshot-replicas 1`` costs the trainer's step rate (issue #44: at most 2 %).

A trainer stand-in (its own process, one torch thread) runs steps of fixed work, each
followed by a sharded snapshot of ``--mib`` MiB; this process is the node's launcher and,
in alternate phases of ``--phase-s`` seconds, runs the replica pusher of
:mod:`slurm_ft.launch.snapshots.lostnode` (every new snapshot to the next node), and the
next node's receiving service. The step rate of the phases with replicas is compared with
the phases without, interleaved. On one machine the receiver's work (copy, CRC) competes
with the trainer too, which on real nodes runs elsewhere: an upper bound.

    python -m benchmarks.snapshot_replicas [--mib 64] [--phase-s 8] [--phases 6] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import subprocess
import sys
import time
from pathlib import Path

from slurm_ft import privatefiles

SHM = Path("/dev/shm")


def train(where: Path, mib: int, stamps: Path) -> int:
    """The trainer: steps until killed, a stamp per step (its end time)."""
    import torch

    from slurm_ft.snapshot import session

    torch.set_num_threads(1)
    state = {"shard": torch.randn(mib << 20 >> 2)}
    a = torch.randn(256, 256)
    placement = session.Placement(
        rank=0, world_size=2, local_rank=0, local_world_size=1, node_rank=0, cycle=1
    )
    trainer = session.Session(session.Settings(where, None, placement, None))
    step = 0
    with open(stamps, "a", encoding="ascii") as out:
        while True:
            step += 1
            for _ in range(200):  # the step's work
                a = torch.tanh(a @ a * 0.01)
            state["shard"].add_(1.0)
            trainer.snapshot(step, state, replicated=False)
            out.write(f"{time.monotonic()}\n")
            out.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--phase-s", type=float, default=8.0)
    parser.add_argument("--phases", type=int, default=6)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--train", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.train:
        return train(Path(args.train[0]), args.mib, Path(args.train[1]))
    from slurm_ft.launch.snapshots import peer
    from slurm_ft.launch.snapshots.lostnode import Holdings, LostNodes

    mine = privatefiles.create_dir(SHM, "slurm-ft-bench-rep-a-")
    theirs = privatefiles.create_dir(SHM, "slurm-ft-bench-rep-b-")
    stamps = mine / "stamps"
    secret = secrets.token_bytes(32)
    quiet = lambda _line: None  # noqa: E731
    trainer = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "benchmarks.snapshot_replicas",
            "--mib",
            str(args.mib),
            "--train",
            str(mine),
            str(stamps),
        ]
    )
    receiver = peer.PeerServer(theirs, secret, host="127.0.0.1", max_size=1 << 40, event=quiet)
    phases: list[tuple[bool, float, float]] = []
    try:
        time.sleep(args.phase_s)  # the trainer's start-up and first slots, outside every phase
        for k in range(args.phases):
            on = k % 2 == 1
            pusher = None
            if on:
                pusher = LostNodes(mine, secret, 0, "127.0.0.1", limit=None, replicas=1, event=quiet)
                published = {1: Holdings(peer.Address("127.0.0.1", receiver.port), {}).encode()}
                with pusher._target_lock:  # the ring's next node, as prepare() sets it
                    pusher._target = Holdings.decode(published[1] or "").address  # type: ignore[union-attr]
            t0 = time.monotonic()
            time.sleep(args.phase_s)
            phases.append((on, t0, time.monotonic()))
            if pusher is not None:
                pusher.close()
    finally:
        trainer.kill()
        trainer.wait()
        receiver.close()
        ends = [float(x) for x in stamps.read_text().split()]
        privatefiles.remove_tree(mine)
        privatefiles.remove_tree(theirs)
    rates = {True: [], False: []}  # type: dict[bool, list[float]]
    for on, t0, t1 in phases:
        inside = [t for t in ends if t0 <= t < t1]
        if len(inside) >= 2:
            rates[on].append((len(inside) - 1) / (inside[-1] - inside[0]))
    off, on_ = statistics.median(rates[False]), statistics.median(rates[True])
    result = {
        "mib": args.mib,
        "phase_s": args.phase_s,
        "steps_per_s_without": rates[False],
        "steps_per_s_with": rates[True],
        "slowdown": 1 - on_ / off,
        "replicated_mib_per_s": on_ * args.mib,
    }
    print(
        f"replicas of {args.mib} MiB per step: {off:.2f} steps/s without, {on_:.2f} with "
        f"({result['slowdown'] * 100:+.1f} % slower; {result['replicated_mib_per_s']:.0f} MiB/s replicated)"
    )
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
