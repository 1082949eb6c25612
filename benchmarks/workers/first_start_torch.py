"""The first-start benchmark's trainer-like worker: stamps once ``torch.distributed`` is
imported (what a DDP trainer waits for before its rendezvous), then waits to be stopped."""

import os
import sys
import time

import torch.distributed  # noqa: F401  (the import is what is timed)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stamps

stamps.write(os.environ["BENCH_STAMPS"], f"start-c0-r{os.environ['RANK']}", time.time())
while True:
    time.sleep(3600)
