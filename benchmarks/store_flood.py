"""How many idle connections node 0's store holds before a new launcher cannot join.

Not one of the figures (``python -m benchmarks`` does not run it): a measurement for the
README's security section. Node 0's store (a libuv TCPStore, opened as the launcher opens
it) runs in a child process under a given open-files limit (``RLIMIT_NOFILE``: every
accepted connection is one descriptor). This process opens idle TCP connections to it,
``--step`` at a time, and after each step a new launcher connects and makes a round trip;
an already connected launcher makes one too. The answer is the number of idle connections
at the first step where the new launcher could not join; then the idle connections are
closed and a launcher must be able to join again (the store recovers).

The store listens and the clients look names up as the launcher's do (node 0's own IPv4
listener; reverse lookups bounded to a second: ``resolver``); ``--torch-listener`` and
``--unbounded-lookups`` measure it as it was before issue 45.

    python -m benchmarks.store_flood [--nofile 1024] [--step 50] [--max 5000] [--join-s 30]
                                     [--torch-listener] [--unbounded-lookups]
"""

from __future__ import annotations

import datetime
import json
import multiprocessing
import os
import resource
import socket
import sys
import time
from multiprocessing.connection import Connection

from benchmarks import cmdline
from slurm_ft.launch.rendezvous import resolver


def _host(nofile: int, ready: Connection, own_listener: bool) -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    from slurm_ft.launch.rendezvous import stores

    store = stores.host(0, 5.0, "127.0.0.1" if own_listener else None)
    store.set("hello", "1")
    ready.send(store.port)
    ready.recv()  # until the parent is done


WHY: list[str] = []


def _joins(port: int, timeout: float) -> float | None:
    """A new launcher's first steps (connect, one answered round trip): how long they
    took, None when not within ``timeout``."""
    import torch.distributed as dist

    t0 = time.monotonic()
    try:
        client = dist.TCPStore(
            "127.0.0.1", port, None, False, datetime.timedelta(seconds=timeout), use_libuv=True
        )
        client.check(["hello"])
    except RuntimeError as exc:
        WHY.append(str(exc).splitlines()[0][:200])
        return None
    return round(time.monotonic() - t0, 2)


def measure(
    nofile: int, step: int, limit: int, join_s: float, own_listener: bool = True
) -> dict[str, object]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # this side holds them all
    parent, child = multiprocessing.Pipe()
    proc = multiprocessing.get_context("spawn").Process(
        target=_host, args=(nofile, child, own_listener), daemon=True
    )
    proc.start()
    port = parent.recv()
    import torch.distributed as dist

    joined = dist.TCPStore("127.0.0.1", port, None, False, datetime.timedelta(seconds=3), use_libuv=True)
    idle: list[socket.socket] = []
    refused_at: int | None = None
    established_ok = True
    join_seconds: list[tuple[int, float | None]] = []
    t0 = time.monotonic()
    try:
        while len(idle) < limit:
            for _ in range(step):
                try:
                    idle.append(socket.create_connection(("127.0.0.1", port), timeout=2))
                except OSError:
                    break
            took = _joins(port, join_s)
            join_seconds.append((len(idle), took))
            if took is None:
                refused_at = len(idle)
                break
        try:
            established_ok = bool(joined.check(["hello"]))
        except RuntimeError:
            established_ok = False
    finally:
        for s in idle:
            s.close()
    time.sleep(0.5)
    recovered = _joins(port, join_s) is not None
    parent.send("done")
    proc.join(10)
    return {
        "store_nofile_limit": nofile,
        "listener": "own IPv4" if own_listener else "torch's",
        "res_options": os.environ.get("RES_OPTIONS"),
        "new_launcher_join_timeout_s": join_s,
        "idle_connections_when_a_new_launcher_could_not_join": refused_at,
        "join_seconds_by_idle_connections": join_seconds,
        "idle_connections_opened": len(idle),
        "connected_launcher_still_answered": established_ok,
        "new_launcher_joins_after_they_close": recovered,
        "why": WHY[:1],
        "seconds": round(time.monotonic() - t0, 1),
        "this_process_nofile": [soft, hard],
    }


def main(argv: list[str] | None = None) -> int:
    p = cmdline.Parser(description=__doc__.splitlines()[0])
    p.add_argument("--nofile", type=int, default=resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    p.add_argument("--step", type=cmdline.positive_int, default=50)
    p.add_argument("--max", type=int, default=5000)
    p.add_argument(
        "--join-s",
        type=cmdline.positive_float,
        default=30.0,
        help="how long a new launcher may take to connect",
    )
    p.add_argument("--torch-listener", action="store_true", help="torch listens itself (before issue 45)")
    p.add_argument(
        "--unbounded-lookups", action="store_true", help="the resolver's own timeouts (before issue 45)"
    )
    args = p.parse_args(argv)
    if not args.unbounded_lookups:
        resolver.bound_reverse_lookups(os.environ)  # as the launcher does; the store's child inherits it
    print(json.dumps(measure(args.nofile, args.step, args.max, args.join_s, not args.torch_listener)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
