"""Simulated launchers of a big job: threads of this process, each doing what a peer's
launcher does against node 0's store with our real code, up to holding its decision.

Each thread finds node 0's store and the run (``find_run``: the real connect, back-off
included), beats once (as ``reach_node0`` does), joins cycle 0 (``Client.join``) and
waits for node 0's decision (``Client.wait_decision``). One connection each: the main
one (a launcher's heart-beat and halt waiter are two more, which node 0's open-files
check counts). Prints one JSON line: how many held a run decision naming all N nodes,
and the first errors.

Usage: scale_peers.py RUN_ID PORT NUM_NODES FIRST END   (job secret: SLURM_FT_JOB_SECRET)
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

from slurm_ft.launch.rendezvous import resolver
from slurm_ft.launch.rendezvous.client import find_run
from slurm_ft.launch.rendezvous.openfiles import raise_soft_limit
from slurm_ft.launch.rendezvous.protocol import Action, JoinInfo, Keys
from slurm_ft.launch.rendezvous.sealing import Sealer

NODE0 = "127.0.1.1"
TIMEOUT_S = 240.0


def main() -> int:
    resolver.bound_reverse_lookups(os.environ)  # as the launcher does, before any lookup
    run_id, port, n, first, end = sys.argv[1], *map(int, sys.argv[2:6])
    sealer = Sealer(os.environ["SLURM_FT_JOB_SECRET"].encode())
    keys = Keys(run_id, sealer.namespace)
    held: list[int] = []
    errors: list[str] = []
    lock = threading.Lock()

    def launcher(rank: int) -> None:
        try:
            deadline = time.monotonic() + TIMEOUT_S
            client, _ = find_run(
                NODE0,
                [port],
                keys,
                sealer,
                deadline=deadline,
                op_timeout=TIMEOUT_S,
                abort=lambda: False,
                sleep=time.sleep,
            )
            client.beat(rank)
            client.join(0, JoinInfo(rank, f"node{rank}", NODE0, os.getpid()))
            decision = client.wait_decision(0, deadline=deadline, abort=lambda: False)
            if decision is not None and decision.action is Action.RUN and len(decision.nodes) == n:
                with lock:
                    held.append(rank)
        except Exception as exc:  # reported in the JSON line, not hidden
            with lock:
                errors.append(f"launcher {rank}: {type(exc).__name__}: {exc}")

    raise_soft_limit()  # as every launcher does at start
    threading.stack_size(256 * 1024)
    threads = [threading.Thread(target=launcher, args=(k,), daemon=True) for k in range(first, end)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps({"held": len(held), "errors": errors[:5]}), flush=True)
    os._exit(0)  # the clients' connections close with the process


if __name__ == "__main__":
    sys.exit(main())
