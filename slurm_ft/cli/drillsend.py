"""The drill's helper on a job's node: check and signal recorded pids, one JSON line each.

Run by ``slurm-ft-drill`` as a step of the job (``srun --jobid J --overlap -w NODE python
-m slurm_ft.cli.drillsend --job J --signal N PID:TICKS[:g] ...``); not meant for people.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from slurm_ft.drill.send import parse_shot, send_here


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="slurm-ft-drill-send")
    p.add_argument("--job", required=True)
    p.add_argument("--signal", type=int, required=True)
    p.add_argument("shots", nargs="+")
    args = p.parse_args(argv)
    try:
        shots = [parse_shot(w) for w in args.shots]
    except ValueError as exc:
        print(f"slurm-ft-drill-send: error: {exc}", file=sys.stderr)
        return 2
    for sent in send_here(shots, args.signal, args.job):
        print(json.dumps({"pid": sent.pid, "ok": sent.ok, "problem": sent.problem}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
