"""A gloo DDP worker for the standby test of torch's teardown race (pytorch#56297).

Cycle 0: every rank waits until the launcher's standbys for both local ranks are ready
(``SLURM_FT_PROBE_LOG``: the launcher log), then rank 1 fails so that a warm cycle 1
follows. Cycle 1: each rank trains a step with DDP, all-reduces a tensor of its own,
destroys the process group and frees the model after it, as the PyTorch DDP tutorial does,
and writes ``<dir>/group-rank<R>.json``: whether the destroyed group is still held when the
script ends (``kept``: its gloo threads still run), as a warm worker holds it until then.
Freed by the reducer instead, the group is destroyed holding the GIL that a gloo thread may
be waiting for, and the rank can hang for ever at exit.
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch
import torch.distributed as dist


def wait_for(path: str, texts: list[str]) -> None:
    deadline = time.monotonic() + 60.0
    while time.monotonic() < deadline:
        try:
            with open(path) as fh:
                log = fh.read()
        except OSError:
            log = ""
        if all(t in log for t in texts):
            return
        time.sleep(0.05)
    raise SystemExit(f"{texts!r} not in {path} within 60 s")


def gloo_threads() -> int:
    """The gloo group's work threads still running in this process (named by torch)."""
    count = 0
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as fh:
                count += fh.read().strip() == "pt_gloo_runloop"
        except OSError:
            continue
    return count


def train_and_leave() -> None:
    dist.init_process_group("gloo")
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    model(torch.randn(2, 4)).sum().backward()
    flag = torch.ones(1)
    dist.all_reduce(flag)
    dist.destroy_process_group()
    # model and flag go on return, after the group was destroyed


def main() -> None:
    rank = int(os.environ["RANK"])
    if os.environ["SLURM_FT_CYCLE"] == "0":
        print(f"rank {rank}: started", flush=True)  # past its start-up: the standbys start
        wait_for(os.environ["SLURM_FT_PROBE_LOG"], [f"standby for local rank {k} ready" for k in (0, 1)])
        if rank == 1:
            sys.exit(1)
        time.sleep(60)  # stopped by the launcher once rank 1 failed
        return
    train_and_leave()
    with open(os.path.join(os.environ["SLURM_FT_PROBE_DIR"], f"group-rank{rank}.json"), "w") as fh:
        json.dump({"kept": gloo_threads() > 0}, fh)


if __name__ == "__main__":
    main()
