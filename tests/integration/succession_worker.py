"""A torch-free worker for the store-succession tests: appends one JSON line about itself
to ``OUT/starts.jsonl`` (rank, cycle, pid, MASTER_ADDR, node), then runs until killed in
cycle 0 and finishes after a moment in any later cycle. With ``--writes`` it appends a
line to ``OUT/writes-rank<R>.log`` every 50 ms: a fenced worker stops writing."""

from __future__ import annotations

import json
import os
import sys
import time


def main() -> int:
    out = sys.argv[1]
    writes = "--writes" in sys.argv[2:]
    env = os.environ
    doc = {
        "rank": int(env["RANK"]),
        "cycle": int(env["SLURM_FT_CYCLE"]),
        "restart": int(env["TORCHELASTIC_RESTART_COUNT"]),
        "pid": os.getpid(),
        "master_addr": env["MASTER_ADDR"],
        "node": env.get("SLURMD_NODENAME", ""),
        "time": time.time(),
    }
    fd = os.open(f"{out}/starts.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(fd, (json.dumps(doc, sort_keys=True) + "\n").encode())
    os.close(fd)
    if doc["cycle"] != 0:
        time.sleep(0.5)
        return 0
    while True:
        if writes:
            with open(f"{out}/writes-rank{doc['rank']}.log", "a") as fh:
                fh.write(f"{time.time()}\n")
        time.sleep(0.05)


if __name__ == "__main__":
    sys.exit(main())
