"""What the launchers' persist at the breakpoint takes, by approach, on a loaded node.

A snapshot of fp32 tensors (256 MiB and 1 GiB by default) in a slot file on /dev/shm,
persisted to local disk with ``--burners`` CPU burners (busy Python loops, default 2: a
2-core node whose workers are still exiting) running beside it, rounds interleaved:

* ``torch.save child``: what the launchers did before: a fresh child that imports torch,
  maps the slot's tensors and writes one ``torch.save`` file, flushed to disk;
* ``warm torch.save``: the same write in a process that has torch imported already (the
  best a persist child started early, warm, could do at the breakpoint);
* ``byte copy child``: what the launchers do now (:mod:`slurm_ft.launch.snapshots.persist`
  without a hook): a child that copies the slot file as bytes, flushed to disk, no torch;
* ``byte copy in process``: the same copy without the child's start (the floor).

Figures are seconds, medians over the rounds; on a shared machine read them beside each
other, not alone.

    python -m benchmarks.snapshot_persist [--mib 256,1024] [--rounds 3] [--burners 2] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks import cmdline

DISK = Path(os.environ.get("TMPDIR") or "/tmp")
SHM = Path("/dev/shm")
APPROACHES = ("torch.save child", "warm torch.save", "byte copy child", "byte copy in process")


def torch_save(slot: Path, out: Path) -> None:
    """The write of the ``torch.save`` approaches (in the child, or warm in this process)."""
    import torch

    from slurm_ft.snapshot import layout, reader

    sealed = reader.read_header(slot)
    assert sealed is not None
    info = reader.SnapshotInfo(layout.rank_key(0), slot, sealed.generation, sealed.header)
    with open(out, "wb") as fh:
        torch.save({"step": info.step, "state": reader.load(info, copy=False)}, fh)
        fh.flush()
        os.fsync(fh.fileno())


def write_slot(where: Path, mib: int) -> Path:
    import torch

    from slurm_ft.snapshot import layout, writer

    tensor_mib = 64 if mib >= 64 else mib
    n = tensor_mib << 20 >> 2
    state = {"model": {f"w{i}": torch.randn(n) for i in range(max(1, mib // tensor_mib))}, "step": 1}
    me = writer.Identity(1, 0, 0, 0, 1, 1, os.getpid(), None)
    kept = writer.SlotWriter(where, layout.rank_key(0), me, None).write(7, state)
    assert kept.outcome is writer.Outcome.KEPT, kept
    from slurm_ft.snapshot import reader

    found = reader.newest(where, layout.rank_key(0))
    assert found is not None
    return found.path


def timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def one_size(mib: int, rounds: int) -> dict[str, list[float]]:
    from slurm_ft import privatefiles
    from slurm_ft.launch.snapshots import persist
    from slurm_ft.snapshot import persisted, reader

    area = privatefiles.create_dir(SHM, "slurm-ft-bench-persist-")
    out = privatefiles.create_dir(DISK, "slurm-ft-bench-persist-")
    try:
        slot = write_slot(area, mib)
        sealed = reader.read_header(slot)
        assert sealed is not None
        info = reader.SnapshotInfo(slot.name.split(".")[0], slot, sealed.generation, sealed.header)
        held = [persist.Held(0, info.step)]
        child = [sys.executable, "-m", "benchmarks.snapshot_persist", "--child", str(slot)]

        def byte_copy_child() -> None:
            done = persist.persist(held, area, str(out), None, 300, python=sys.executable, cwd=".")
            assert done.persisted and not done.not_persisted, done

        runs: dict[str, Callable[[], object]] = {
            "torch.save child": lambda: subprocess.run([*child, str(out / "c.pt")], check=True),
            "warm torch.save": lambda: torch_save(slot, out / "w.pt"),
            "byte copy child": byte_copy_child,
            "byte copy in process": lambda: persisted.save(out / "inproc", info),
        }
        times: dict[str, list[float]] = {k: [] for k in APPROACHES}
        for _ in range(rounds):
            for name in APPROACHES:
                times[name].append(timed(runs[name]))
                privatefiles.remove_tree(out)
                out.mkdir(mode=0o700)
        return times
    finally:
        privatefiles.remove_tree(area)
        privatefiles.remove_tree(out)


def main(argv: list[str] | None = None) -> int:
    parser = cmdline.Parser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--mib", type=cmdline.sizes, default="256,1024", help="state sizes, MiB, comma-separated"
    )
    parser.add_argument("--rounds", type=cmdline.positive_int, default=3)
    parser.add_argument("--burners", type=cmdline.positive_int, default=2)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--child", nargs=2, metavar=("SLOT", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        torch_save(Path(args.child[0]), Path(args.child[1]))
        return 0

    sizes = args.mib
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.burners)]
    try:
        results = {f"{mib} MiB": one_size(mib, args.rounds) for mib in sizes}
    finally:
        for b in burners:
            b.kill()
            b.wait()
    print(
        f"persist of a snapshot to local disk ({DISK}), {args.burners} CPU burners beside it, "
        f"{args.rounds} rounds interleaved (median s; min-max)"
    )
    print(f"{'':<24}" + "".join(f"{size:>22}" for size in results))
    for name in APPROACHES:
        cells = []
        for times in results.values():
            t = times[name]
            cells.append(f"{statistics.median(t):.2f} ({min(t):.2f}-{max(t):.2f})")
        print(f"{name:<24}" + "".join(f"{c:>22}" for c in cells))
    if args.json is not None:
        args.json.write_text(
            json.dumps({"burners": args.burners, "rounds": args.rounds, "s": results}, indent=1)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
