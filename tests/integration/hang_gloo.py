"""A gloo job where one rank never reaches the all-reduce the others are blocked in (a
peer lost inside a collective, the way NCCL hangs), in cycle 0 only."""

from __future__ import annotations

import os
import sys
import time

import torch
import torch.distributed as dist

from slurm_ft import worker


def main() -> int:
    hung = int(sys.argv[1])
    dist.init_process_group("gloo")
    rank, cycle = dist.get_rank(), int(os.environ["SLURM_FT_CYCLE"])
    print(f"rank {rank} joined cycle {cycle}", flush=True)
    worker.heartbeat()
    if cycle == 0 and rank == hung:
        time.sleep(3600)  # never reaches the collective
    t = torch.ones(1)
    dist.all_reduce(t)
    print(f"rank {rank} all-reduce gave {int(t.item())}", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
