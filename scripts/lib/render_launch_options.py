"""Rewrite the slurm-ft-launch option table of the docs (docs/reference/slurm-ft-launch.md)
from the option data, never by hand.

Usage: python scripts/lib/render_launch_options.py [docs/reference/slurm-ft-launch.md]
(scripts/lib/render_docs.py renders every generated part of the docs at once.)
A unit test renders the same block and compares, so the docs cannot drift from --help.
"""

from __future__ import annotations

import sys
from pathlib import Path

from slurm_ft.cli import launchdocs


def main() -> int:
    path = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/reference/slurm-ft-launch.md")
    try:
        path.write_text(launchdocs.render_into(path.read_text()))
    except ValueError as exc:
        raise SystemExit(f"{path}: {exc}") from None
    return 0


if __name__ == "__main__":
    sys.exit(main())
