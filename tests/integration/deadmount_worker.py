"""A torch-free worker for the dead-mount tests: prints a line every 0.1 s until told.

Control files in ``$DEADMOUNT_CTL`` (a local directory, never on the mount under test):
``finish`` ends every rank with 0; ``crash`` ends global rank 0 with 3 in restart 0. Each
start appends one JSON line to ``starts.jsonl`` there.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

ctl = Path(os.environ["DEADMOUNT_CTL"])
rank = int(os.environ["RANK"])
restart = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
line = json.dumps({"rank": rank, "restart": restart, "pid": os.getpid()}) + "\n"
fd = os.open(ctl / "starts.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
os.write(fd, line.encode())
os.close(fd)
i = 0
while True:
    print(f"rank {rank} restart {restart} line {i}", flush=True)
    i += 1
    if (ctl / "finish").exists():
        sys.exit(0)
    if rank == 0 and restart == 0 and (ctl / "crash").exists():
        sys.exit(3)
    time.sleep(0.1)
