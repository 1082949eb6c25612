"""The docs' generated parts and the man pages say what the code says, and every option of
every command has its line in the reference (a new option without one fails here)."""

from __future__ import annotations

import argparse
import json
import re

import pytest

from slurm_ft import config
from slurm_ft.cli import launchdocs, refdocs
from tests.support import docs

PROGS = [c.prog for c in refdocs.COMMANDS]
HELP = {"-h", "--help", "--version"}


def test_every_generated_part_matches_the_code() -> None:
    stale = [str(p.relative_to(docs.REPO)) for p in docs.render_docs().stale()]
    assert stale == [], f"stale: {stale}; run: python scripts/lib/render_docs.py"


def test_every_command_has_its_reference_page_and_man_page() -> None:
    for prog in PROGS:
        assert (docs.REFERENCE / f"{prog}.md").is_file(), prog
        assert (docs.REPO / "man" / "man1" / f"{prog}.1").is_file(), prog
    mkdocs = (docs.REPO / "mkdocs.yml").read_text()
    for prog in PROGS:
        assert f"reference/{prog}.md" in mkdocs, prog


@pytest.mark.parametrize("prog", PROGS)
def test_every_option_has_a_line_in_the_reference(prog: str) -> None:
    """A table row naming the option in code, on the command's page (for the launcher, or in
    the torchrun / ft_launcher table: torchrun's spellings and refused flags are there)."""
    text = docs.page(f"reference/{prog}.md")
    if prog == "slurm-ft-launch":
        text += docs.page("reference/compat.md")
    rows = [ln for ln in text.splitlines() if ln.startswith("| ")]
    missing = []
    for option in sorted(refdocs.option_strings(prog) - HELP):
        code = re.compile(rf"`[^`]*(?<![\w-]){re.escape(option)}(?![\w-])[^`]*`")
        if not any(code.search(row) for row in rows):
            missing.append(option)
    assert missing == [], f"{prog}: options without a line in docs/reference: {missing}"


def test_every_launcher_option_of_its_own_has_a_meaning() -> None:
    from slurm_ft.cli.launchtable import GROUPS, TORCHRUN, WHAT_TO_RUN

    own = [o for g in GROUPS if g not in (TORCHRUN, WHAT_TO_RUN) for o in g.options]
    missing = [
        o.flags[0] for o in own if next(f for f in o.flags if f.startswith("--")) not in launchdocs.MEANING
    ]
    assert missing == [], f"add a meaning to slurm_ft/cli/launchdocs.py MEANING: {missing}"


def test_meanings_name_options_that_exist() -> None:
    from slurm_ft.cli.launchtable import GROUPS

    launch = {f for g in GROUPS for o in g.options for f in o.flags}
    assert set(launchdocs.MEANING) <= launch, set(launchdocs.MEANING) - launch
    for prog, details in refdocs.DETAILS.items():
        names = {e.name for s in refdocs.sections(prog) for e in s.entries}
        assert set(details) <= names, (prog, set(details) - names)


def test_settings_named_for_options_are_what_the_commands_set() -> None:
    from slurm_ft.cli import healthcheck, progress

    for prog, mapping in refdocs.SETTINGS.items():
        assert set(mapping.values()) <= set(config.KEY_TYPES), prog
        assert set(mapping) <= refdocs.option_strings(prog), prog
    # the health check: the settings its code reads for each option
    expected = {}
    for action in healthcheck.build_parser()._actions:
        longs = [o for o in action.option_strings if o.startswith("--")]
        if longs and action.dest in healthcheck._SETTING_OPTIONS:
            expected[longs[0]] = healthcheck._SETTING_OPTIONS[action.dest]
    assert refdocs.SETTINGS["slurm-ft-healthcheck"] == expected
    # the progress command: each option given alone lands in the setting named
    parser = progress.build_parser()
    for option, key in refdocs.SETTINGS["slurm-ft-progress"].items():
        value = "1" if "cycles" in option or "iterations" in option else "x"
        ns: argparse.Namespace = parser.parse_args(["status", option, value])
        assert set(progress._cli_settings(ns)) == {key}, option


def test_benchmark_tables_are_rendered_from_the_results() -> None:
    from benchmarks.render_readme import END, HEADLINE_END, HEADLINE_START, START, headline
    from benchmarks.table import markdown

    doc = json.loads((docs.REPO / "benchmarks" / "results" / "latest.json").read_text())
    page = docs.page("benchmarks.md")
    assert page.split(START, 1)[1].split(END, 1)[0] == "\n" + markdown(doc), (
        "run: python -m benchmarks --readme"
    )
    readme = docs.README.read_text()
    shown = readme.split(HEADLINE_START, 1)[1].split(HEADLINE_END, 1)[0]
    assert shown == "\n" + headline(doc), "run: python -m benchmarks --readme"
    assert shown.count("\n| ") >= 6
