"""A torch-free worker with a rhythm: a line every ``--every`` seconds, with a step
``--slow``x slower every ``--slow-every`` steps, for ``--steps`` steps; then, in ``hang``
mode, silence (in cycle ``--cycle``, 0 by default: later cycles finish at once), in
``stall`` mode output without progress (``--iteration-file`` stops moving), in ``finish``
mode an exit 0. ``--start-silence S``: silent for S s after the first line (a compilation);
``--early-exit K``: cycles before ``--cycle`` run ``--early-steps`` steps, then exit K (a
crash); ``--stop-rank R``: at the hang, rank R stops itself (SIGSTOP), the others wait.

Usage: rhythm_worker.py MODE --every S [--steps N] [--slow X --slow-every K] [--cycle C]
       [--start-silence S] [--early-exit K --early-steps N] [--stop-rank R]
"""

from __future__ import annotations

import argparse
import os
import signal
import time


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=("hang", "finish", "stall"))
    p.add_argument("--every", type=float, required=True)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--slow", type=float, default=1.0)
    p.add_argument("--slow-every", type=int, default=0)
    p.add_argument("--cycle", type=int, default=0, help="the cycle that runs (later ones finish at once)")
    p.add_argument("--iteration-file", help="rank 0 writes the step number into it at every step")
    p.add_argument("--print-ranks", help="only these ranks (comma-separated) print their steps")
    p.add_argument("--start-silence", type=float, default=0.0)
    p.add_argument("--early-exit", type=int, help="cycles before --cycle exit with this code")
    p.add_argument("--early-steps", type=int, help="their steps (default: --steps)")
    p.add_argument("--stop-rank", type=int, help="at the hang, this rank SIGSTOPs itself")
    a = p.parse_args()
    rank, cycle = int(os.environ["RANK"]), int(os.environ["SLURM_FT_CYCLE"])
    print(f"rank {rank} cycle {cycle} starts", flush=True)
    if cycle > a.cycle:
        return 0
    early = a.early_exit is not None and cycle < a.cycle
    steps = a.early_steps if early and a.early_steps is not None else a.steps
    time.sleep(a.start_silence)
    for step in range(1, steps + 1):
        slow = a.slow_every and step % a.slow_every == 0
        time.sleep(a.every * (a.slow if slow else 1.0))
        if a.print_ranks is None or str(rank) in a.print_ranks.split(","):
            print(f"rank {rank} step {step}", flush=True)
        if a.iteration_file and rank == 0:
            tmp = f"{a.iteration_file}.tmp"
            with open(tmp, "w") as fh:
                fh.write(f"{step}\n")
            os.replace(tmp, a.iteration_file)
    if early:
        print(f"rank {rank} fails", flush=True)
        return int(a.early_exit)
    if a.mode == "stall":  # the iteration stops moving; the output goes on
        while True:
            time.sleep(a.every)
            print(f"rank {rank} still printing", flush=True)
    if a.mode == "hang":
        if a.print_ranks is None or str(rank) in a.print_ranks.split(","):
            print(f"rank {rank} goes silent at {time.time():.3f}", flush=True)
        if rank == a.stop_rank:
            os.kill(os.getpid(), signal.SIGSTOP)
        time.sleep(3600)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
