"""A trainer that snapshots every step, for the launcher's cost while snapshots flow
(``benchmarks.snapshot_launcher``): one torch thread, a step of fixed work, then its rank's
shard of ``BENCH_MIB`` MiB handed to ``worker.snapshot`` (none with 0). It touches
``BENCH_READY/rank<R>`` after its first step and stops after ``BENCH_SECONDS``."""

import os
import time
from pathlib import Path

import torch

from slurm_ft import worker


def main() -> int:
    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    mib = int(os.environ["BENCH_MIB"])
    until = time.monotonic() + float(os.environ["BENCH_SECONDS"])
    state = {"shard": torch.full((max(1, mib << 20 >> 2),), float(rank))}
    a = torch.randn(256, 256)
    step = 0
    while time.monotonic() < until:
        step += 1
        for _ in range(200):
            a = torch.tanh(a @ a * 0.01)
        state["shard"].add_(1.0)
        if mib:
            worker.snapshot(step, state, replicated=False)
        if step == 1:
            Path(os.environ["BENCH_READY"], f"rank{rank}").touch()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
