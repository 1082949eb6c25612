"""A torch-free worker that hangs in cycle 0 in the way its mode says, and succeeds at
once in every later cycle (so a test sees the hang found, the job restarted, and the next
cycle finish).

Usage: hang_worker.py MODE [--hung-rank R] [--iteration-file F] [--seconds S]
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time

from slurm_ft import worker


def deadlocked_function() -> None:
    lock = threading.Lock()
    lock.acquire()
    lock.acquire()  # never returns: the same thread takes the lock twice


def chatter_forever(label: str) -> None:
    while True:
        print(f"{label} still busy", flush=True)
        time.sleep(0.2)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("mode")
    p.add_argument("--hung-rank", type=int, default=0)
    p.add_argument("--iteration-file")
    p.add_argument("--seconds", type=float, default=60.0)
    a = p.parse_args()
    rank, cycle = int(os.environ["RANK"]), int(os.environ["SLURM_FT_CYCLE"])
    print(f"rank {rank} cycle {cycle} mode {a.mode}", flush=True)
    if cycle > 0:
        print(f"rank {rank} done", flush=True)
        return 0
    if a.mode == "silent":  # every rank stops writing (a job stuck in a collective)
        time.sleep(3600)
    elif a.mode == "deadlock":
        if rank == a.hung_rank:
            deadlocked_function()
        time.sleep(3600)
    elif a.mode == "section":  # the hung rank stays in a section; everyone keeps printing
        if rank == a.hung_rank:
            with worker.section("step"):
                chatter_forever("in step")
        chatter_forever("outside")
    elif a.mode == "heartbeat":  # heart-beats, then stops while still printing
        for _ in range(5):
            worker.heartbeat()
            time.sleep(0.05)
        if rank == a.hung_rank:
            chatter_forever("no more heartbeats")
        while True:
            worker.heartbeat()
            time.sleep(0.1)
    elif a.mode == "iteration":  # the iteration file never moves; output goes on
        chatter_forever("training without checkpoints")
    elif a.mode == "quiet-heartbeat":  # prints nothing, heart-beats, and finishes
        end = time.monotonic() + a.seconds
        while time.monotonic() < end:
            worker.heartbeat()
            time.sleep(0.2)
        print(f"rank {rank} finished quietly", flush=True)
        return 0
    else:
        print(f"unknown mode {a.mode}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
