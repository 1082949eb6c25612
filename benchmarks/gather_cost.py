"""What node 0's gather of a cycle's joins costs its CPU for a job of N launchers (issue 45).

Node 0 gathers every cycle (and a successor at every succession), on the path from the
last join to its decision. This runs the real ``joins.gather`` over the in-memory store
(``LocalStore``: the store's own cost is not the point), values sealed as with the
templates' secret: once with every join record there (a whole gather: every record read
and opened), and once with the last launcher's join written after ``--looks`` looks (the
cost of one look while node 0 waits for a late launcher; node 0 looks every 5 ms in a
restart's first seconds). Figures: the process's CPU for each, the median of ``--runs``.

    python -m benchmarks.gather_cost [--nodes 256,4096] [--looks 200] [--runs 3]
"""

from __future__ import annotations

import statistics
import sys
import time

from benchmarks import cmdline
from slurm_ft.launch.rendezvous import localstore
from slurm_ft.launch.rendezvous.client import Client
from slurm_ft.launch.rendezvous.protocol import JoinInfo, Keys
from slurm_ft.launch.rendezvous.sealing import Sealer
from slurm_ft.launch.roles.joins import JoinWait, gather

SEALER = Sealer(b"the gather-cost benchmark secret")


def _info(k: int) -> JoinInfo:
    return JoinInfo(k, f"node{k:05d}", "127.0.0.1", 1000 + k)


def one_gather(n: int, late_after: int | None) -> tuple[float, int]:
    """CPU seconds of one gather of n launchers, and how many looks it took; with
    ``late_after``, the last launcher joins after that many looks."""
    store = localstore.LocalStore()
    keys = Keys(f"gather-{n}", SEALER.namespace)
    host = Client(store.connect(), keys, sealer=SEALER)
    peer = Client(store.connect(), keys, sealer=SEALER)
    last = n - 1 if late_after is not None else n
    for k in range(1, last):
        peer.join(1, _info(k))
    looks = 0

    def sleep(_s: float) -> None:
        nonlocal looks
        looks += 1
        if looks == late_after:
            peer.join(1, _info(n - 1))

    wait = JoinWait(host, n, with_spares=False, departed=frozenset(), lost_peers=dict, own=_info(0))
    start = time.process_time()
    roster = gather(wait, 1, None, (), 60.0, abort=lambda: False, sleep=sleep)
    spent = time.process_time() - start
    if not roster.complete:
        raise RuntimeError(f"the gather of {n} ended without every join")
    return spent, looks


def main(argv: list[str] | None = None) -> int:
    p = cmdline.Parser(prog="python -m benchmarks.gather_cost", description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=cmdline.sizes, default="256,4096", help="job sizes")
    p.add_argument("--looks", type=cmdline.positive_int, default=200, help="looks before the late join")
    p.add_argument("--runs", type=cmdline.positive_int, default=3)
    args = p.parse_args(argv)
    for n in args.nodes:
        whole = statistics.median(one_gather(n, None)[0] for _ in range(args.runs))
        late = [one_gather(n, args.looks) for _ in range(args.runs)]
        per_look = statistics.median(spent / looks for spent, looks in late)
        print(
            f"gather of {n:5d} launchers: whole {whole * 1000:7.1f} ms of CPU; "
            f"a look while one is late {per_look * 1000:6.3f} ms ({args.looks} looks, median of {args.runs})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
