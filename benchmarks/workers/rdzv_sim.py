"""Rendezvous-scale simulation: N launchers through join + decide, on one machine.

Node 0 runs in its own process ("host": the TCPStore host and node 0's decision); the
other launchers are threads of a few "peers" processes (at most 32 threads each), each
thread with its own TCPStore connection. Every launcher makes the real
``slurm_ft.launch.rendezvous.client.Client`` calls of one cycle: ``join``; node 0 then polls
``joined``, reads ``join_records``, asks the real ``policy.decide`` and calls
``publish_decision``; the others ``await_decision``. Node 0's polling loop mirrors the
agent's (2 ms growing by 1.5x to 250 ms; peers' decision poll capped at 250 ms), because
the agent's own loop is a private method tied to a full launcher. No health checks, no
workers, no state-dir writes.

Real launchers are separate processes on separate machines; threads sharing one GIL
would add a GIL hand-off to every store round trip, so launchers are spread over
processes: node 0 alone, the peers at most 32 to an interpreter, with a 1 ms GIL switch
interval. The processes connect once (each client looks up the address it connects to in
reverse DNS, bounded to a second as the launcher bounds it: ``resolver``) and then run every job size N
in turn, each as its own run id on the one store, with launchers 0..N-1 taking part and the rest idle.

All launchers of a size start each cycle together, released through keys outside the
run's namespace (not timed). Times are ``time.monotonic()``, one clock for every process
on the machine. Each process prints one JSON line.

Usage: rdzv_sim.py host  SIZES CYCLES PORT PEER_PROCESSES
       rdzv_sim.py peers SIZES CYCLES PORT FIRST_RANK END_RANK
SIZES is a comma list (8,32,128,256); the largest is the number of launchers.
With BENCH_RDZV_SPARES_EVERY=D in the environment, N // D of each size's launchers are
spares: node 0 places the node ranks with the real ``spares.SpareBook`` (retire, place,
decide with the placement) and every launcher derives its role from the decision with
the real ``spares.cycle_topology``, as the agent does.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import threading
import time

import torch.distributed as dist

from slurm_ft.launch import spares as spares_mod
from slurm_ft.launch.policy import decide
from slurm_ft.launch.rendezvous import protocol as proto
from slurm_ft.launch.rendezvous import resolver, stores
from slurm_ft.launch.rendezvous.client import Client
from slurm_ft.launch.rendezvous.decisionwait import await_decision
from slurm_ft.launch.workers.layout import Topology

OP_TIMEOUT = 120.0
DECISION_POLL_CAP = 0.25
SPARES_EVERY = int(os.environ.get("BENCH_RDZV_SPARES_EVERY", "0"))


def spare_count(n: int) -> int:
    return n // SPARES_EVERY if SPARES_EVERY else 0


def _keys(n: int) -> proto.Keys:
    return proto.Keys(f"bench-rdzv-n{n}")


def _sync(name: str, n: int, i: int) -> str:
    return f"bench-sync/{name}/n{n}/c{i}"


def _open(port: int, master: bool) -> dist.TCPStore:
    if master:  # as node 0 opens it: its own IPv4 listener (no reverse lookup per accept)
        return stores.host(port, OP_TIMEOUT, "127.0.0.1")  # type: ignore[return-value]
    return dist.TCPStore(
        "127.0.0.1", port, None, False, datetime.timedelta(seconds=OP_TIMEOUT), use_libuv=True
    )


def node0_decide(client: Client, i: int, n: int, spent: dict[str, float]) -> proto.Decision:
    interval = 0.002
    deadline = time.monotonic() + OP_TIMEOUT
    while True:
        if client.joined(i, range(n)) or client.unhealthy_said(i) or time.monotonic() > deadline:
            break
        time.sleep(interval)
        interval = min(interval * 1.5, 0.25)
    t0 = time.monotonic()
    infos = client.join_records(i, range(n))
    spent["join_records"] = time.monotonic() - t0
    names = [info.node_name if info else f"node-rank-{k}" for k, info in enumerate(infos)]
    book = spares_mod.SpareBook.for_job(n, spare_count(n), 1, 2) if spare_count(n) else None
    placement = None
    if book is not None:
        book.note_roster(infos, ())
        placement = book.plan(0)
    verdict = decide(
        restart=0,
        max_restarts=3,
        previous_failure=None,
        unhealthy=[],
        lost=[],
        missing=[names[k] for k, info in enumerate(infos) if info is None],
        placement=placement,
    )
    if not verdict.run:
        raise RuntimeError(f"node 0 decided stop: {verdict.reason}")
    return proto.Decision(
        proto.Action.RUN,
        i,
        master_port=29500,
        start_time=time.time(),
        nodes=tuple(names),
        active=book.active if book else (),
        spares=book.spares if book else (),
        master_addr="127.0.0.1" if book else "",
    )


def host(sizes: list[int], cycles: int, port: int, peer_processes: int) -> dict:
    store = _open(port, master=True)
    sync = _open(port, master=False)
    out: dict[str, dict] = {}
    for n in sizes:
        client = Client(store, _keys(n))
        client.prepare(n, proto.Base(0, "bench"))
        starts: list[float] = []
        decided: list[float] = []
        records_s: list[float] = []
        for i in range(cycles):
            while int(sync.add(_sync("ready", n, i), 0)) < peer_processes:
                time.sleep(0.001)
            sync.set(_sync("go", n, i), "1")
            starts.append(time.monotonic())
            client.join(i, proto.JoinInfo(0, "node0000", "127.0.0.1", 0))
            spent: dict[str, float] = {}
            client.publish_decision(i, node0_decide(client, i, n, spent))
            decided.append(time.monotonic())
            records_s.append(spent["join_records"])
        out[str(n)] = {"starts": starts, "decided": decided, "join_records_s": records_s}
    while int(sync.add("bench-sync/finished", 0)) < peer_processes:  # outlive the peers' reads
        time.sleep(0.01)
    return {"role": "host", "sizes": out}


def peers(sizes: list[int], cycles: int, port: int, first: int, end: int) -> dict:
    sys.setswitchinterval(0.001)
    ranks = range(first, end)
    errors: list[str] = []
    sync = _open(port, master=False)
    starts = {n: [dict.fromkeys(r for r in ranks if r < n) for _ in range(cycles)] for n in sizes}
    ends = {n: [dict.fromkeys(r for r in ranks if r < n) for _ in range(cycles)] for n in sizes}
    t0 = time.monotonic()
    connect_s = [0.0]

    def release(n: int, i: int) -> None:
        """Run by one thread at the local barrier: tell node 0 we are ready, wait for go."""
        sync.add(_sync("ready", n, i), 1)
        sync.wait([_sync("go", n, i)])

    barriers = {
        (n, i): threading.Barrier(len(ranks), action=lambda n=n, i=i: release(n, i))
        for n in sizes
        for i in range(cycles)
    }
    connected = threading.Barrier(len(ranks))

    def launcher(rank: int) -> None:
        try:
            store = _open(port, master=False)  # all at once, as at the start of a real job
            if connected.wait(timeout=OP_TIMEOUT) == 0:
                connect_s[0] = time.monotonic() - t0
            for n in sizes:
                client = Client(store, _keys(n))
                for i in range(cycles):
                    barriers[(n, i)].wait(timeout=OP_TIMEOUT)
                    if rank >= n:
                        continue
                    starts[n][i][rank] = time.monotonic()
                    client.join(i, proto.JoinInfo(rank, f"node{rank:04d}", "127.0.0.1", rank))
                    got = await_decision(  # the launcher's own wait
                        client,
                        i,
                        n,
                        deadline=time.monotonic() + OP_TIMEOUT,
                        abort=lambda: False,
                    )
                    if got is None or not got.run:
                        raise RuntimeError(f"launcher {rank}: no run decision for cycle {i} of N={n}")
                    base = Topology(rank, n - spare_count(n), 1, "127.0.0.1")
                    spares_mod.cycle_topology(base, got, rank)  # None for a spare: it stands by
                    ends[n][i][rank] = time.monotonic()
        except Exception as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
            for b in (connected, *barriers.values()):
                b.abort()

    threads = [threading.Thread(target=launcher, args=(r,), daemon=True) for r in ranks]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    sync.add("bench-sync/finished", 1)
    if errors:
        raise RuntimeError(errors[0])
    return {
        "role": "peers",
        "connect_s": connect_s[0],
        "sizes": {
            str(n): {
                "starts": [list(c.values()) for c in starts[n]],
                "ends": [list(c.values()) for c in ends[n]],
            }
            for n in sizes
        },
    }


def main() -> int:
    resolver.bound_reverse_lookups(os.environ)  # as the launcher does, before any lookup
    role, sizes = sys.argv[1], [int(s) for s in sys.argv[2].split(",")]
    cycles, port, extra = int(sys.argv[3]), int(sys.argv[4]), [int(a) for a in sys.argv[5:]]
    try:
        doc = host(sizes, cycles, port, *extra) if role == "host" else peers(sizes, cycles, port, *extra)
    except Exception as exc:
        print(json.dumps({"error": f"{role}: {type(exc).__name__}: {exc}"}))
        return 1
    print(json.dumps(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
