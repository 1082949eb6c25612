"""What a restart costs one launcher's CPU: its join, its wait for node 0's decision and the
decision's decode, per cycle, for a job of N nodes (issue 45).

The scale harness's restart at 4,096 nodes is bounded by its peers' CPU (4,095 launcher
threads on two cores); this takes the launcher's part alone, so that what grows with N can
be told apart. One process hosts the store and publishes each cycle's decision (N nodes,
one spare) once every launcher of the other process joined; the other runs
``--launchers`` launcher threads, each with its own connection, through ``Client.join``
and ``decisionwait.await_decision`` for ``--cycles`` cycles. The figure: that process's
CPU time per launcher and cycle. ``--wait-as M`` waits as a job of M nodes does (past 513
nodes on a thread of its own, ``longwaits.LongWaits``) whatever the decision's size, which
separates the wait's cost from the decision's.

    python -m benchmarks.restart_cost [--nodes 256,4096] [--launchers 64] [--cycles 20] [--wait-as M]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time

from benchmarks import cmdline
from slurm_ft.launch.rendezvous import stores
from slurm_ft.launch.rendezvous.client import Client
from slurm_ft.launch.rendezvous.decisionwait import await_decision
from slurm_ft.launch.rendezvous.protocol import Action, Decision, JoinInfo, Keys
from slurm_ft.launch.rendezvous.sealing import Sealer

SEALER = Sealer(b"the restart-cost benchmark secret")
KEYS = Keys("bench-restart", SEALER.namespace)
TIMEOUT_S = 120.0


def never() -> bool:
    return False


def host(n: int, launchers: int, cycles: int) -> int:
    client = Client(stores.host(0, TIMEOUT_S, "127.0.0.1"), KEYS, sealer=SEALER)
    print(client.port, flush=True)
    nodes = tuple(f"node{k}" for k in range(n))
    for i in range(1, cycles + 1):
        deadline = time.monotonic() + TIMEOUT_S
        while not client.joined(i, list(range(launchers))):
            if time.monotonic() > deadline:
                return 1
            time.sleep(0.002)  # node 0's gather polls as often
        decision = Decision(
            Action.RUN, i, nodes=nodes, active=tuple(range(n - 1)), spares=(n - 1,), master_addr="node0"
        )
        client.publish_decision(i, decision)
    sys.stdin.read()  # until the launchers are done
    return 0


def launchers(n: int, port: int, count: int, cycles: int, wait_as: int) -> int:
    deadline = time.monotonic() + TIMEOUT_S
    clients = [
        Client.connect(
            "127.0.0.1",
            port,
            KEYS,
            deadline=deadline,
            op_timeout=TIMEOUT_S,
            abort=never,
            sleep=time.sleep,
            sealer=SEALER,
        )
        for _ in range(count)
    ]
    together = threading.Barrier(count)
    marks: list[float] = []
    failed: list[str] = []

    def run(k: int) -> None:
        for i in range(1, cycles + 1):
            together.wait()
            if k == 0:
                marks.append(time.process_time())
            clients[k].join(i, JoinInfo(k, f"node{k}", "127.0.0.1", os.getpid()))
            held = await_decision(clients[k], i, wait_as, deadline=time.monotonic() + TIMEOUT_S, abort=never)
            if held is None or len(held.nodes) != n:
                failed.append(f"launcher {k}: no decision of cycle {i} for {n} nodes")
                together.abort()
                return
        together.wait()
        if k == 0:
            marks.append(time.process_time())

    threads = [threading.Thread(target=run, args=(k,)) for k in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    cpu_ms = 1000 * (marks[-1] - marks[0]) / (count * cycles) if not failed else None
    print(json.dumps({"cpu_ms_per_launcher_cycle": cpu_ms, "errors": failed[:3]}), flush=True)
    return 0 if not failed else 1


def one(n: int, count: int, cycles: int, wait_as: int) -> dict[str, object]:
    me = [sys.executable, "-m", "benchmarks.restart_cost"]
    server = subprocess.Popen(
        [*me, "--host", str(n), str(count), str(cycles)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        peers = subprocess.run(
            [*me, "--peers", str(n), str(port), str(count), str(cycles), str(wait_as)],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S * cycles,
            check=False,
        )
    finally:
        server.communicate("", timeout=TIMEOUT_S)
    lines = [ln for ln in peers.stdout.splitlines() if ln.startswith("{")]
    doc: dict[str, object] = json.loads(lines[-1]) if lines else {"errors": [peers.stderr.strip()[-300:]]}
    return {"nodes": n, "waits_as": wait_as, "launchers": count, "cycles": cycles, **doc}


def main(argv: list[str] | None = None) -> int:
    p = cmdline.Parser(prog="python -m benchmarks.restart_cost", description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=cmdline.sizes, default="256,4096", help="decision sizes")
    p.add_argument("--launchers", type=cmdline.positive_int, default=64, help="launcher threads")
    p.add_argument("--cycles", type=cmdline.positive_int, default=20)
    p.add_argument("--wait-as", type=cmdline.positive_int, help="wait as a job of this many nodes")
    p.add_argument("--host", nargs=3, type=int, help=argparse.SUPPRESS)
    p.add_argument("--peers", nargs=5, type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.host:
        return host(*args.host)
    if args.peers:
        return launchers(*args.peers)
    rows = [one(n, args.launchers, args.cycles, args.wait_as or n) for n in args.nodes]
    for row in rows:
        cpu = row.get("cpu_ms_per_launcher_cycle")
        shown = f"{cpu:.3f} ms" if isinstance(cpu, float) else f"failed: {row.get('errors')}"
        print(
            f"decision of {row['nodes']:5d} nodes, waiting as {row['waits_as']:5d}: "
            f"CPU per launcher and cycle {shown} ({row['launchers']} launchers, {row['cycles']} cycles)"
        )
    return 0 if all(isinstance(r.get("cpu_ms_per_launcher_cycle"), float) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
