"""What the README tells a new user (issue 32): one row per option, migrants pointed at features."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def launcher_options_rows() -> list[str]:
    text = README.read_text()
    section = text.split("## `slurm-ft-launch`", 1)[1].split("### Options", 1)[1]
    section = section.split("\n### ", 1)[0]
    return [ln for ln in section.splitlines() if ln.startswith("| `-")]


def test_each_launcher_option_has_one_row_with_one_meaning() -> None:
    flags = Counter()
    for row in launcher_options_rows():
        first = row.split(" | ", 1)[0]
        for flag in re.findall(r"`(-{1,2}[a-z][\w-]*)", first):
            flags[flag] += 1
    assert flags["--tee"] == 1
    assert [f for f, n in flags.items() if n > 1] == []


def test_compat_rows_point_migrants_at_what_exists() -> None:
    rows = README.read_text().splitlines()
    segment = next(ln for ln in rows if ln.startswith("| ft_launcher | `--ft-segment` |"))
    assert "| alias | `--segment`" in segment and "not supported" not in segment
    strict = next(ln for ln in rows if ln.startswith("| ft_launcher | `--ft-numa-bind-strict` |"))
    assert "`--numa-binding node`" in strict and "no NUMA binding" not in strict


def test_the_ledger_outcomes_the_readme_shows_are_ones_the_launcher_writes() -> None:
    from slurm_ft.progress.ledger import INTERRUPTED
    from slurm_ft.records import CycleOutcome

    written = {o.value for o in CycleOutcome} | {INTERRUPTED}
    text = README.read_text()
    shown = {
        m for ln in text.splitlines() if '"cycle"' in ln for m in re.findall(r'"outcome": "([\w-]+)"', ln)
    }
    shown |= set(re.findall(r"^│(?:[^│]*│){5} ([\w-]+) +│", text, re.M))
    assert shown and shown <= written, shown - written
