#!/usr/bin/env python3
"""A torch-free worker for fast launcher tests and demos.

It reads the torchrun environment like a real trainer would, appends one JSON line about
itself to ``--out DIR/starts.jsonl`` (rank, restart count, cycle, pid, start time), and then
does what the switches say: finish after ``--steps`` short steps, crash a chosen rank in a
chosen restart (or in every one) with an exit code or SIGSEGV, write a torchelastic error
file the way ``@record`` does, ignore SIGTERM, or leave a grandchild behind.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import traceback


def _append(path: str, doc: dict) -> None:
    line = (json.dumps(doc, sort_keys=True) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def _write_error_file(message: str) -> None:
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path:
        return
    doc = {
        "message": {
            "message": message,
            "extraInfo": {
                "py_callstack": "".join(traceback.format_stack()),
                "timestamp": str(int(time.time())),
            },
        }
    }
    with open(path, "w") as fh:
        json.dump(doc, fh)


def _wait_for_all(path: str, restart: int, world: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with open(path) as fh:
                seen = {d["rank"] for d in map(json.loads, fh) if d["restart"] == restart}
        except (OSError, ValueError):
            seen = set()
        if len(seen) >= world:
            return
        time.sleep(0.01)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=os.environ.get("ECHO_WORKER_OUT"))
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--step-time", type=float, default=0.01)
    p.add_argument("--crash-rank", type=int, default=None)
    p.add_argument("--crash-restart", type=int, default=None, help="restart count to crash in; default every")
    p.add_argument("--exit-code", type=int, default=3)
    p.add_argument("--segv", action="store_true", help="die by SIGSEGV instead of exiting")
    p.add_argument("--record", action="store_true", help="write TORCHELASTIC_ERROR_FILE before crashing")
    p.add_argument("--forever", action="store_true", help="run until signalled")
    p.add_argument("--ignore-term", action="store_true")
    p.add_argument("--grandchild", action="store_true", help="start a sleeping grandchild")
    p.add_argument(
        "--sync",
        action="store_true",
        help="before crashing, wait (up to 30 s) until every rank of this restart started",
    )
    p.add_argument("--on-signal-exit", type=int, default=None, help="exit code when SIGTERM/SIGUSR1 arrives")
    a = p.parse_args()

    rank = int(os.environ["RANK"])
    restart = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    received: list[int] = []

    def on_signal(signum: int, frame: object) -> None:
        received.append(signum)
        if a.out:
            _append(
                os.path.join(a.out, "signals.jsonl"), {"rank": rank, "signal": signal.Signals(signum).name}
            )
        if a.ignore_term and signum == signal.SIGTERM:
            return
        sys.exit(a.on_signal_exit if a.on_signal_exit is not None else 128 + signum)

    for s in (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2, signal.SIGINT):
        signal.signal(s, on_signal)
    if a.grandchild:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        print(f"rank {rank}: grandchild {child.pid}", flush=True)
    if a.out:
        keys = [
            "RANK",
            "LOCAL_RANK",
            "WORLD_SIZE",
            "LOCAL_WORLD_SIZE",
            "GROUP_RANK",
            "GROUP_WORLD_SIZE",
            "ROLE_RANK",
            "ROLE_WORLD_SIZE",
            "ROLE_NAME",
            "MASTER_ADDR",
            "MASTER_PORT",
            "TORCHELASTIC_RESTART_COUNT",
            "TORCHELASTIC_MAX_RESTARTS",
            "TORCHELASTIC_RUN_ID",
            "TORCHELASTIC_ERROR_FILE",
            "SLURM_FT_CYCLE",
            "SLURM_FT_CYCLE_INFO",
            "OMP_NUM_THREADS",
        ]
        _append(
            os.path.join(a.out, "starts.jsonl"),
            {
                "rank": rank,
                "restart": restart,
                "pid": os.getpid(),
                "time": time.time(),
                "env": {k: os.environ.get(k) for k in keys},
            },
        )
    print(f"rank {rank}: start restart={restart} cycle={os.environ.get('SLURM_FT_CYCLE')}", flush=True)
    crash_here = a.crash_rank == rank and (a.crash_restart is None or a.crash_restart == restart)
    step = 0
    while a.forever or step < a.steps:
        time.sleep(a.step_time)
        step += 1
        if crash_here and step >= 1:
            if a.sync and a.out:
                _wait_for_all(os.path.join(a.out, "starts.jsonl"), restart, int(os.environ["WORLD_SIZE"]))
            print(f"rank {rank}: crashing at step {step}", flush=True)
            if a.record:
                _write_error_file(f"injected failure on rank {rank} at step {step}")
            if a.segv:
                signal.signal(signal.SIGSEGV, signal.SIG_DFL)
                os.kill(os.getpid(), signal.SIGSEGV)
            return a.exit_code
    print(f"rank {rank}: done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
