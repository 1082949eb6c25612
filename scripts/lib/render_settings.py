"""Rewrite the settings table of the docs (docs/reference/settings.md) from slurm_ft.config,
never by hand.

Usage: python scripts/lib/render_settings.py [docs/reference/settings.md]
(scripts/lib/render_docs.py renders every generated part of the docs at once.)
A unit test renders the same block and compares, so the docs cannot drift from the code.
"""

from __future__ import annotations

import sys
from pathlib import Path

from slurm_ft import config

START = "<!-- SETTINGS:START -->"
END = "<!-- SETTINGS:END -->"


def settings_table() -> str:
    rows = ["| YAML key | environment variable | default |", "|---|---|---|"]
    for key, env, default in config.describe_keys():
        rows.append(f"| `{key}` | `{env}` | `{default}` |")
    return "\n".join(rows) + "\n"


def render(text: str) -> str:
    start, end = text.find(START), text.find(END)
    if start < 0 or end < start:
        raise SystemExit(f"the markers {START} ... {END} are missing")
    return text[: start + len(START)] + "\n" + settings_table() + text[end:]


def main() -> int:
    path = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/reference/settings.md")
    path.write_text(render(path.read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
