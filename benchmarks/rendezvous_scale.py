"""Figure 5: rendezvous scale. N simulated launchers through one cycle's join + decide.

What is simulated (say it in the table): node 0 is one process hosting a real TCPStore;
the other N-1 launchers are threads of peer processes (at most 32 per process), each with
its own connection, all running the real ``slurm_ft.launch.rendezvous.client`` calls and
the real ``policy.decide`` policy; no health checks, no workers, no files (see
``workers/rdzv_sim.py``). 256 full launcher processes, each importing torch, would take
minutes of CPU on this machine.

A cycle is timed from the moment the last launcher enters it (all are released together)
to the moment the last launcher holds node 0's decision.

Growth is the exponent k of a least-squares fit of log(time) = k log(N) + c over the
medians: k <= 1 means no worse than linear.
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

from benchmarks import proc
from benchmarks.harness import WORKERS, Context
from benchmarks.stats import Row, Summary, Target, error_row, summarize

FIGURE = 5
SCRIPT = WORKERS / "rdzv_sim.py"
TARGET_AT_256_S = 2.0
TARGET_WITH_SPARES_S = 0.1  # issue 13: 256 launchers of which 16 spares, per cycle
SPARES_EVERY = 16  # the spares run: N // 16 of the N launchers are spares
THREADS_PER_PROCESS = 32
NOTES = [
    "Rendezvous scale: node 0 is one process hosting a real TCPStore; the other N-1 launchers are threads "
    "of peer processes (at most 32 per process), each with its own connection, running the real rendezvous "
    "client calls and decision policy; no workers, no health checks. All of them share this machine's "
    "2 cores. A cycle runs from the last launcher entering it to the last launcher holding the decision.",
]


def sizes(quick: bool) -> tuple[int, ...]:
    return (8, 16, 32) if quick else (8, 32, 128, 256)


def _parse(path: Path) -> dict:
    text = path.read_text().strip()
    return json.loads(text.splitlines()[-1]) if text else {}


def peer_ranges(n: int) -> list[tuple[int, int]]:
    """Ranks 1..n-1 split over processes of at most THREADS_PER_PROCESS launchers each."""
    count = math.ceil((n - 1) / THREADS_PER_PROCESS)
    bounds = [1 + round(k * (n - 1) / count) for k in range(count + 1)]
    return list(itertools.pairwise(bounds))


def simulate(ctx: Context, sizes: tuple[int, ...], cycles: int, spares_every: int = 0) -> dict[int, dict]:
    """Run the host and peers processes once for every size; per size and cycle: seconds to
    the last launcher holding the decision, and when node 0 published it, both counted from
    the moment the last launcher entered the cycle (so the harness's own release skew
    between processes is not counted)."""
    d = ctx.scratch("rdzv")
    port = proc.free_port()
    ranges = peer_ranges(max(sizes))
    common = [",".join(map(str, sizes)), str(cycles), str(port)]
    roles = [("host", ["host", *common, str(len(ranges))])]
    roles += [(f"peers{a}", ["peers", *common, str(a), str(b)]) for a, b in ranges]
    started = []
    for role, args in roles:
        with open(d / f"{role}.json", "wb") as out, open(d / f"{role}.err", "wb") as err:
            cmd = [ctx.python, str(SCRIPT), *args]
            env = ctx.env(BENCH_RDZV_SPARES_EVERY=str(spares_every))
            started.append((role, *proc.start(cmd, env, stdout=out, stderr=err)))
    try:
        codes = {role: proc.finish(p, w, t, timeout=600).returncode for role, p, w, t in started}
    finally:
        for _, p, _, _ in started:
            if p.returncode is None:
                proc.kill_group(p)
    docs = {role: _parse(d / f"{role}.json") for role, _ in roles}
    if any(codes.values()) or any("sizes" not in doc for doc in docs.values()):
        why = next((doc["error"] for doc in docs.values() if "error" in doc), "no output")
        raise proc.BenchError(f"exit codes {codes}: {why!r}")
    host = docs.pop("host")["sizes"]
    connect_s = max(doc["connect_s"] for doc in docs.values())
    out: dict[int, dict] = {}
    for n in sizes:
        h, peer_docs = host[str(n)], [doc["sizes"][str(n)] for doc in docs.values()]
        cycle_s, decided_s = [], []
        for i in range(cycles):
            starts = [h["starts"][i]] + [s for doc in peer_docs for s in doc["starts"][i]]
            ends = [h["decided"][i]] + [e for doc in peer_docs for e in doc["ends"][i]]
            cycle_s.append(max(ends) - max(starts))
            decided_s.append(h["decided"][i] - max(starts))
        out[n] = {"cycle_s": cycle_s, "decided_s": decided_s, "join_records_s": h["join_records_s"]}
    out[max(sizes)]["connect_s"] = connect_s
    return out


def growth_exponent(points: list[tuple[int, float]]) -> float:
    xs = [math.log(n) for n, _ in points]
    ys = [math.log(t) for _, t in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)


def _with_spares(ctx: Context, n: int, cycles: int) -> Row:
    """The largest size again, N // 16 of its launchers spares: node 0 places the node
    ranks (``spares.SpareBook``) and each launcher derives its role from the decision."""
    metric = (
        f"rendezvous join + decide, {n} simulated launchers of which {n // SPARES_EVERY} spares, per cycle"
    )
    targets = [Target("max", TARGET_WITH_SPARES_S)] if n == 256 else []
    try:
        doc = simulate(ctx, (n,), cycles, SPARES_EVERY)[n]
    except proc.BenchError as exc:
        return error_row(FIGURE, metric, str(exc), targets)
    decided = summarize(doc["decided_s"][1:])
    note = f"node 0 published its decision at {decided.median:.3f} s"
    return Row(FIGURE, metric, "s", summarize(doc["cycle_s"][1:]), None, targets, note=note)


def run(ctx: Context) -> list[Row]:
    cycles = ctx.runs(6, 4)  # the first cycle of each N is the warm-up
    ns = sizes(ctx.quick)
    try:
        results = simulate(ctx, ns, cycles)
    except proc.BenchError as exc:
        return [
            error_row(
                FIGURE,
                f"rendezvous join + decide, N={','.join(map(str, ns))}",
                str(exc),
                [Target("max", TARGET_AT_256_S, strict=True)],
            )
        ]
    rows: list[Row] = []
    medians: list[tuple[int, float]] = []
    for n in ns:
        doc = results[n]
        summary = summarize(doc["cycle_s"][1:])
        decided = summarize(doc["decided_s"][1:])
        records = summarize(doc["join_records_s"][1:])
        medians.append((n, summary.median))
        note = (
            f"node 0 published its decision at {decided.median:.3f} s, "
            f"{records.median:.3f} s of it in join_records"
        )
        targets = [Target("max", TARGET_AT_256_S, strict=True)] if n == 256 else []
        metric = f"rendezvous join + decide, {n} simulated launchers, per cycle"
        rows.append(Row(FIGURE, metric, "s", summary, None, targets, note=note))
    k = growth_exponent(medians)
    rows.append(
        Row(
            FIGURE,
            f"rendezvous growth exponent k (time ~ N^k, N={ns[0]}..{ns[-1]})",
            "",
            Summary(k, k, k, 1, (k,)),
            None,
            [Target("max", 1.0)],
            note="least-squares fit over the medians above",
        )
    )
    rows.append(_with_spares(ctx, ns[-1], cycles))
    seconds = results[ns[-1]]["connect_s"]
    rows.append(
        Row(
            FIGURE,
            f"first connection of {ns[-1]} launchers to the store, all at once (not a cycle cost)",
            "s",
            Summary(seconds, seconds, seconds, 1, (seconds,)),
            None,
            note="a reverse DNS lookup per TCPStore client: 1 s at most, as the launcher bounds it",
        )
    )
    return rows
