"""Scale simulation (issue 45): N launchers hold the store connections real launchers hold.

Node 0 ("host") opens the store with ``stores.host`` (as node 0 does), publishes the run
with ``Client.prepare`` and runs the real ``BackgroundSet`` of node 0 (peer monitor and halt
waiter, each on its own connection). Every other launcher is a thread of a "peers" process:
it connects with ``Client.connect`` (the real connect, back-off included), reads the run
with ``wait_base`` and starts the real ``BackgroundSet`` of a peer (heart-beat, store
watchdog, halt waiter: three connections in all, as a launcher holds), then waits on its
wake pipe as the agent's main loop does.

Phases, all timed on ``time.monotonic()`` (one clock for every process here):
connect: every peer released at once; the host reports when the last one holds its three
connections. steady: node 0's CPU (its process: the store's loop thread, the peer monitor
and the halt waiter) and RSS while every peer heart-beats. halt: node 0 halts cycle 0
(``Client.halt``, what a failure anywhere does) and each peer notes when its halt waiter
woke it: the restart's first leg, failure to every launcher told.

restart: after the halt every peer joins cycle 1 (``Client.join``) and waits for node 0's
decision (``wait_decision``); node 0 gathers (``joined``, ``join_records``), asks the real
``policy.decide`` and publishes it: a failure anywhere to every launcher holding the next
decision, and its rendezvous (the last launcher joined to the last holding the decision).

Not simulated: workers (a real restart also stops them and starts new ones), health
checks, files. Each process prints one JSON line.

Usage: scale_sim.py host  N PORT STEADY_S
       scale_sim.py peers N PORT FIRST END GO_AT
"""

from __future__ import annotations

import json
import os
import resource
import select
import sys
import threading
import time

from slurm_ft.launch.policy import decide
from slurm_ft.launch.rendezvous import beatperiod, stores
from slurm_ft.launch.rendezvous.background import BackgroundSet, WakePipe
from slurm_ft.launch.rendezvous.client import Client
from slurm_ft.launch.rendezvous.protocol import Action, Base, Decision, JoinInfo, Keys
from slurm_ft.launch.rendezvous.sealing import Sealer

ADDRESS = "127.0.0.1"
INTERVAL_S = 1.0  # the heart-beat interval's default
TIMEOUT_S = 60.0  # generous: the machine is shared; a lost peer here is a harness failure
SEALER = Sealer(b"the scale harness's job secret!!")  # values sealed, as with the templates' secret
KEYS = Keys("bench-scale", SEALER.namespace)
# BENCH_SCALE_BEATS_PER_S: node 0's beat budget for a comparison (a huge one: every peer
# beats each second, as before the stretch); unset, the launcher's own.
if os.environ.get("BENCH_SCALE_BEATS_PER_S"):
    beatperiod.NODE0_BEATS_PER_S = int(os.environ["BENCH_SCALE_BEATS_PER_S"])
READY = "bench-scale-sync/connected"
HELD = "bench-scale-sync/held"  # peers holding cycle 1's decision


def _rss_mib() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def host(n: int, port: int, steady_s: float) -> dict:
    # BENCH_SCALE_TORCH_LISTENER=1: torch listens itself, as before issue 45 (the comparison)
    own = os.environ.get("BENCH_SCALE_TORCH_LISTENER") != "1"
    client = Client.host(port, KEYS, TIMEOUT_S, SEALER, address=ADDRESS if own else None)
    client.prepare(n, Base(0, "scale"))
    wake = WakePipe()
    threads = BackgroundSet.start(
        client,
        node_rank=0,
        num_nodes=n,
        interval=INTERVAL_S,
        timeout=TIMEOUT_S,
        wake_fd=wake.write_fd,
        emergency=lambda why: None,
    )
    threads.watch_halt(0)
    sync = stores.reconnect(ADDRESS, client.port, TIMEOUT_S)  # the harness's own keys, not counted
    print(json.dumps({"listening": True}), flush=True)
    stores.wait(sync, [f"{READY}/{n - 1}"], 900.0)
    connected_at = time.monotonic()
    cpu0, t0 = _cpu_s(), time.monotonic()
    time.sleep(steady_s)
    cpu = (_cpu_s() - cpu0) / (time.monotonic() - t0) * 100
    lost = len(threads.lost_peers())
    halted_at = time.monotonic()
    client.halt(0)
    client.join(1, JoinInfo(0, "node0", ADDRESS, os.getpid()))
    joined_at, decided_at = _decide(client, 1, n)
    deadline = time.monotonic() + 900
    while int(sync.add(HELD, 0)) < n - 1 and time.monotonic() < deadline:  # outlive their reads
        time.sleep(0.01)
    return {
        "connected_at": connected_at,
        "steady_cpu_pct": cpu,
        "rss_mib": _rss_mib(),
        "lost_peers": lost,
        "halted_at": halted_at,
        "joined_at": joined_at,
        "decided_at": decided_at,
    }


def _decide(client: Client, i: int, n: int) -> tuple[float, float]:
    """Node 0's gather and decision of cycle i with the real client calls and policy; its
    back-off mirrors the agent's (2 ms growing by 1.5x to 250 ms, as ``rdzv_sim``)."""
    pause = 0.002
    while not client.joined(i, range(n)):
        time.sleep(pause)
        pause = min(pause * 1.5, 0.25)
    joined_at = time.monotonic()
    infos = client.join_records(i, n)
    names = [info.node_name if info else f"node-rank-{k}" for k, info in enumerate(infos)]
    missing = [names[k] for k, info in enumerate(infos) if info is None]
    verdict = decide(restart=i, max_restarts=3, previous_failure=None, unhealthy=[], lost=[], missing=missing)
    if not verdict.run:
        raise RuntimeError(f"node 0 decided stop: {verdict.reason}")
    decision = Decision(Action.RUN, i, master_port=29500, start_time=time.time(), nodes=tuple(names))
    client.publish_decision(i, decision)
    return joined_at, time.monotonic()


def peers(n: int, port: int, first: int, end: int, go_at: float) -> dict:
    woken: dict[int, float] = {}
    connected: dict[int, float] = {}
    held: dict[int, float] = {}
    entered: dict[int, float] = {}  # into cycle 1's join
    lock = threading.Lock()
    errors: list[str] = []
    sync = stores.reconnect(ADDRESS, port, TIMEOUT_S)  # the harness's own keys, one per process

    def launcher(k: int) -> None:
        try:
            client = Client.connect(
                ADDRESS,
                port,
                KEYS,
                deadline=time.monotonic() + 900,
                op_timeout=TIMEOUT_S,
                abort=lambda: False,
                sleep=time.sleep,
                sealer=SEALER,
            )
            base = client.wait_base(deadline=time.monotonic() + 900, abort=lambda: False)
            assert base is not None
            wake = WakePipe()
            threads = BackgroundSet.start(
                client,
                node_rank=k,
                num_nodes=n,
                interval=INTERVAL_S,
                timeout=TIMEOUT_S,
                wake_fd=wake.write_fd,
                emergency=lambda why: None,
            )
            threads.watch_halt(0)
            with lock:
                connected[k] = time.monotonic()
            count = sync.add(f"{READY}/count", 1)
            sync.set(f"{READY}/{count}", "1")
            if not select.select([wake.fd], [], [], 900)[0]:
                raise TimeoutError("no halt within 900 s")
            with lock:
                woken[k] = time.monotonic()
                entered[k] = time.monotonic()
            # the restart: join the next cycle, hold node 0's decision (no workers to stop)
            client.join(1, JoinInfo(k, f"node{k}", ADDRESS, os.getpid()))
            decision = client.wait_decision(1, deadline=time.monotonic() + 900, abort=lambda: False)
            if decision is None or len(decision.nodes) != n:
                raise RuntimeError(f"no decision of cycle 1 for all {n}: {decision}")
            with lock:
                held[k] = time.monotonic()
            sync.add(HELD, 1)
        except Exception as exc:  # reported, not hidden
            with lock:
                errors.append(f"launcher {k}: {type(exc).__name__}: {exc}")

    while time.time() < go_at:
        time.sleep(0.001)
    started = time.monotonic()
    workers = [threading.Thread(target=launcher, args=(k,), daemon=True) for k in range(first, end)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    return {
        "started": started,
        "connected_last": max(connected.values(), default=started),
        "woken_last": max(woken.values(), default=0.0),
        "woken": len(woken),
        "held_last": max(held.values(), default=0.0),
        "entered_last": max(entered.values(), default=0.0),
        "held": len(held),
        "errors": errors[:5],
        "rss_mib": _rss_mib(),
    }


def main() -> None:
    role, n, port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    if role == "host":
        doc = host(n, port, float(sys.argv[4]))
    else:
        doc = peers(n, port, int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6]))
    print(json.dumps(doc), flush=True)
    os._exit(0)  # the launchers' threads block in the store


if __name__ == "__main__":
    main()
