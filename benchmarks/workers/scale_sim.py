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

Not simulated: the join and decision (``rendezvous_scale`` times those with the same
client calls), workers, health checks, files. Each process prints one JSON line.

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

from slurm_ft.launch.rendezvous import stores
from slurm_ft.launch.rendezvous.background import BackgroundSet, WakePipe
from slurm_ft.launch.rendezvous.client import Client
from slurm_ft.launch.rendezvous.protocol import Base, Keys

ADDRESS = "127.0.0.1"
INTERVAL_S = 1.0  # the heart-beat interval's default
TIMEOUT_S = 60.0  # generous: the machine is shared; a lost peer here is a harness failure
KEYS = Keys("bench-scale")
READY = "bench-scale-sync/connected"


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
    client = Client.host(port, KEYS, TIMEOUT_S, address=ADDRESS if own else None)
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
    return {
        "connected_at": connected_at,
        "steady_cpu_pct": cpu,
        "rss_mib": _rss_mib(),
        "lost_peers": lost,
        "halted_at": halted_at,
    }


def peers(n: int, port: int, first: int, end: int, go_at: float) -> dict:
    woken: dict[int, float] = {}
    connected: dict[int, float] = {}
    pipes: dict[int, WakePipe] = {}
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
                pipes[k] = wake
                connected[k] = time.monotonic()
            count = sync.add(f"{READY}/count", 1)
            sync.set(f"{READY}/{count}", "1")
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
    poller = select.poll()
    by_fd = {p.fd: k for k, p in pipes.items()}
    for fd in by_fd:
        poller.register(fd, select.POLLIN)
    deadline = time.monotonic() + 600
    while len(woken) < len(pipes) and time.monotonic() < deadline:
        for fd, _ in poller.poll(1000):
            if by_fd[fd] not in woken:
                woken[by_fd[fd]] = time.monotonic()
                poller.unregister(fd)
    return {
        "started": started,
        "connected_last": max(connected.values(), default=started),
        "woken_last": max(woken.values(), default=0.0),
        "woken": len(woken),
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
