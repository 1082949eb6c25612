"""A command as the reference shows it, beside what its parser holds."""

from __future__ import annotations

from typing import NamedTuple


class Command(NamedTuple):
    prog: str
    module: str  # slurm_ft.cli.<module>.build_parser()
    summary: str  # the man page's NAME line
    synopsis: tuple[str, ...]  # usage lines, without the program name
    exit_codes: tuple[tuple[str, str], ...]  # (code, meaning in markdown)
