"""Start-up of `slurm-ft-report` on a long history: 5 attempts of 10 cycles, with a ledger.

The report is a command people run by hand and scripts run after every job, so it must
answer at once: from exec to exit under 150 ms for --json and --svg (the target of
`slurm-ft-progress check`), under 300 ms for the terminal summary (rich's tables). The
interpreter's own start-up is measured in the same run and printed beside it; the
difference is what the command itself costs.

    python -m benchmarks.report_startup [--runs N]
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

from benchmarks import cmdline, proc
from benchmarks.stats import summarize

TARGETS_S = {
    "slurm-ft-report (terminal)": 0.300,
    "slurm-ft-report --json": 0.150,
    "slurm-ft-report --svg": 0.150,
}
ATTEMPTS, CYCLES_PER_ATTEMPT = 5, 10


def _env() -> dict[str, str]:
    """No Slurm job; bytecode caching on (an installed package has its .pyc files)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def make_history(path: Path) -> None:
    """A job that failed every few cycles and was requeued four times."""
    from slurm_ft import atomicfile
    from slurm_ft.progress import CycleEntry, Ledger, save_ledger
    from slurm_ft.records import CycleOutcome, CycleRecord, Failure, FailureKind, OutcomeRecord
    from slurm_ft.statedir import StateDir

    state = StateDir(path)
    t, iteration, n = 1_700_000_000.0, 0, 0
    entries = []
    for attempt in range(ATTEMPTS):
        run_uuid = f"{attempt:032x}"
        for restart in range(CYCLES_PER_ATTEMPT):
            last = restart == CYCLES_PER_ATTEMPT - 1
            failure = Failure(
                kind=FailureKind.WORKER,
                node=f"node{n % 7}",
                node_rank=n % 7,
                time=t + 55,
                rank=n % 16,
                exit_code=1,
                message="RuntimeError: CUDA error: an illegal memory access",
            )
            rec = CycleRecord(
                cycle=n,
                attempt=attempt,
                restart=restart,
                run_id=f"42-a{attempt}",
                run_uuid=run_uuid,
                start_time=t,
                nodes=[f"node{k}" for k in range(8)],
                world_size=64,
                nproc_per_node=8,
                master_addr="node0",
                master_port=29500,
                outcome=CycleOutcome.SIGNALLED if last else CycleOutcome.FAILED,
                end_time=t + 60,
                first_failure=None if last else failure.to_json(),
            )
            atomicfile.write_json(state.cycle_record(n), rec.to_json())
            entries.append(CycleEntry(n, attempt, iteration, iteration + 40, "failed", True, t, t + 60))
            iteration += 40
            n += 1
            t += 65
        outcome = OutcomeRecord(
            exit_code=143,
            outcome="signal-SIGTERM",
            reason="node0 received SIGTERM",
            first_failure=None,
            cycles=CYCLES_PER_ATTEMPT,
            first_cycle=n - CYCLES_PER_ATTEMPT,
            last_cycle=n - 1,
            attempt=attempt,
            job_id="42",
            run_id=f"42-a{attempt}",
            run_uuid=run_uuid,
            time=t,
        )
        atomicfile.write_json(state.attempt_outcome(attempt, run_uuid), outcome.to_json())
        t += 600  # queue wait
    save_ledger(
        state.ledger,
        Ledger(
            cycles=entries, source="iteration-file:/ckpt/latest", seen_source="iteration-file:/ckpt/latest"
        ),
    )


def main() -> int:
    parser = cmdline.Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=cmdline.positive_int, default=10)
    args = parser.parse_args()
    cli = str(Path(sys.executable).parent / "slurm-ft-report")
    env = _env()
    with tempfile.TemporaryDirectory(prefix="slurm-ft-bench-report-") as tmp:
        work = Path(tmp)
        make_history(work / "state")
        state = str(work / "state")
        commands = {
            "slurm-ft-report (terminal)": [cli, "--state-dir", state],
            "slurm-ft-report --json": [cli, "--state-dir", state, "--json"],
            "slurm-ft-report --svg": [cli, "--state-dir", state, "--svg", str(work / "r.svg"), "--json"],
            "python -c pass": [sys.executable, "-c", "pass"],
        }
        check = proc.run(commands["slurm-ft-report --json"], env, timeout=60)
        if check.returncode != 0:
            raise SystemExit("slurm-ft-report failed on the benchmark's state dir")
        samples: dict[str, list[float]] = {name: [] for name in commands}
        for i in range(args.runs + 2):  # two warm-up rounds: page cache, .pyc files
            for name, cmd in commands.items():
                done = proc.run(cmd, env, timeout=60)
                if done.returncode != 0:
                    raise SystemExit(f"{name} exited {done.returncode}")
                if i >= 2:
                    samples[name].append(done.wall_s)
    base = summarize(samples.pop("python -c pass")).median
    ok = True
    result = {}
    for name, values in samples.items():
        s = summarize(values)
        target = TARGETS_S[name]
        ok &= s.median < target
        result[name] = s.median
        print(
            f"{name:28s} median {s.median * 1e3:4.0f} ms (min {s.min * 1e3:.0f}, max {s.max * 1e3:.0f}); "
            f"own cost {max(0.0, s.median - base) * 1e3:.0f} ms; target < {target * 1e3:.0f} ms"
        )
    print(f"{'python -c pass':28s} median {base * 1e3:4.0f} ms")
    verdict = "meets" if ok else "MISSES"
    print(f"history: {ATTEMPTS} attempts x {CYCLES_PER_ATTEMPT} cycles: {verdict} the targets")
    print(json.dumps({k: round(v, 4) for k, v in result.items()}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
