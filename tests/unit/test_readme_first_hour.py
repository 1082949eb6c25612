"""What the docs tell a new user (issue 32): one row per option, migrants pointed at features."""

from __future__ import annotations

import re
from collections import Counter

from tests.support import docs


def launcher_options_rows() -> list[str]:
    section = docs.section(docs.page("reference/slurm-ft-launch.md"), "## Options")
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
    rows = docs.page("reference/compat.md").splitlines()
    segment = next(ln for ln in rows if ln.startswith("| ft_launcher | `--ft-segment` |"))
    assert "| alias | `--segment`" in segment and "not supported" not in segment
    strict = next(ln for ln in rows if ln.startswith("| ft_launcher | `--ft-numa-bind-strict` |"))
    assert "`--numa-binding node`" in strict and "no NUMA binding" not in strict


def test_the_ledger_outcomes_the_docs_show_are_ones_the_launcher_writes() -> None:
    from slurm_ft.progress.ledger import INTERRUPTED
    from slurm_ft.records import CycleOutcome

    written = {o.value for o in CycleOutcome} | {INTERRUPTED}
    text = docs.all_text()
    shown = {
        m for ln in text.splitlines() if '"cycle"' in ln for m in re.findall(r'"outcome": "([\w-]+)"', ln)
    }
    shown |= set(re.findall(r"^│(?:[^│]*│){5} ([\w-]+) +│", text, re.M))
    assert shown and shown <= written, shown - written
