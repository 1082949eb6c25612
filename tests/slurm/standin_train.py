#!/usr/bin/env python3
"""A torch-free stand-in for the README's ``train.py``: steps, checkpoints, signals, resume.

What the README's sbatch example relies on, and nothing more: one line per step on stdout;
rank 0 writes Megatron's ``latest_checkpointed_iteration.txt`` in ``$TRAIN_CKPT_DIR``
every ``$TRAIN_CKPT_EVERY`` steps (atomically) and resumes from it; SIGUSR1/SIGTERM make
every rank stop after the current step (rank 0 saves first) and exit 128+N. Unknown
arguments (``--config pretrain.yaml``) are accepted and ignored.
"""

from __future__ import annotations

import os
import signal
import sys
import time

stop_signal: int | None = None


def _on_signal(signum: int, _frame: object) -> None:
    global stop_signal
    stop_signal = signum


def _read_iteration(path: str) -> int:
    try:
        with open(path) as fh:
            return int(fh.read().strip())
    except (OSError, ValueError):
        return 0


def _save(path: str, step: int) -> None:
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as fh:
        fh.write(f"{step}\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def main() -> int:
    rank = int(os.environ["RANK"])
    steps = int(os.environ.get("TRAIN_STEPS", "40"))
    every = int(os.environ.get("TRAIN_CKPT_EVERY", "5"))
    step_time = float(os.environ.get("TRAIN_STEP_TIME", "0.25"))
    tracker = os.path.join(os.environ["TRAIN_CKPT_DIR"], "latest_checkpointed_iteration.txt")
    for sig in (signal.SIGUSR1, signal.SIGTERM):
        signal.signal(sig, _on_signal)
    start = _read_iteration(tracker)
    print(f"rank {rank}: resumed from iteration {start} (args {sys.argv[1:]})", flush=True)
    for step in range(start + 1, steps + 1):
        time.sleep(step_time)
        print(f"rank {rank}: step {step}", flush=True)
        if rank == 0 and (step % every == 0 or stop_signal is not None):
            _save(tracker, step)
        if stop_signal is not None:
            name = signal.Signals(stop_signal).name
            print(f"rank {rank}: stopping on {name} at step {step}", flush=True)
            return 128 + stop_signal
    print(f"rank {rank}: finished at step {steps}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
