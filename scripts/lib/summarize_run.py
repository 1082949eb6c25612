"""Tell a person what happened in a slurm-ft run, in a few lines (used by scripts/demo).

Reads only what a user could read: the state dir records and the per-cycle logs.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path


def load(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def cycle_number(path: Path) -> int:
    m = re.search(r"(\d+)", path.stem)
    return int(m.group(1)) if m else -1


def error_line(log: Path, rank: int | None) -> str | None:
    """The last exception line the failing rank printed (its traceback's last line)."""
    if rank is None or not log.exists():
        return None
    pattern = re.compile(rf"^\s*{rank}: (\w*(Error|Exception)\b.*)$")
    found = None
    for line in log.read_text(errors="replace").splitlines():
        m = pattern.match(line)
        if m:
            found = m.group(1)
    return found


def resumed_from(log: Path) -> int | None:
    """The iteration the example trainer says it resumed from in this cycle, if any."""
    if not log.exists():
        return None
    m = re.search(r"^\s*0: rank 0: resumed from iteration (\d+)$", log.read_text(errors="replace"), re.M)
    return int(m.group(1)) if m else None


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--state-dir", type=Path, required=True)
    p.add_argument("--log-dir", type=Path, required=True)
    p.add_argument("--job")
    p.add_argument("--batch-output", type=Path)
    p.add_argument("--exit-code", type=int)
    a = p.parse_args()

    cycles = sorted((a.state_dir / "cycles").glob("cycle*.json"), key=cycle_number)
    outcome = load(a.state_dir / "outcome.json")
    records = [r for r in (load(c) for c in cycles) if r]
    if not records:
        print(f"no cycle records in {a.state_dir}: the launchers did not start")
        if a.batch_output and a.batch_output.exists():
            print(a.batch_output.read_text()[-3000:])
        return 1
    first = records[0]
    where = f"job {a.job}" if a.job else "standalone run"
    print(
        f"\n== slurm-ft: {where}: {len(first['nodes'])} node(s) ({','.join(first['nodes'])}) "
        f"x {first['nproc_per_node']} workers, world size {first['world_size']}"
    )
    for rec in records:
        log = a.log_dir / f"train_cycle{rec['cycle']}.log"
        failure = rec.get("first_failure")
        if failure and failure.get("kind") == "worker":
            how = (
                f"killed by {failure['signal']}"
                if failure.get("signal")
                else f"exit code {failure['exit_code']}"
            )
            print(
                f"cycle {rec['cycle']}: {rec['outcome']}: rank {failure['rank']} on {failure['node']} "
                f"failed ({how}); every worker on every node was stopped and restarted"
            )
            line = failure.get("message") or error_line(log, failure.get("rank"))
            if line:
                print(f"         traceback: {line}")
        elif failure:
            print(f"cycle {rec['cycle']}: {rec['outcome']}: {failure.get('detail') or failure.get('kind')}")
        else:
            print(f"cycle {rec['cycle']}: {rec['outcome']}: all {rec['world_size']} ranks exited 0")
        resumed = resumed_from(log)
        if resumed is not None:
            print(f"         training resumed from its checkpoint at iteration {resumed}")
    logs = sorted(a.log_dir.glob("train_cycle*.log"), key=cycle_number)
    for i, log in enumerate(logs):
        lines = log.read_text(errors="replace").splitlines()
        ranks = sorted({int(m.group(1)) for ln in lines if (m := re.match(r"^\s*(\d+): ", ln))})
        label = "logs:   " if i == 0 else "        "
        print(f"{label} {log}  ({len(lines)} lines from ranks {','.join(map(str, ranks))})")
    if outcome:
        print(f"outcome: {outcome['outcome']} (exit {outcome['exit_code']}): {outcome['reason']}")
    elif a.exit_code is not None:
        print(f"outcome: launcher exit {a.exit_code}")
    print("\nsee more:")
    if logs:
        print(f"  less {logs[0]}  # every rank's lines, prefixed like srun -l")
    print(f"  slurm-ft-progress status --state-dir {a.state_dir}")
    print(f"  ls {a.state_dir}  # cycle records, outcome, ledger")
    launcher_logs = sorted(a.log_dir.glob("launcher*.log"))
    if launcher_logs:
        print(f"  less {launcher_logs[0]}  # the launchers' own events")
    if a.batch_output:
        print(f"  less {a.batch_output}")
    ok = outcome is not None and outcome.get("exit_code") == 0
    return 0 if ok or (outcome is None and a.exit_code == 0) else 1


if __name__ == "__main__":
    sys.exit(main())
