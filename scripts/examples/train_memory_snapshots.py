#!/usr/bin/env python3
"""A plain PyTorch DDP trainer that keeps its state in the node's memory with slurm-ft's
snapshots, and resumes from the newest one after a failure.

The three lines a plain trainer adds (marked ``# slurm-ft``): ask for a snapshot at start,
load it, and hand the state over after every optimizer step. Outside slurm-ft-launch (or
without ``--snapshot-memory``) both calls do nothing and the trainer starts from step 0.

One line per step per rank on stdout, with hashes of the parameters and of the optimizer
state, so a test can check that a restored state is the one the trainer had at that step:
``rank R step S params P optim O``; and ``rank R restored STEP from SOURCE`` on a restore.
``--crash-rank R --crash-step S`` kills rank R with SIGKILL at step S of its first cycle.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import os
import signal
import sys
import time


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=int(os.environ.get("TRAIN_STEPS", "50")))
    p.add_argument("--step-time", type=float, default=float(os.environ.get("TRAIN_STEP_TIME", "0")))
    p.add_argument("--snapshot-every", type=int, default=1)
    p.add_argument("--crash-rank", type=int, default=-1)
    p.add_argument("--crash-step", type=int, default=-1)
    return p.parse_args()


def digest(tensors: list[object]) -> str:
    import torch

    h = hashlib.sha256()
    for t in tensors:
        if isinstance(t, torch.Tensor):
            h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()[:12]


def main() -> int:
    a = parse()
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    from slurm_ft import worker

    rank = int(os.environ.get("RANK", "0"))
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    start = 0
    restored = worker.restore_snapshot()  # slurm-ft (1/3): the newest state this node kept, or None
    if restored is not None:  # slurm-ft (2/3): load it as a checkpoint
        model.load_state_dict(restored.state["model"])
        opt.load_state_dict(restored.state["optim"])
        start = restored.step + 1
        print(f"rank {rank} restored {restored.step} from {restored.source}", flush=True)
    ddp = DDP(model)
    for step in range(start, a.steps):
        data = torch.Generator().manual_seed(step * 1000 + rank)  # the data of a step, whatever ran before
        x = torch.randn(32, 16, generator=data)
        loss = nn.functional.mse_loss(ddp(x), x.sum(dim=1, keepdim=True) * 0.1)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % a.snapshot_every == 0:
            state = {"model": model.state_dict(), "optim": opt.state_dict()}
            worker.snapshot(step, state, replicated=True)  # slurm-ft (3/3); DDP: every rank holds the same
        optim_tensors = [v for s in opt.state_dict()["state"].values() for v in s.values()]
        params, optim = digest(list(model.parameters())), digest(optim_tensors)
        print(f"rank {rank} step {step} params {params} optim {optim}", flush=True)
        if rank == a.crash_rank and step == a.crash_step and restart == 0:
            os.kill(os.getpid(), signal.SIGKILL)
        if a.step_time:
            time.sleep(a.step_time)
    del ddp
    gc.collect()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
