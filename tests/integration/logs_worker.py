"""A torch-free worker for slurm-ft-logs' tests: lines every rank prints alike, lines with
numbers, a crash with a Python traceback on a chosen rank in a chosen cycle, and (with
``--go-file``) output that goes on until the test says so.

Usage: logs_worker.py [--lines N] [--crash-rank R] [--crash-cycle C] [--go-file F] [--sync-dir D]
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def load_batch(rank: int) -> None:
    raise ValueError(f"bad batch on rank {rank}")


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--lines", type=int, default=5)
    p.add_argument("--crash-rank", type=int, default=None)
    p.add_argument("--crash-cycle", type=int, default=0)
    p.add_argument("--go-file", default=None, help="cycle 0: print ticks until this file exists")
    p.add_argument("--sync-dir", default=None, help="crash only once every rank printed its lines")
    a = p.parse_args()
    rank, cycle = int(os.environ["RANK"]), int(os.environ["SLURM_FT_CYCLE"])
    for i in range(a.lines):
        print("UserWarning: every rank says this", flush=True)
        print(f"cycle {cycle} step {i} loss {rank + i / 10:.2f}", flush=True)
    if a.sync_dir:
        os.makedirs(a.sync_dir, exist_ok=True)
        open(os.path.join(a.sync_dir, f"printed-{cycle}-{rank}"), "w").close()
        if a.crash_rank == rank and a.crash_cycle == cycle:
            world = int(os.environ["WORLD_SIZE"])
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                if all(
                    os.path.exists(os.path.join(a.sync_dir, f"printed-{cycle}-{r}")) for r in range(world)
                ):
                    break
                time.sleep(0.02)
    if a.go_file and cycle == 0:
        tick = 0
        while not os.path.exists(a.go_file):
            print(f"cycle {cycle} tick {tick}", flush=True)
            tick += 1
            time.sleep(0.05)
    if a.crash_rank == rank and a.crash_cycle == cycle:
        print(f"rank {rank}: about to fail", flush=True)
        load_batch(rank)
    print(f"rank {rank} cycle {cycle} done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
