"""Render every generated part of the docs and the man pages from the code, never by hand.

Usage: python scripts/lib/render_docs.py           rewrite what is stale
       python scripts/lib/render_docs.py --check   exit 1 naming each stale file

Generated: each command's synopsis, option table and exit codes on its reference page
(from its parser, slurm_ft.cli.refdocs), slurm-ft-launch's option table
(slurm_ft.cli.launchdocs), the torchrun / ft_launcher table (slurm_ft.compat.table), the
settings table (slurm_ft.config), and man/man1/*.1 (slurm_ft.cli.manpage). The benchmark
tables come from measurements instead: `python -m benchmarks --readme`.
tests/docs/test_generated.py renders the same and compares, so nothing can drift.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO))

from slurm_ft import config  # noqa: E402
from slurm_ft.cli import launchdocs, manpage, refdocs  # noqa: E402
from slurm_ft.compat import table  # noqa: E402

REFERENCE = REPO / "docs" / "reference"
MAN = REPO / "man" / "man1"
SETTINGS_START = "<!-- SETTINGS:START -->"
SETTINGS_END = "<!-- SETTINGS:END -->"


def settings_table() -> str:
    rows = ["| YAML key | environment variable | default |", "|---|---|---|"]
    for key, env, default in config.describe_keys():
        rows.append(f"| `{key}` | `{env}` | `{default}` |")
    return "\n".join(rows) + "\n"


def render_settings(text: str) -> str:
    return refdocs.replace_between(text, SETTINGS_START, SETTINGS_END, settings_table())


def _reference(prog: str) -> Callable[[str], str]:
    def render(text: str) -> str:
        text = refdocs.render_page(text, prog)
        return launchdocs.render_into(text) if prog == "slurm-ft-launch" else text

    return render


# Each file with generated blocks -> how to render them into its current text.
PAGES: dict[Path, Callable[[str], str]] = {
    **{REFERENCE / f"{c.prog}.md": _reference(c.prog) for c in refdocs.COMMANDS},
    REFERENCE / "compat.md": table.render_into,
    REFERENCE / "settings.md": render_settings,
}


def expected() -> dict[Path, str]:
    """Every generated file's text as the code says it should read."""
    out = {path: render(path.read_text()) for path, render in PAGES.items()}
    out.update({MAN / f"{c.prog}.1": manpage.render(c.prog) for c in refdocs.COMMANDS})
    return out


def stale() -> list[Path]:
    return [p for p, text in expected().items() if not p.exists() or p.read_text() != text]


def main(argv: list[str]) -> int:
    try:
        wanted = expected()
    except ValueError as exc:
        print(f"render_docs: {exc}", file=sys.stderr)
        return 2
    old = [p for p, text in wanted.items() if not p.exists() or p.read_text() != text]
    if "--check" in argv:
        for path in old:
            print(f"stale: {path.relative_to(REPO)} (run: python scripts/lib/render_docs.py)")
        return 1 if old else 0
    for path in old:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(wanted[path])
        print(f"rewrote {path.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
