#!/usr/bin/env python3
"""A torch-free worker that checkpoints: rank 0 advances a checkpoint-iteration file.

Like a real trainer it resumes from the iteration in the file, so the no-progress ledger
sees real progress. It appends one JSON line per start to ``--out DIR/starts.jsonl``, can
crash a chosen rank in a chosen restart after some steps (writing its error file the way
``@record`` does), and can run until signalled.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time


def _append(path: str, doc: dict) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(doc) + "\n").encode())
    finally:
        os.close(fd)


def _read(path: str) -> int:
    try:
        with open(path) as fh:
            return int(fh.read().strip() or 0)
    except FileNotFoundError:
        return 0


def _checkpoint(path: str, iteration: int) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as fh:
        fh.write(f"{iteration}\n")
    os.replace(tmp, path)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--iter-file", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--step-time", type=float, default=0.05)
    p.add_argument("--crash-rank", type=int)
    p.add_argument("--crash-restart", type=int)
    p.add_argument("--crash-after", type=int, default=2, help="checkpoints made before the crash")
    p.add_argument("--forever", action="store_true")
    a = p.parse_args()

    rank = int(os.environ["RANK"])
    restart = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    iteration = start = _read(a.iter_file)
    _append(os.path.join(a.out, "starts.jsonl"), {"rank": rank, "restart": restart, "time": time.time()})
    step = 0
    while a.forever or step < a.steps:
        time.sleep(a.step_time)
        step += 1
        iteration += 1
        if rank == 0:
            _checkpoint(a.iter_file, iteration)
        if rank == a.crash_rank and restart == a.crash_restart and step >= a.crash_after:
            # Crash only once rank 0 checkpointed that far: the cycle then made progress
            # however the two processes were scheduled.
            deadline = time.monotonic() + 30
            while _read(a.iter_file) < start + a.crash_after and time.monotonic() < deadline:
                time.sleep(0.01)
            message = f"RuntimeError: injected crash on rank {rank} at iteration {iteration}"
            with open(os.environ["TORCHELASTIC_ERROR_FILE"], "w") as fh:
                json.dump({"message": {"message": message, "extraInfo": {"py_callstack": ""}}}, fh)
            print(message, flush=True)
            return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
