"""What a snapshot costs the training loop, beside the physical reference and torch.save.

For one state of fp32 tensors (1 GiB by default), in one run, rounds interleaved:

* ``snapshot``: the time ``worker.snapshot`` blocks the loop (the session the worker API
  uses, into an area on /dev/shm, slots already reserved: the steady state of a trainer
  that snapshots every step; the first call, which reserves the slot, is reported apart);
* ``plain copy``: the same tensors copied by torch into a preallocated, already touched
  shared-memory mapping, the physical floor for any in-memory snapshot;
* ``torch.save`` of the same state to local disk and to /dev/shm;
* restoring: ``restore_snapshot`` (one copy into the process's memory, and mapped without
  a copy) against ``torch.load`` from local disk with the page cache warm; and the whole
  restore into a model whose tensors exist (what ``load_state_dict`` does: a copy into
  them), mapped restore against torch.load, each followed by that copy.

Goals (issue #43): a snapshot within 2x of the plain copy; a restore at least 5x faster
than torch.load from disk. On a shared machine absolute times drift: read the ratios,
each taken against a reference measured in the same round.

    python -m benchmarks.snapshot_cost [--gib 1.0] [--rounds 5] [--json PATH]
"""

from __future__ import annotations

import json
import mmap
import os
import statistics
import sys
import time
from pathlib import Path

import torch

from benchmarks import cmdline
from slurm_ft import privatefiles
from slurm_ft.snapshot import area, session

SHM = Path("/dev/shm")
DISK = Path(os.environ.get("TMPDIR") or "/tmp")
TENSOR_MIB = 64


def make_state(gib: float) -> dict[str, object]:
    """A model-and-optimizer shaped state: fp32 tensors of 64 MiB, and a few small values."""
    count = max(1, round(gib * 1024 / TENSOR_MIB))
    n = TENSOR_MIB << 20 >> 2
    half = count // 2 or 1
    return {
        "model": {f"layer{i}.weight": torch.randn(n) for i in range(half)},
        "optim": {"state": {i: {"exp_avg": torch.randn(n)} for i in range(count - half)}, "step": 1},
        "epoch": 3,
    }


def tensors_of(state: object) -> list[torch.Tensor]:
    if isinstance(state, torch.Tensor):
        return [state]
    if isinstance(state, dict):
        return [t for v in state.values() for t in tensors_of(v)]
    return []


class PlainCopy:
    """The floor: a mapping of the state's size, preallocated and touched, and a copy."""

    def __init__(self, where: Path, tensors: list[torch.Tensor]) -> None:
        self.tensors = tensors
        size = sum(t.numel() * t.element_size() for t in tensors)
        fd, self.path = privatefiles.create_file(where, "slurm-ft-bench-plain-")
        os.close(fd)
        fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        os.ftruncate(fd, size)
        os.posix_fallocate(fd, 0, size)
        self.map = mmap.mmap(fd, size)
        os.close(fd)
        self.views = []
        offset = 0
        for t in tensors:
            nbytes = t.numel() * t.element_size()
            self.views.append(
                torch.frombuffer(self.map, dtype=torch.uint8, count=nbytes, offset=offset).view(t.dtype)
            )
            offset += nbytes
        self.copy()  # touch every page once, as a snapshot's slots are after the first call

    def copy(self) -> None:
        for dst, src in zip(self.views, self.tensors, strict=True):
            dst.copy_(src.reshape(-1))

    def close(self) -> None:
        self.views.clear()
        self.map.close()
        os.unlink(self.path)


def into(model: list[torch.Tensor], state: object) -> None:
    """What load_state_dict does with a state: copy each tensor into the model's own."""
    for dst, src in zip(model, tensors_of(state), strict=True):
        dst.copy_(src)


def mapped_state(trainer: session.Session) -> dict[str, object]:
    got = trainer.restore(copy=False)
    assert got is not None
    return got.state


def timed(fn: object) -> float:
    assert callable(fn)
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = cmdline.Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=cmdline.positive_float, default=1.0)
    parser.add_argument("--rounds", type=cmdline.positive_int, default=5)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    state = make_state(args.gib)
    tensors = tensors_of(state)
    nbytes = sum(t.numel() * t.element_size() for t in tensors)
    snap_area = privatefiles.create_dir(SHM, "slurm-ft-bench-snap-")
    disk_dir = privatefiles.create_dir(DISK, "slurm-ft-bench-save-")
    shm_dir = privatefiles.create_dir(SHM, "slurm-ft-bench-save-")
    placement = session.Placement(
        rank=0, world_size=1, local_rank=0, local_world_size=1, node_rank=0, cycle=1
    )
    trainer = session.Session(session.Settings(snap_area, None, placement, None))
    times: dict[str, list[float]] = {k: [] for k in ("snapshot", "plain", "save_disk", "save_shm")}
    restore: dict[str, list[float]] = {
        k: [] for k in ("restore_copy", "restore_mapped", "load_disk", "into_model_mapped", "into_model_load")
    }
    try:
        plain = PlainCopy(shm_dir, tensors)  # in a dir the finally removes, whatever fails
        first = [timed(lambda: trainer.snapshot(0, state, replicated=False)) for _ in range(2)]  # both slots
        for r in range(args.rounds):
            times["plain"].append(timed(plain.copy))
            times["snapshot"].append(timed(lambda r=r: trainer.snapshot(r + 1, state, replicated=False)))
            times["save_disk"].append(timed(lambda: torch.save(state, disk_dir / "state.pt")))
            times["save_shm"].append(timed(lambda: torch.save(state, shm_dir / "state.pt")))
            (shm_dir / "state.pt").unlink()
        plain.close()
        torch.load(disk_dir / "state.pt")  # the page cache warm, as the figure had it
        for _ in range(args.rounds):
            restore["load_disk"].append(timed(lambda: torch.load(disk_dir / "state.pt")))
            restore["restore_copy"].append(timed(lambda: trainer.restore(copy=True)))
            restore["restore_mapped"].append(timed(lambda: trainer.restore(copy=False)))
            restore["into_model_load"].append(timed(lambda: into(tensors, torch.load(disk_dir / "state.pt"))))
            restore["into_model_mapped"].append(timed(lambda: into(tensors, mapped_state(trainer))))
        assert trainer.snapshot(99, state, replicated=False)
        back = trainer.restore(copy=True)
        assert back is not None and back.step == 99
        assert all(torch.equal(a, b) for a, b in zip(tensors_of(back.state), tensors, strict=True))
    finally:
        privatefiles.remove_tree(snap_area)
        privatefiles.remove_tree(disk_dir)
        privatefiles.remove_tree(shm_dir)
    med = {k: statistics.median(v) for k, v in {**times, **restore}.items()}
    per_round_ratio = [s / p for s, p in zip(times["snapshot"], times["plain"], strict=True)]
    figures = {
        "state_bytes": nbytes,
        "rounds": args.rounds,
        "torch_threads": torch.get_num_threads(),
        "first_snapshot_s": first,
        "median_s": med,
        "all_s": {**times, **restore},
        "snapshot_over_plain": statistics.median(per_round_ratio),
        "save_shm_over_snapshot": med["save_shm"] / med["snapshot"],
        "save_disk_over_snapshot": med["save_disk"] / med["snapshot"],
        "load_disk_over_restore_copy": med["load_disk"] / med["restore_copy"],
        "load_disk_over_restore_mapped": med["load_disk"] / med["restore_mapped"],
        "into_model_load_over_mapped": med["into_model_load"] / med["into_model_mapped"],
    }
    gib = nbytes / (1 << 30)
    print(f"snapshot cost, {area.human(nbytes)} of fp32 tensors, {args.rounds} rounds interleaved (median s)")
    print(f"{'':<38}{'s':>8}{'s/GiB':>8}")
    for label, key in (
        ("snapshot (steady)", "snapshot"),
        ("plain copy into shm mapping", "plain"),
        ("torch.save to local disk", "save_disk"),
        ("torch.save to /dev/shm", "save_shm"),
        ("restore_snapshot (one copy)", "restore_copy"),
        ("restore_snapshot(mapped=True)", "restore_mapped"),
        ("torch.load from disk (warm)", "load_disk"),
        ("into a model: mapped restore + copy", "into_model_mapped"),
        ("into a model: torch.load + copy", "into_model_load"),
    ):
        print(f"{label:<38}{med[key]:>8.3f}{med[key] / gib:>8.3f}")
    print(f"first snapshot (reserves the slot): {first[0]:.3f} s, second slot {first[1]:.3f} s")
    print(
        f"snapshot / plain copy {figures['snapshot_over_plain']:.2f}x (goal <= 2x); "
        f"torch.save to /dev/shm / snapshot {figures['save_shm_over_snapshot']:.1f}x; "
        f"torch.load / restore {figures['load_disk_over_restore_copy']:.1f}x copied, "
        f"{figures['load_disk_over_restore_mapped']:.0f}x mapped (goal >= 5x); "
        f"into a model {figures['into_model_load_over_mapped']:.1f}x"
    )
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
