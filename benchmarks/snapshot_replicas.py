"""What snapshots and ``--snapshot-replicas 1`` cost the trainer and the launcher (#43, #44).

A trainer stand-in (its own process, one torch thread) runs steps of fixed work (200
tanh(A @ A) of 256x256 fp32), each followed by a sharded snapshot of ``--mib`` MiB. This
process plays the node's launcher's replica part (:class:`ReplicaPusher`: every new
snapshot to the next node), and a third process the next node's launcher's receiving
service (:class:`PeerServer`). Three kinds of phase of ``--phase-s`` seconds, interleaved
and rotated each round so that neither order nor drift favours one:

- ``none``: the trainer does not snapshot (the reference);
- ``snapshots``: a snapshot every step, no replicas;
- ``replicas``: a snapshot every step, each new one pushed to the next node.

Per phase: the trainer's steps per second, its CPU time per step (its own thread: what the
copies cost it through memory and caches, as opposed to waiting for a core), its snapshot
call's time; the CPU (percent of one core, all threads) and RSS of the pushing launcher
and of the receiving one; how far the replica lags (sampled every 0.1 s, in steps); the
replicas kept and those dropped as superseded. On one machine the receiver competes with
the trainer too, which on real nodes runs elsewhere: with ``--pin`` (the default where the
machine has two CPUs or more) the trainer runs on the first CPU and both launchers on the
others, as a real node gives its launcher cores of its own, so that the trainer competes
for memory bandwidth and caches only (what the 2 % bound of #44 is about), not for a core
shared with other work. Many short phases, interleaved and rotated; per round the ratio of
the replicas phase to the snapshots phase (steps per second, and the trainer's CPU time per
step), their median and a bootstrap 95 % interval over the rounds.

    python -m benchmarks.snapshot_replicas [--mib 16] [--phase-s 1.5] [--rounds 20] [--no-pin]
        [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import cmdline, proc
from slurm_ft import privatefiles
from slurm_ft.snapshot import layout, reader

SHM = Path("/dev/shm")
KINDS = ("none", "snapshots", "replicas")
SECRET_ENV = "SLURM_FT_BENCH_SECRET"
KEY = layout.rank_key(0)


def train(where: Path, ctl: Path, mib: int, cpus: set[int]) -> int:
    """The trainer: steps until killed; a line per step (end time, its thread's CPU time
    for the step, the snapshot call's time or -1 when it did not snapshot)."""
    if cpus:
        os.sched_setaffinity(0, cpus)
    import torch

    from slurm_ft.snapshot import session

    torch.set_num_threads(1)
    state = {"shard": torch.randn(mib << 20 >> 2)}
    a = torch.randn(256, 256)
    placement = session.Placement(
        rank=0, world_size=2, local_rank=0, local_world_size=1, node_rank=0, cycle=1
    )
    trainer = session.Session(session.Settings(where, None, placement, None))
    flag = ctl / "snapshot"
    step = 0
    with open(ctl / "stamps", "a", encoding="ascii") as out:
        while True:
            step += 1
            cpu0 = time.thread_time()
            for _ in range(200):  # the step's work
                a = torch.tanh(a @ a * 0.01)
            state["shard"].add_(1.0)
            took = -1.0
            if flag.exists():
                t0 = time.perf_counter()
                trainer.snapshot(step, state, replicated=False)
                took = time.perf_counter() - t0
            out.write(f"{time.monotonic()} {time.thread_time() - cpu0} {took}\n")
            out.flush()


def serve(where: Path, cpus: set[int]) -> int:
    """The next node's launcher: receives replicas into ``where`` until stdin closes."""
    if cpus:
        os.sched_setaffinity(0, cpus)
    from slurm_ft.launch.snapshots.peer import PeerServer

    server = PeerServer(
        where, os.environ[SECRET_ENV].encode(), host="127.0.0.1", max_size=1 << 40, event=lambda _: None
    )
    print(server.port, flush=True)
    sys.stdin.read()
    server.close()
    return 0


def rss_mib(pid: int) -> float:
    """The process's own resident memory (anonymous and file pages), MiB: not the shared
    memory it maps (a slot being received is /dev/shm's, counted there once)."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("RssAnon", "RssFile", "RssShmem"):
            fields[name] = int(value.split()[0]) / 1024
    return fields.get("RssAnon", 0.0) + fields.get("RssFile", 0.0)


def shm_mapped_mib(pid: int) -> float:
    """Shared memory the process maps (a slot being sent or received), MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("RssShmem:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _step(area: Path) -> int | None:
    info = reader.newest(area, KEY)
    return info.step if info is not None else None


def main(argv: list[str] | None = None) -> int:
    parser = cmdline.Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=cmdline.positive_int, default=16)
    parser.add_argument("--phase-s", type=cmdline.positive_float, default=1.5)
    parser.add_argument("--rounds", type=cmdline.positive_int, default=20)
    parser.add_argument("--pin", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--train", nargs=2, type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--cpus", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    given = {int(c) for c in args.cpus.split(",") if c}
    if args.train:
        return train(args.train[0], args.train[1], args.mib, given)
    if args.serve:
        return serve(args.serve, given)
    from slurm_ft.launch.snapshots.peer import Address
    from slurm_ft.launch.snapshots.replicas import ReplicaPusher

    online = sorted(os.sched_getaffinity(0))
    args.pin = len(online) >= 2 if args.pin is None else args.pin
    trainer_cpus = {online[0]} if args.pin else set(online)
    launcher_cpus = set(online[1:]) if args.pin else set(online)
    os.sched_setaffinity(0, launcher_cpus)

    mine = privatefiles.create_dir(SHM, "slurm-ft-bench-rep-a-")
    theirs = privatefiles.create_dir(SHM, "slurm-ft-bench-rep-b-")
    ctl = privatefiles.create_dir(SHM, "slurm-ft-bench-rep-ctl-")
    secret = secrets.token_hex(32)
    me = [sys.executable, "-m", "benchmarks.snapshot_replicas", "--mib", str(args.mib)]
    trainer = subprocess.Popen([*me, "--train", str(mine), str(ctl), "--cpus", _cpus(trainer_cpus)])
    receiver = subprocess.Popen(
        [*me, "--serve", str(theirs), "--cpus", _cpus(launcher_cpus)],
        env={**os.environ, SECRET_ENV: secret},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert receiver.stdout is not None
    address = Address("127.0.0.1", int(receiver.stdout.readline()))
    pusher = ReplicaPusher(mine, secret.encode(), event=lambda _: None)
    phases: list[dict[str, object]] = []
    try:
        (ctl / "snapshot").touch()
        time.sleep(max(3.0, args.phase_s))  # the trainer's start-up and first slots, outside every phase
        for k in range(args.rounds):
            for kind in KINDS[k % 3 :] + KINDS[: k % 3]:
                phases.append(_phase(kind, args.phase_s, ctl, mine, theirs, pusher, address, receiver.pid))
    finally:
        pusher.close()
        trainer.kill()
        trainer.wait()
        receiver.communicate(b"", timeout=60)
        stamps = [tuple(float(x) for x in line.split()) for line in (ctl / "stamps").read_text().splitlines()]
        for made in (mine, theirs, ctl):
            privatefiles.remove_tree(made)
    for phase in phases:
        _steps_of(phase, stamps)
    return _report(args, phases, trainer_cpus, launcher_cpus)


def _phase(
    kind: str,
    seconds: float,
    ctl: Path,
    mine: Path,
    theirs: Path,
    pusher: object,
    address: object,
    receiver_pid: int,
) -> dict[str, object]:
    from slurm_ft.launch.snapshots.peer import Address
    from slurm_ft.launch.snapshots.replicas import ReplicaPusher

    assert isinstance(pusher, ReplicaPusher) and isinstance(address, Address)
    flag = ctl / "snapshot"
    if kind == "none":
        flag.unlink(missing_ok=True)
    else:
        flag.touch()
    pusher.aim(address if kind == "replicas" else None)
    counts0 = (pusher.counts.kept, pusher.counts.superseded, pusher.counts.failed, pusher.counts.behind)
    cpu0, rcpu0 = proc.self_cpu_s(os.getpid()), proc.self_cpu_s(receiver_pid)  # ended threads too
    t0 = time.monotonic()
    lags: list[int] = []
    while time.monotonic() - t0 < seconds:
        time.sleep(0.1)  # sampling the replica's lag, not waiting for anything
        if kind == "replicas":
            newest, replica = _step(mine), _step(theirs)
            if newest is not None and replica is not None:
                lags.append(newest - replica)
    t1 = time.monotonic()
    wall = t1 - t0
    cpu, rcpu = proc.self_cpu_s(os.getpid()) - cpu0, proc.self_cpu_s(receiver_pid) - rcpu0
    return {
        "kind": kind,
        "t0": t0,
        "t1": t1,
        "launcher_cpu_s": cpu,
        "receiver_cpu_s": rcpu,
        "launcher_cpu_pct": 100 * cpu / wall,
        "receiver_cpu_pct": 100 * rcpu / wall,
        "launcher_rss_mib": rss_mib(os.getpid()),
        "receiver_rss_mib": rss_mib(receiver_pid),
        "kept": pusher.counts.kept - counts0[0],
        "superseded": pusher.counts.superseded - counts0[1],
        "failed": pusher.counts.failed - counts0[2],
        "behind": pusher.counts.behind - counts0[3],
        "lag_steps_median": statistics.median(lags) if lags else None,
        "lag_steps_max": max(lags) if lags else None,
    }


def _steps_of(phase: dict[str, object], stamps: list[tuple[float, ...]]) -> None:
    t0, t1 = float(phase["t0"]), float(phase["t1"])  # type: ignore[arg-type]
    inside = [s for s in stamps if t0 <= s[0] < t1]
    phase["steps"] = len(inside)
    phase["steps_per_s"] = (len(inside) - 1) / (inside[-1][0] - inside[0][0]) if len(inside) >= 2 else None
    phase["cpu_ms_per_step"] = 1000 * statistics.median(s[1] for s in inside) if inside else None
    snaps = [s[2] for s in inside if s[2] >= 0]
    phase["snapshot_ms"] = 1000 * statistics.median(snaps) if snaps else None


def _cpus(cpus: set[int]) -> str:
    return ",".join(map(str, sorted(cpus)))


def bootstrap(ratios: list[float], *, draws: int = 4000, seed: int = 44) -> tuple[float, float]:
    """A 95 % interval of the median of ``ratios`` (resampled with replacement): the rounds
    are few and their spread is other people's load, not a normal error."""
    import random

    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(draws))
    return medians[int(0.025 * draws)], medians[int(0.975 * draws) - 1]


def _pairs(args: argparse.Namespace, phases: list[dict[str, object]], field: str) -> list[float]:
    """Each round's replicas phase over its snapshots phase, for ``field``."""
    return [
        float(r[field]) / float(s[field])  # type: ignore[arg-type]
        for k in range(args.rounds)
        for r in phases[3 * k : 3 * k + 3]
        for s in phases[3 * k : 3 * k + 3]
        if r["kind"] == "replicas" and s["kind"] == "snapshots" and r[field] and s[field]
    ]


def _num(phase: dict[str, object], field: str) -> float:
    value = phase[field]
    assert isinstance(value, int | float)
    return float(value)


def _median(phases: list[dict[str, object]], kind: str, field: str) -> float:
    values = [float(p[field]) for p in phases if p["kind"] == kind and p[field] is not None]  # type: ignore[arg-type]
    return statistics.median(values) if values else float("nan")


def _report(
    args: argparse.Namespace, phases: list[dict[str, object]], trainer_cpus: set[int], launcher_cpus: set[int]
) -> int:
    fields = (
        "steps_per_s",
        "cpu_ms_per_step",
        "snapshot_ms",
        "launcher_cpu_pct",
        "receiver_cpu_pct",
        "launcher_rss_mib",
        "receiver_rss_mib",
        "lag_steps_median",
        "lag_steps_max",
        "kept",
        "superseded",
        "behind",
    )
    summary = {kind: {f: _median(phases, kind, f) for f in fields} for kind in KINDS}
    snap, rep = summary["snapshots"], summary["replicas"]
    pairs = _pairs(args, phases, "steps_per_s")
    cpu_pairs = _pairs(args, phases, "cpu_ms_per_step")  # what replicas cost it through memory and caches
    rep_phases = [p for p in phases if p["kind"] == "replicas"]
    rep_s = sum(_num(p, "t1") - _num(p, "t0") for p in rep_phases)
    kept_gib = sum(_num(p, "kept") for p in rep_phases) * args.mib / 1024
    per_gib = {
        side: sum(_num(p, f"{side}_cpu_s") for p in rep_phases) / kept_gib if kept_gib else None
        for side in ("launcher", "receiver")
    }
    result = {
        "pusher_cpu_s_per_gib_kept": per_gib["launcher"],
        "receiver_cpu_s_per_gib_kept": per_gib["receiver"],
        "mib": args.mib,
        "phase_s": args.phase_s,
        "rounds": args.rounds,
        "load_avg_1min": os.getloadavg()[0],
        "summary": summary,
        "replicas_over_snapshots_per_round": pairs,
        "slowdown_median_of_rounds": 1 - statistics.median(pairs) if pairs else None,
        "slowdown_interval_95": [1 - b for b in reversed(bootstrap(pairs))] if len(pairs) > 1 else None,
        "replicas_over_snapshots_cpu_per_round": cpu_pairs,
        "cpu_per_step_change_median": statistics.median(cpu_pairs) - 1 if cpu_pairs else None,
        "cpu_per_step_change_interval_95": (
            [b - 1 for b in bootstrap(cpu_pairs)] if len(cpu_pairs) > 1 else None
        ),
        "pinned": args.pin,
        "trainer_cpus": sorted(trainer_cpus),
        "launcher_cpus": sorted(launcher_cpus),
        "snapshot_mib_per_s": args.mib * rep["steps_per_s"],
        "replicated_mib_per_s": kept_gib * 1024 / rep_s if rep_s else None,
        "phases": phases,
    }
    print(
        f"{args.mib} MiB sharded snapshot per step, {args.rounds} rounds of {args.phase_s:.1f} s phases "
        f"(median; load average {result['load_avg_1min']:.1f})"
    )
    print(
        f"{'phase':>10}{'steps/s':>9}{'cpu ms/st':>10}{'snap ms':>9}{'pusher %':>9}{'recv %':>8}"
        f"{'push RSS':>9}{'recv RSS':>9}{'lag':>5}{'kept':>6}{'gone':>6}{'behind':>7}"
    )
    for kind in KINDS:
        s = summary[kind]
        print(
            f"{kind:>10}{s['steps_per_s']:>9.2f}{s['cpu_ms_per_step']:>10.1f}{s['snapshot_ms']:>9.1f}"
            f"{s['launcher_cpu_pct']:>9.1f}{s['receiver_cpu_pct']:>8.1f}{s['launcher_rss_mib']:>9.0f}"
            f"{s['receiver_rss_mib']:>9.0f}{s['lag_steps_median']:>5.0f}{s['kept']:>6.0f}{s['superseded']:>6.0f}"
            f"{s['behind']:>7.0f}"
        )
    print(
        f"replicas vs snapshots, per round: {', '.join(f'{(1 - p) * 100:+.1f} %' for p in pairs)} slower; "
        f"median {(1 - statistics.median(pairs)) * 100:+.1f} %; steps/s {snap['steps_per_s']:.2f} -> "
        f"{rep['steps_per_s']:.2f}"
        if pairs
        else "no pair of phases to compare"
    )
    if len(pairs) > 1 and len(cpu_pairs) > 1:
        low, high = bootstrap(pairs)
        clow, chigh = bootstrap(cpu_pairs)
        print(
            f"steps/s slower with replicas: median {(1 - statistics.median(pairs)) * 100:+.1f} % "
            f"(95 % interval {(1 - high) * 100:+.1f} to {(1 - low) * 100:+.1f} %); trainer CPU per step "
            f"{(statistics.median(cpu_pairs) - 1) * 100:+.1f} % ({(clow - 1) * 100:+.1f} to "
            f"{(chigh - 1) * 100:+.1f} %); trainer on CPU {_cpus(trainer_cpus)}, "
            f"launchers on {_cpus(launcher_cpus)}"
        )
    if rep_s:
        print(
            f"state {args.mib} MiB per step, snapshots {args.mib * rep['steps_per_s']:.0f} MiB/s; replicas "
            f"{kept_gib * 1024 / rep_s:.0f} MiB/s landed"
        )
    if kept_gib:
        print(
            f"CPU per GiB of replicas kept: pusher {result['pusher_cpu_s_per_gib_kept']:.2f} s, "
            f"receiver {result['receiver_cpu_s_per_gib_kept']:.2f} s (superseded copies' work included)"
        )
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
