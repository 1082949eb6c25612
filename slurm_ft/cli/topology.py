"""``python -m slurm_ft.cli.topology``: print what slurm-ft derives from the SLURM_*
environment of this task (a debugging aid: run it under ``srun`` to see every node's view)."""

from __future__ import annotations

import argparse
import json
import os
import sys

from slurm_ft import config
from slurm_ft.exitcodes import ExitCode
from slurm_ft.settingsyntax import parse_port_range
from slurm_ft.slurm import SlurmJob, describe, describe_full, format_line, rdzv_port


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m slurm_ft.cli.topology",
        description="Print the topology slurm-ft derives from the SLURM_* environment.",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--config", help="slurm-ft YAML config file (default: $SLURM_FT_CONFIG)")
    parser.add_argument("--rdzv-port", type=int, help="fixed rendezvous port (overrides the derived one)")
    args = parser.parse_args(argv)

    try:
        settings = config.load(
            os.environ,
            args.config,
            {"launch.rdzv_port": args.rdzv_port} if args.rdzv_port is not None else None,
        )
        job = SlurmJob.from_env(os.environ)
        port = rdzv_port(job, parse_port_range(settings.launch.rdzv_port_range), settings.launch.rdzv_port)
    except ValueError as exc:  # SlurmEnvError, ConfigError, a bad port range
        print(f"slurm-ft: {exc}", file=sys.stderr)
        return int(ExitCode.BAD_INPUT)
    if args.json:
        print(json.dumps(describe_full(job, port)))
    else:
        print(format_line(describe(job, port)))
    return int(ExitCode.SUCCESS)


if __name__ == "__main__":
    raise SystemExit(main())
