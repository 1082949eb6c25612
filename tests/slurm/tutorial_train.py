#!/usr/bin/env python3
"""The shape of the PyTorch multinode DDP tutorial's trainer: ``train.py TOTAL_EPOCHS SAVE_EVERY``.

A tiny linear model on random data with DDP over gloo, a snapshot every SAVE_EVERY epochs
that a restarted run resumes from; it reads only torchrun's environment. Kept small (one
batch per epoch) so two launches fit in one short test job.
"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main(total_epochs: int, save_every: int) -> None:
    dist.init_process_group(backend="gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(20, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    snapshot = os.environ.get("SNAPSHOT_PATH", "snapshot.pt")
    first = 0
    if os.path.exists(snapshot):
        state = torch.load(snapshot)
        model.module.load_state_dict(state["MODEL_STATE"])
        first = state["EPOCHS_RUN"]
        print(f"[RANK{rank}] resuming from snapshot at epoch {first}", flush=True)
    data, target = torch.randn(32, 20), torch.randn(32, 1)
    for epoch in range(first, total_epochs):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(data), target)
        loss.backward()
        opt.step()
        if rank == 0 and epoch % save_every == 0:
            torch.save({"MODEL_STATE": model.module.state_dict(), "EPOCHS_RUN": epoch + 1}, snapshot)
    group, run = os.environ["GROUP_RANK"], os.environ["TORCHELASTIC_RUN_ID"]
    print(
        f"[RANK{rank}] world {world} group {group} run {run}: trained {total_epochs - first} epochs",
        flush=True,
    )
    dist.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
