#!/usr/bin/env python3
"""A plain DDP trainer in the shape of the PyTorch DDP tutorial: one snapshot, overwritten.

Nothing slurm-ft specific: it reads the torchrun environment, trains a tiny model with gloo
all-reduces, saves ``snapshot.pt`` (``torch.save`` of ``{"MODEL_STATE", "EPOCHS_RUN"}``)
every ``--save-every`` epochs from rank 0, and on start resumes from that snapshot when it
exists. It writes no iteration file: the no-progress guard watches it with
``--progress-source file:SNAPSHOT``.

Crash injection for tests: ``--crash R:E[,R:E...]`` makes global rank ``--crash-rank`` kill
itself with SIGKILL on reaching epoch E in restart R (``TORCHELASTIC_RESTART_COUNT``);
``*:E`` in every restart. Also read from ``TRAIN_CRASH`` / ``TRAIN_CRASH_RANK``.
"""

from __future__ import annotations

import argparse
import gc
import os
import signal
import sys
import time


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--snapshot", default=os.environ.get("TRAIN_SNAPSHOT", "snapshot.pt"))
    p.add_argument("--epochs", type=int, default=int(os.environ.get("TRAIN_EPOCHS", "30")))
    p.add_argument("--save-every", type=int, default=int(os.environ.get("TRAIN_SAVE_EVERY", "5")))
    p.add_argument(
        "--epoch-time",
        type=float,
        default=float(os.environ.get("TRAIN_EPOCH_TIME", "0")),
        help="sleep S s per epoch (a slower trainer's rhythm, for the hang benchmarks)",
    )
    p.add_argument("--crash", default=os.environ.get("TRAIN_CRASH", ""))
    p.add_argument("--crash-rank", type=int, default=int(os.environ.get("TRAIN_CRASH_RANK", "0")))
    return p.parse_args()


def crash_epoch(plan: str, restart: int) -> int | None:
    for item in filter(None, plan.split(",")):
        when, _, epoch = item.partition(":")
        if when == "*" or int(when) == restart:
            return int(epoch)
    return None


def main() -> int:
    a = parse()
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank = int(os.environ["RANK"])
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    model = nn.Sequential(nn.Linear(16, 8), nn.Tanh(), nn.Linear(8, 1))
    epochs_run = 0
    if os.path.exists(a.snapshot):
        snapshot = torch.load(a.snapshot, weights_only=True)
        model.load_state_dict(snapshot["MODEL_STATE"])
        epochs_run = snapshot["EPOCHS_RUN"]
        print(f"rank {rank}: resuming from snapshot at epoch {epochs_run}", flush=True)
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    data = torch.Generator().manual_seed(1000 + rank)
    crash_at = crash_epoch(a.crash, restart) if rank == a.crash_rank else None
    for epoch in range(epochs_run, a.epochs):
        for _ in range(4):
            x = torch.randn(32, 16, generator=data)
            loss = nn.functional.mse_loss(ddp(x), x.sum(dim=1, keepdim=True) * 0.1)
            opt.zero_grad()
            loss.backward()
            opt.step()
        if a.epoch_time:
            time.sleep(a.epoch_time)
        done = epoch + 1
        print(f"rank {rank}: epoch {done} loss {loss.item():.5f}", flush=True)
        if rank == 0 and done % a.save_every == 0:
            torch.save({"MODEL_STATE": model.state_dict(), "EPOCHS_RUN": done}, a.snapshot)
            print(f"rank {rank}: snapshot saved at epoch {done}", flush=True)
        dist.barrier()
        if crash_at is not None and done >= crash_at:
            print(f"rank {rank}: killed at epoch {done}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
    print(f"rank {rank}: finished at epoch {a.epochs}", flush=True)
    # DDP's reducer must not be the one to destroy the gloo group: a finished rank can
    # hang for ever (see train_ddp.py)
    ddp = opt = model = None
    gc.collect()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    code = main()
    gc.collect()  # free DDP's cycles (and the gloo group) before exit: see train_ddp.py
    sys.exit(code)
