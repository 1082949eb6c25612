"""Where a goodput run's preemptions and start-ups spent their seconds, from its logs.

    python -m benchmarks.goodput_phases RUN_DIR [--slurmctld-log PATH]

``RUN_DIR`` is a goodput run's ``--out`` (the slurm-ft side: ``RUN_DIR/slurm-ft``). Each
start of an attempt (the job's first and every requeue) and each preemption is laid out
as the moments the logs hold: the drill's USR1 (its record), the launchers' own lines
(received, stopped, persisted, exiting; started, store listening, joined, workers
started), Slurm's own (``Requeuing``, ``Allocate`` / ``Started`` in slurmctld's log, which
is the local cluster's: ``scripts/slurm-local-up``) and the trainer's first step after
(its step log). Each line is the seconds since the previous moment, so the parts add up
to the whole. Read-only; prints one table per event.
"""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from benchmarks import cmdline

SLURMCTLD_LOG = Path("/var/tmp/slurm-ft-local/log/slurmctld.log")
_LAUNCHER = re.compile(r"^(\S+Z) (\S+) slurm-ft-launch: (.*)$")
_CTLD = re.compile(r"^\[([0-9T:.-]+)\] (.*)$")


@dataclass(frozen=True)
class Moment:
    t: float
    what: str


def _utc(text: str) -> float:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _local(text: str) -> float:
    """slurmctld's time stamps are the host's local time, without a zone."""
    return datetime.datetime.fromisoformat(text).timestamp()


def launcher_lines(logs: Path) -> list[tuple[float, str, str]]:
    out = []
    for path in sorted(logs.glob("launcher-*.log")):
        for line in path.read_text(errors="replace").splitlines():
            m = _LAUNCHER.match(line)
            if m:
                out.append((_utc(m.group(1)), m.group(2), m.group(3)))
    return sorted(out)


def slurmctld_lines(path: Path, job_id: str) -> list[tuple[float, str]]:
    if not path.exists():
        return []
    mark = re.compile(rf"JobId={re.escape(job_id)}\b")
    out = []
    for line in path.read_text(errors="replace").splitlines():
        m = _CTLD.match(line)
        if m and mark.search(m.group(2)):
            out.append((_local(m.group(1)), m.group(2)))
    return out


def slurmd_ends(log_dir: Path, job_id: str) -> list[tuple[float, str]]:
    """When each node's slurmd saw the job's step or batch script end (its ``done with
    job`` lines): the launchers' processes are gone only then."""
    out = []
    mark = re.compile(rf"\[{re.escape(job_id)}\.(\d+|batch)\] done with job")
    for path in sorted(log_dir.glob("slurmd-*.log")):
        node = path.stem.removeprefix("slurmd-")
        for line in path.read_text(errors="replace").splitlines():
            m = _CTLD.match(line)
            found = mark.search(m.group(2)) if m else None
            if m and found:
                what = "the batch script" if found.group(1) == "batch" else "the launchers' step"
                out.append((_local(m.group(1)), f"slurmd: {what} ended on {node}"))
    return sorted(out)


def steps(path: Path) -> list[float]:
    out = []
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            out.append(float(json.loads(line)["t"]))
        except (ValueError, KeyError):
            continue
    return sorted(out)


def _first(lines: Iterable[tuple[float, str, str]], after: float, *needles: str) -> Moment | None:
    for t, node, said in lines:
        if t >= after and all(n in said for n in needles):
            return Moment(t, f"{node}: {said[:90]}")
    return None


def _last_of_run(
    lines: list[tuple[float, str, str]], after: float, before: float, needle: str
) -> Moment | None:
    found = [(t, node, said) for t, node, said in lines if after <= t < before and needle in said]
    if not found:
        return None
    t, node, said = found[-1]
    return Moment(t, f"{node}: {said[:90]} (the last)")


def start_up(
    lines: list[tuple[float, str, str]], step_times: list[float], began: float, label: str
) -> list[Moment]:
    """An attempt's start: Slurm's start, the launchers' first line, node 0's store, the
    last peer's join, the workers' spawn, the first step."""
    out = [Moment(began, label)]
    first = _first(lines, began, "")
    listening = _first(lines, began, "rendezvous store listening")
    if first:
        out.append(Moment(first.t, f"first launcher line ({first.what.split(':')[0]})"))
    if listening:
        out.append(listening)
        spawn = _first(lines, listening.t, "starting", "worker(s)")
        until = spawn.t if spawn else listening.t + 120
        joins = [t for t, _, s in lines if began <= t <= until and "joined rendezvous store" in s]
        if joins:
            out.append(Moment(max(joins), f"the last peer joined ({len(joins)} joined)"))
        if spawn:
            out.append(spawn)
    step = next((t for t in step_times if t > began), None)
    if step is not None:
        out.append(Moment(step, "the trainer's first step"))
    return out


def preemption(
    lines: list[tuple[float, str, str]],
    ctld: list[tuple[float, str]],
    ends: list[tuple[float, str]],
    step_times: list[float],
    sent: float,
) -> list[Moment]:
    out = [Moment(sent, "USR1 sent to the batch script (the drill's record)")]
    got = _first(lines, sent, "received SIGUSR1")
    if got:
        out.append(got)
    requeued = next((t for t, said in ctld if t >= sent and said.startswith("Requeuing")), None)
    end = requeued if requeued is not None else sent + 120
    for needle in ("stopped", "persisted", "exiting"):
        m = _last_of_run(lines, sent, end, needle)
        if m:
            out.append(m)
    step_ends = [(t, what) for t, what in ends if sent <= t <= end and "step" in what]
    if step_ends:
        out.append(Moment(step_ends[-1][0], f"{step_ends[-1][1]} (the last of {len(step_ends)})"))
    out += [Moment(t, what) for t, what in ends if sent <= t <= end and "batch" in what][-1:]
    if requeued is not None:
        out.append(Moment(requeued, "slurmctld: Requeuing (the batch script's scontrol requeue)"))
        again = next((t for t, s in ctld if t > requeued and ("Allocate" in s or "Started" in s)), None)
        if again is not None:
            out += start_up(lines, step_times, again, "slurmctld: allocated again (BeginTime passed)")
    return sorted(out, key=lambda m: m.t)


def show(title: str, moments: list[Moment]) -> None:
    print(f"\n{title}")
    if not moments:
        return
    t0 = prev = moments[0].t
    for m in moments:
        print(f"  {m.t - t0:7.2f} s  (+{m.t - prev:5.2f})  {m.what}")
        prev = m.t


def main(argv: list[str] | None = None) -> int:
    p = cmdline.Parser(prog="python -m benchmarks.goodput_phases", description=__doc__.split("\n\n")[0])
    p.add_argument("run", type=Path, help="the goodput run's --out")
    p.add_argument("--slurmctld-log", type=Path, default=SLURMCTLD_LOG)
    a = p.parse_args(argv)
    if not (a.run / "results.json").is_file():
        p.error(f"{a.run}: no results.json here (give a goodput run's --out)")
    work = a.run / "slurm-ft"
    results = json.loads((a.run / "results.json").read_text())
    run = next(r for r in results["runs"] if r["tool"] == "slurm-ft")
    job = str(run["job_id"])
    lines = launcher_lines(work / "logs")
    since = float(run["job_start"]) - 5.0  # a cluster brought up afresh numbers its jobs from 1 again
    ctld = [(t, said) for t, said in slurmctld_lines(a.slurmctld_log, job) if t >= since]
    step_times = steps(work / "steps.jsonl")
    ends = [(t, what) for t, what in slurmd_ends(a.slurmctld_log.parent, job) if t >= since]
    started = next((t for t, said in ctld if "Started" in said or "Allocate" in said), None)
    if started is not None:
        first = start_up(lines, step_times, started, "slurmctld: started")
    else:  # StartTime has whole seconds only
        first = start_up(lines, step_times, float(run["job_start"]), "Slurm StartTime")
    show(f"job {job}: the first start", first)
    for f in run["faults"]:
        if f["fault"] == "preempt" and f["injected"]:
            show(
                f"preemption at {f['time'] - run['first_worker']:.0f} s",
                preemption(lines, ctld, ends, step_times, f["time"]),
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
