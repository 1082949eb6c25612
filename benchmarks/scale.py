"""python -m benchmarks.scale: N launchers holding a real launcher's store connections (issue 45).

By hand, not in CI. For each N: node 0 is one process running the real store host and
node 0's background threads; the N-1 other launchers are threads of peer processes
(``--per-process`` each), each with the real connect, the real heart-beat, store watchdog
and halt waiter on three connections of its own (see ``workers/scale_sim.py`` for what is
and is not simulated). Figures per N: the first connection of all N at once, node 0's
steady CPU (% of one core) and RSS while every peer heart-beats, a halt reaching every
launcher (the restart's first leg), the restart (failure anywhere to every launcher holding
the next decision) and a store succession (node 0's process ends: the loss to every
launcher holding the successor's first decision). All processes share this machine.

Usage: python -m benchmarks.scale [--sizes 64,256,1024] [--per-process 64 | --processes 32] [--steady 20]
       [--switch-interval 0.5] [--spread] [--no-succession] [--out PATH]
"""

from __future__ import annotations

import datetime
import itertools
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from benchmarks import cmdline, proc
from benchmarks.harness import WORKERS
from benchmarks.workers import scale_sim as sim
from slurm_ft.launch.rendezvous import beatperiod

SCRIPT = WORKERS / "scale_sim.py"
REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
# How long a peer process's thread may keep its interpreter's lock. Python's 5 ms is a
# timed wait of every thread that wants the lock: hundreds of a packed process's launcher
# threads woke 200 times a second each to ask for it, and at a store loss, when they all
# want it at once, 4,096 launchers' wake-ups took both cores for minutes (a succession of
# 93-475 s; its median survivor noticed the loss after 132-397 s). A launcher on a node of
# its own has five threads, not five hundred: this is the packing's cost, not the launcher's.
# 0.5 s: a thread keeps the lock until it blocks, which every launcher thread soon does
# (docs/design/scale.md, "Store succession").
PEER_SWITCH_INTERVAL_S = 0.5


def peer_cores(processes: int, spread: bool) -> list[int | None]:
    """The core each peer process runs on: one each, in turn over the cores this harness
    may use; None (any core, as the scheduler places it) with ``spread``.

    A packed peer process's threads take turns on its interpreter's lock; spread over two
    cores, each hand-over of it is a wake-up of a thread on the other core (an
    inter-processor interrupt, which this virtual machine pays for dearly) and both cores
    contend for it. At a store loss, 4,096 launchers so made 56 futex calls on the lock
    each (18 on one core), 44 context switches (24) and 3.9 rescheduling interrupts (0.45),
    and took 2.9 ms of CPU each (1.8 ms): the succession 6.8-7.5 s (4.6-4.9 s). A launcher
    on a node of its own has five threads, seldom two of them runnable: this is the
    packing's cost, not the launcher's (docs/design/scale.md, "Store succession")."""
    if spread:
        return [None] * processes
    cores = sorted(os.sched_getaffinity(0))
    return [cores[k % len(cores)] for k in range(processes)]


def peer_ranges(n: int, per_process: int) -> list[tuple[int, int]]:
    count = max(1, math.ceil((n - 1) / per_process))
    bounds = [1 + round(k * (n - 1) / count) for k in range(count + 1)]
    return list(itertools.pairwise(bounds))


def _median(values: list[float]) -> float | None:
    return sorted(values)[len(values) // 2] if values else None


def _last_json(text: str) -> dict:
    lines = [ln for ln in text.splitlines() if ln.startswith("{")]
    return json.loads(lines[-1]) if lines else {}


def _await_figures(out: Path, host: subprocess.Popen[bytes], deadline: float) -> dict:
    """Node 0's figures: its last line once every peer holds cycle 1's decision."""
    while time.monotonic() < deadline:
        text = out.read_text()
        if '"decided_at"' in text:
            return _last_json(text)
        if host.poll() is not None:
            raise RuntimeError(f"node 0 ended with {host.returncode}")
        time.sleep(0.05)
    raise TimeoutError("node 0 gave no figures before the deadline")


def _stopped(pid: int) -> bool:
    """Every thread of the process stopped (the leader's state alone shows T before the
    others have stopped), or the process gone."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return True
    for task in tasks:
        try:
            state = (task / "stat").read_text().rpartition(")")[2].split()[0]
        except (OSError, IndexError):
            continue  # a thread that ended
        if state not in ("T", "t", "Z", "X"):
            return False
    return True


def _end_node0_while_peers_wait(host: subprocess.Popen[bytes], peers: list[subprocess.Popen[bytes]]) -> float:
    """Kill node 0 with every peer process stopped, and resume them once its exit is done:
    the moment of the loss as the peers see it (the clock starts there). On a node of its
    own node 0's kernel closes its 12,000 connections in well under a second; on this
    machine its exit competed with every launcher thread that had noticed the loss already,
    and took from 1 to 90 s. What the peers do once resumed is what the figures measure."""
    for p in peers:
        p.send_signal(signal.SIGSTOP)
    deadline = time.monotonic() + 60
    while not all(_stopped(p.pid) for p in peers):
        if time.monotonic() > deadline:
            raise TimeoutError("the peer processes did not stop within 60 s")
        time.sleep(0.01)
    host.kill()
    host.wait()
    lost_at = time.monotonic()
    for p in peers:
        p.send_signal(signal.SIGCONT)
    return lost_at


def _await_peers_done(
    state: Path, ranges: list[tuple[int, int]], peers: list[subprocess.Popen[bytes]]
) -> None:
    """Every peer process's succession is over: its launchers hold the successor's decision
    (or failed). They stay until all are over, as launchers on nodes of their own do."""
    deadline = time.monotonic() + 600
    marks = [state / sim.DONE.format(first=a) for a, _ in ranges]
    while not all(m.exists() for m in marks):
        ended = [p.returncode for p in peers if p.poll() is not None]
        if ended:
            raise RuntimeError(f"a peer process ended during the succession (exit {ended[0]})")
        if time.monotonic() > deadline:
            raise TimeoutError("the succession was not over within 600 s")
        time.sleep(0.05)


def one_size(
    n: int,
    per_process: int,
    steady_s: float,
    tmp: Path,
    *,
    torch_listener: bool = False,
    beats_per_s: int | None = None,
    succession: bool = True,
    switch_s: float = PEER_SWITCH_INTERVAL_S,
    spread: bool = False,
) -> dict:
    port = proc.free_port()
    succ_port = proc.free_port() if succession else 0
    state = tmp / f"state{n}"
    env = {**os.environ, "PYTHONPATH": str(REPO), "TORCH_CPP_LOG_LEVEL": "FATAL"}
    env["BENCH_SCALE_TORCH_LISTENER"] = "1" if torch_listener else "0"
    env["BENCH_SCALE_BEATS_PER_S"] = str(beats_per_s or "")
    env["BENCH_SCALE_SWITCH_S"] = str(switch_s)
    budget = beats_per_s or beatperiod.NODE0_BEATS_PER_S
    # node 0's steady CPU over whole beat periods: over 10 s of an 8 s period it measured
    # the phase of the window as much as the rate (1.45-2.2 % the same code, when beats
    # still came in bursts)
    period = max(sim.INTERVAL_S, (n - 1) / budget)
    window = math.ceil(steady_s / period - 1e-9) * period
    host_out = tmp / f"host{n}.out"
    with open(host_out, "wb") as out:
        host = subprocess.Popen(
            [sys.executable, str(SCRIPT), "host", str(n), str(port), str(window)],
            stdout=out,
            stderr=subprocess.DEVNULL,
            env=env,
        )
    deadline = time.monotonic() + 120
    while "listening" not in host_out.read_text() and time.monotonic() < deadline:
        if host.poll() is not None:
            raise RuntimeError(f"node 0 ended with {host.returncode}")
        time.sleep(0.05)
    ranges = peer_ranges(n, per_process)
    go_at = time.time() + 5 + 1.5 * len(ranges)  # every peer process has imported torch by then
    peers = []
    cores = peer_cores(len(ranges), spread)
    for (a, b), core in zip(ranges, cores, strict=True):
        out_path = tmp / f"peers{n}-{a}.out"
        with open(out_path, "wb") as out:
            cmd = [sys.executable, str(SCRIPT), "peers", str(n), str(port), str(a), str(b), str(go_at)]
            cmd += [str(succ_port), str(state)]
            peer_env = {**env, "BENCH_SCALE_CORE": "" if core is None else str(core)}
            popen = subprocess.Popen(cmd, stdout=out, stderr=subprocess.DEVNULL, env=peer_env)
            peers.append((out_path, popen))
    try:
        h = _await_figures(host_out, host, deadline=time.monotonic() + 1800)
        lost_at = _end_node0_while_peers_wait(host, [p for _, p in peers]) if succession else None
        if not succession:
            host.kill()
            host.wait()
        if succession:
            _await_peers_done(state, ranges, [p for _, p in peers])
            (state / sim.RELEASED).touch()  # the successor's store (in the first process) may end
        for _, p in peers:
            p.wait(timeout=600)
    finally:
        for p in [host, *(p for _, p in peers)]:
            if p.poll() is None:
                p.kill()
                p.wait()
    docs = [_last_json(path.read_text()) for path, _ in peers]
    started = min(d["started"] for d in docs)
    led_at = [d["led_at"] for d in docs if d["led_at"] is not None]
    return {
        "n": n,
        "listener": "torch" if torch_listener else "own IPv4",
        "node0_beats_per_s_budget": budget,
        "beat_interval_s": round(period, 3),
        "peer_processes": len(ranges),
        "peer_switch_interval_s": switch_s,
        # as each peer process found itself: on one core, or on any
        "peer_cores": "one each" if all(len(d["cores"]) == 1 for d in docs) else "any",
        "first_connection_s": max(d["connected_last"] for d in docs) - started,
        # the launch's rendezvous: the last launcher connected to the last holding cycle 0's
        # decision (its placement read by every launcher)
        "launch_rendezvous_s": max(d["launched_last"] for d in docs) - max(d["connected_last"] for d in docs),
        "node0_steady_cpu_pct": h["steady_cpu_pct"],
        "node0_steady_window_s": round(window, 3),
        "node0_rss_mib": h["rss_mib"],
        "lost_peers": h["lost_peers"],
        "halt_to_all_s": max(d["woken_last"] for d in docs) - h["halted_at"],
        "woken": sum(d["woken"] for d in docs),
        "restart_s": max(d["held_last"] for d in docs) - h["halted_at"],
        "rendezvous_s": max(d["held_last"] for d in docs) - max(d["woken_last"] for d in docs),
        "node0_gather_to_decision_s": h["decided_at"] - h["joined_at"],
        # the restart's legs: the halt to node 0 holding every join, its decision to every
        # launcher holding it
        "halt_to_joins_s": h["joined_at"] - h["halted_at"],
        "decision_to_all_s": max(d["held_last"] for d in docs) - h["decided_at"],
        "held": sum(d["held"] for d in docs),
        # the peers' CPU from a process's first launcher woken to its last holding the
        # decision, per launcher: what a restart costs each launcher on its own node
        "restart_cpu_ms_per_launcher": 1000 * sum(d["restart_cpu_s"] or 0.0 for d in docs) / (n - 1),
        "succession_noticed_median_s": (
            _median([t - lost_at for d in docs for t in d["noticed"]]) if lost_at else None
        ),
        "succession_noticed_s": max(d["noticed_last"] for d in docs) - lost_at if lost_at else None,
        "succession_noticed_first_s": (
            min((t for d in docs for t in d["noticed"]), default=lost_at) - lost_at if lost_at else None
        ),
        # by which of its threads each survivor learned of the loss (halt waiter, heart-beat,
        # the heart-beat's silence)
        "succession_noticed_how": dict(sum((Counter(d["noticed_how"]) for d in docs), Counter())),
        # per peer process, its first and last survivor noticing: the spread in a process
        # against the spread among processes
        "succession_noticed_by_process_s": (
            [
                [round(min(d["noticed"]) - lost_at, 2), round(max(d["noticed"]) - lost_at, 2)]
                for d in docs
                if d["noticed"]
            ]
            if lost_at
            else None
        ),
        "successor_decided_s": led_at[0] - lost_at if lost_at and led_at else None,
        # the peers' CPU from a process's first survivor noticing the loss to its last
        # holding the successor's decision, per survivor (the successor's process included)
        "succession_cpu_ms_per_launcher": (
            1000 * sum(d.get("succession_cpu_s") or 0.0 for d in docs) / (n - 2) if lost_at else None
        ),
        # the launchers' own threads' CPU between the steps of the restart ("start->restart_held")
        # and of the succession (noticed at "start"), per launcher: where it goes
        "step_cpu_ms_per_launcher": {
            step: round(1000 * cpu / (n - 1), 3)
            for step, cpu in sorted(sum((Counter(d["step_cpu_s"]) for d in docs), Counter()).items())
        },
        # when the survivors reached each step of the succession, from the loss: median, last
        "succession_step_at_s": (
            {
                step: [round(_median(ts) - lost_at, 3), round(max(ts) - lost_at, 3)]
                for step in dict.fromkeys(s for d in docs for s in d["step_at"])
                for ts in [sorted(t for d in docs for t in d["step_at"].get(step, []))]
            }
            if lost_at
            else None
        ),
        "succession_median_s": (
            _median([t - lost_at for d in docs for t in d["succeeded_at"]]) if lost_at else None
        ),
        "succession_s": max(d["succeeded_last"] for d in docs) - lost_at if lost_at else None,
        "succeeded": sum(d["succeeded"] for d in docs),
        "successors": len(led_at),
        "errors": [e for d in docs for e in d["errors"]][:5],
        "peer_process_rss_mib": max(d["rss_mib"] for d in docs),
    }


def main(argv: list[str] | None = None) -> int:
    p = cmdline.Parser(prog="python -m benchmarks.scale", description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=cmdline.sizes, default="64,256,1024")
    p.add_argument(
        "--per-process", type=cmdline.positive_int, default=64, help="simulated launchers per peer process"
    )
    p.add_argument(
        "--processes",
        type=cmdline.positive_int,
        help="peer processes at every size, the launchers shared out among them (instead of "
        "--per-process): the same packing at every N",
    )
    p.add_argument(
        "--steady",
        type=cmdline.positive_float,
        default=20.0,
        help="seconds of node 0's steady CPU measurement (rounded up to whole beat periods)",
    )
    p.add_argument(
        "--torch-listener",
        action="store_true",
        help="node 0 lets torch listen (dual-stack, a reverse lookup per accept): the code before issue 45",
    )
    p.add_argument(
        "--beats-per-s",
        type=int,
        help="node 0's heart-beat budget (default: the launcher's; 1000000: every peer beats each second, "
        "as before the stretch)",
    )
    p.add_argument(
        "--switch-interval",
        type=cmdline.positive_float,
        default=PEER_SWITCH_INTERVAL_S,
        help="seconds a peer process's thread may keep its interpreter's lock (Python's own: 0.005)",
    )
    p.add_argument(
        "--spread",
        action="store_true",
        help="peer processes run on any core (default: each on one, in turn): the packing's cross-core "
        "hand-overs of the interpreter's lock included",
    )
    p.add_argument("--no-succession", action="store_true", help="end after the restart (no store succession)")
    p.add_argument("--out", type=Path, help="results JSON (default benchmarks/results/scale-<date>.json)")
    args = p.parse_args(argv)
    sizes = args.sizes
    tmp = Path(tempfile.mkdtemp(prefix="slurm-ft-scale-"))  # state dirs and outputs, removed at the end
    rows = []
    for n in sizes:
        try:
            row = one_size(
                n,
                args.per_process if args.processes is None else math.ceil((n - 1) / args.processes),
                args.steady,
                tmp,
                torch_listener=args.torch_listener,
                beats_per_s=args.beats_per_s,
                succession=not args.no_succession,
                switch_s=args.switch_interval,
                spread=args.spread,
            )
        except BaseException:
            print(f"the run's files are kept in {tmp}", file=sys.stderr)
            raise
        rows.append(row)
        succession = (
            f"succession {row['succession_s']:6.3f} s "
            f"(successor's decision {row['successor_decided_s']:6.3f} s) "
            f"held {row['succeeded']}/{n - 2}  "
            if row["succession_s"] is not None
            else ""
        )
        print(
            f"N={n:5d} beat every {row['beat_interval_s']:5.2f} s  "
            f"first connection {row['first_connection_s']:7.2f} s  "
            f"node 0 steady CPU {row['node0_steady_cpu_pct']:5.2f} % RSS {row['node0_rss_mib']:6.0f} MiB  "
            f"halt to all {row['halt_to_all_s']:6.3f} s  woken {row['woken']}/{n - 1}  "
            f"restart {row['restart_s']:6.3f} s (rendezvous {row['rendezvous_s']:6.3f} s) "
            f"held {row['held']}/{n - 1}  {succession}"
            f"lost {row['lost_peers']}  errors {len(row['errors'])}",
            flush=True,
        )
    shutil.rmtree(tmp, ignore_errors=True)
    command = "python -m benchmarks.scale " + " ".join(argv if argv is not None else sys.argv[1:])
    doc = {"command": command, "when": datetime.datetime.now(datetime.UTC).isoformat(), "rows": rows}
    out = args.out or RESULTS / f"scale-{datetime.date.today().isoformat()}.json"
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
