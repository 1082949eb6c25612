"""The idle-launcher worker: start, wait for every rank, sleep in silence, exit 0.

Rank 0 marks the steady window (train-start once every rank of the job is up,
train-end when the sleep is over), so a launcher's CPU can be measured while its
workers neither print nor fail: what is left is the launcher's own periodic work.
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stamps

directory = os.environ["BENCH_STAMPS"]
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
seconds = float(os.environ.get("BENCH_TRAIN_SECONDS", "30"))
stamps.write(directory, f"up-r{rank}", time.time())
deadline = time.monotonic() + 120
while sum(os.path.exists(os.path.join(directory, f"up-r{r}")) for r in range(world)) < world:
    if time.monotonic() > deadline:
        sys.exit(f"rank {rank}: not every rank came up")
    time.sleep(0.01)
if rank == 0:
    stamps.write(directory, "train-start", time.time())
time.sleep(seconds)
if rank == 0:
    stamps.write(directory, "train-end", time.time())
