"""A torch-free trainer with the timing of a Lightning ``fit`` loop (``Trainer(
val_check_interval=N)`` with a ``ModelCheckpoint``): a line per training step; every
``--val-every`` steps a validation pass that prints nothing for ``--val-time`` s (a
progress bar that is off, or not a terminal); after every ``--ckpt-every``-th validation
pass, as ``ModelCheckpoint`` does on validation end, a checkpoint save that first prints
and writes nothing for ``--ckpt-think`` s (gathering and serialising the state) and then
writes ``--ckpt-mb`` MiB in 1 MiB pieces over ``--ckpt-write`` s (a slow file system).

The silences are back to back: validation and the checkpoint's quiet part are one gap of
``val-time + ckpt-think`` seconds, the hardest shape of a fit loop for a silence detector.
Only rank 0 saves, every rank validates (DDP's sampler splits the validation set).

Usage: fit_loop.py --step S --steps N [--val-every K --val-time V] [--ckpt-every C
--ckpt-think T --ckpt-mb M --ckpt-write W] [--ckpt-dir DIR]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

MIB = 1 << 20


def save(path: Path, think: float, mib: int, write: float) -> None:
    """Quiet for ``think`` s, then ``mib`` pieces of 1 MiB spread over ``write`` s."""
    time.sleep(think)
    piece = os.urandom(MIB)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as fh:
        for _ in range(mib):
            fh.write(piece)
            fh.flush()
            time.sleep(write / max(1, mib))
    os.replace(tmp, path)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--step", type=float, required=True, help="seconds per training step")
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--val-every", type=int, default=0)
    p.add_argument("--val-time", type=float, default=0.0)
    p.add_argument("--ckpt-every", type=int, default=0, help="a save after every C-th validation")
    p.add_argument("--ckpt-think", type=float, default=0.0)
    p.add_argument("--ckpt-mb", type=int, default=16)
    p.add_argument("--ckpt-write", type=float, default=2.0)
    p.add_argument("--ckpt-dir", default=".")
    a = p.parse_args()
    rank = int(os.environ["RANK"])
    print(f"rank {rank} fit starts", flush=True)
    validations = 0
    for step in range(1, a.steps + 1):
        time.sleep(a.step)
        print(f"rank {rank} epoch 0 step {step} loss 0.{step:05d}", flush=True)
        if a.val_every and step % a.val_every == 0:
            time.sleep(a.val_time)  # validation: no output
            validations += 1
            if a.ckpt_every and validations % a.ckpt_every == 0:
                if rank == 0:
                    save(Path(a.ckpt_dir) / "last.ckpt", a.ckpt_think, a.ckpt_mb, a.ckpt_write)
                else:  # the other ranks wait in the barrier that ends the save
                    time.sleep(a.ckpt_think + a.ckpt_write)
    print(f"rank {rank} fit done", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
