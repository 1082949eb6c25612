#!/usr/bin/env python3
"""A torch-free trainer for drills: fixed-time steps, checkpoints, resume, a step log.

Every rank steps every ``--step-time`` seconds and heart-beats through ``slurm_ft.worker``
(so a stopped rank is found by ``--rank-heartbeat-timeout``). Rank 0 saves a checkpoint
every ``--ckpt-every`` steps as ``DIR/step_<N>`` (written under a temporary name, then
renamed: a ``checkpoint-dir:`` progress source never sees half of one) and logs every step
to ``--log`` as JSON lines (``{"t", "step", "cycle"}``): the goodput benchmark counts
steps kept and draws the timeline from it. A new cycle resumes from the newest checkpoint,
so the steps after it are lost, as in a real trainer. ``--startup`` stands in for the
interpreter, imports and process-group start of a real one. On a forwarded SIGUSR1 or
SIGTERM it saves and leaves (exit 0 only when the total is reached).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time

from slurm_ft import worker

_STEP = re.compile(r"step_(\d+)")


def newest(ckpt_dir: str) -> int:
    try:
        names = os.listdir(ckpt_dir)
    except FileNotFoundError:
        return 0
    return max((int(m.group(1)) for n in names if (m := _STEP.fullmatch(n))), default=0)


def save(ckpt_dir: str, step: int) -> None:
    os.makedirs(ckpt_dir, exist_ok=True)
    tmp = os.path.join(ckpt_dir, f".tmp-step_{step}")
    with open(tmp, "w") as fh:
        fh.write(f"{step}\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, os.path.join(ckpt_dir, f"step_{step}"))


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--ckpt-dir", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--total-steps", type=int, default=10**9)
    p.add_argument("--step-time", type=float, default=0.1)
    p.add_argument("--ckpt-every", type=int, default=10)
    p.add_argument("--startup", type=float, default=0.0)
    a = p.parse_args()
    rank = int(os.environ.get("RANK", "0"))
    cycle = int(os.environ.get("SLURM_FT_CYCLE", os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")))
    time.sleep(a.startup)
    step = newest(a.ckpt_dir)
    next_tick = time.monotonic()
    while step < a.total_steps:
        next_tick += a.step_time
        pause = next_tick - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        step += 1
        worker.heartbeat()
        if rank == 0:
            with open(a.log, "a") as fh:
                fh.write(json.dumps({"t": time.time(), "step": step, "cycle": cycle}) + "\n")
            if step % a.ckpt_every == 0 or step == a.total_steps:
                save(a.ckpt_dir, step)
        if worker.stop_requested():
            if rank == 0:
                save(a.ckpt_dir, step)
            print(f"rank {rank}: stop requested at step {step}", flush=True)
            return 143
    return 0


if __name__ == "__main__":
    sys.exit(main())
