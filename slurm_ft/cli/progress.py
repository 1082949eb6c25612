"""Front end of slurm-ft-progress (stub until its issue lands)."""

from __future__ import annotations

import sys

from slurm_ft.exitcodes import ExitCode


def main(argv: list[str] | None = None) -> int:
    print("slurm-ft-progress: not implemented yet", file=sys.stderr)
    return int(ExitCode.BAD_INPUT)


if __name__ == "__main__":
    sys.exit(main())
