"""Rewrite the torchrun / ft_launcher compatibility table of the docs
(docs/reference/compat.md) from slurm_ft.compat.

Usage: python scripts/lib/render_compat.py [docs/reference/compat.md]
(scripts/lib/render_docs.py renders every generated part of the docs at once.)
A unit test renders the same block and compares, so the docs cannot drift from the code.
"""

from __future__ import annotations

import sys
from pathlib import Path

from slurm_ft.compat import table


def main() -> int:
    path = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/reference/compat.md")
    try:
        path.write_text(table.render_into(path.read_text()))
    except ValueError as exc:
        raise SystemExit(f"{path}: {exc}") from None
    return 0


if __name__ == "__main__":
    sys.exit(main())
