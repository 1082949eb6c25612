"""slurm-ft-launch --help (issue 32, item 6): right, readable, grouped, every default named,
and the docs' option table rendered from the same data, so the two cannot disagree."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from slurm_ft import config
from slurm_ft.cli import launchdocs, launchoptions, launchtable

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "slurm-ft-launch.md"
CYCLE_LOGS = Path(__file__).resolve().parents[2] / "docs" / "guides" / "cycle-logs.md"


def helps() -> dict[str, str]:
    """First long option -> its help as --help prints it (one line, argparse's own words)."""
    parser = launchoptions.build_parser()
    out = {}
    for action in parser._actions:
        longs = [o for o in action.option_strings if o.startswith("--")]
        if longs and action.help:
            out[longs[0]] = " ".join((action.help % {"default": action.default}).split())
    return out


def plain(value: object) -> str:
    """A settings default as a person reads it, worked out here independently."""
    if value is None or value == []:
        return "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list):
        return ",".join(map(str, value))
    return str(value)


def test_every_option_has_help():
    parser = launchoptions.build_parser()
    missing = [a.option_strings for a in parser._actions if a.option_strings and not a.help]
    assert missing == []


def test_every_setting_option_names_its_true_default():
    defaults = config.as_dict(config.Settings())
    text = helps()
    for group in launchtable.GROUPS:
        for option in group.options:
            if option.setting is None or option.default is not None:
                continue
            name = next(f for f in option.flags if f.startswith("--"))
            value: object = defaults
            for part in option.setting.split("."):
                value = value[part]  # type: ignore[index]
            shown = plain(value)
            if option.setting.startswith("hang.") and value == 0:
                shown = "0: off"
            assert text[name].endswith(f"(default {shown})"), (name, text[name])
    assert text["--monitor-interval"].endswith("(default 5)")  # it said 2


@pytest.mark.parametrize("name", ["--health-checks", "--nic-mode", "--rank-heartbeat-timeout", "--rdzv-port"])
def test_defaults_the_issue_found_missing_are_named(name):
    assert "(default " in helps()[name]


def test_help_is_grouped_like_the_docs():
    text = launchoptions.build_parser().format_help()
    for group in launchtable.GROUPS:
        assert f"\n{group.title}:\n" in text, group.title
    assert "--nproc_per_node" not in text  # torchrun's spellings work but are not listed twice


def test_docs_option_table_is_rendered_from_the_options():
    page = REFERENCE.read_text()
    assert launchdocs.render_into(page) == page, "run: python scripts/lib/render_docs.py"
    table = page.split(launchdocs.START, 1)[1].split(launchdocs.END, 1)[0]
    text = helps()
    for row in table.strip().splitlines()[2:]:
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", row.strip().strip("|"))]
        name = re.match(r"`(--[\w-]+)", cells[0]).group(1)  # type: ignore[union-attr]
        default = cells[2].replace("`", "").replace(" (off)", ": off")
        if default:
            assert text[name].endswith(f"(default {default})"), (name, default, text[name])


def test_the_logs_section_table_agrees_with_the_options_on_defaults():
    """The per-cycle logs guide's table of launcher options is prose, but its defaults are
    the options' own."""
    from slurm_ft.cli.launchtable import GROUPS, setting_defaults, shown_default

    page = CYCLE_LOGS.read_text()
    section = page.split("\n## Options\n", 1)[1].split("\n## ", 1)[0]
    options = {f: o for g in GROUPS for o in g.options for f in o.flags}
    defaults = setting_defaults()
    checked = 0
    for row in section.splitlines():
        m = re.match(r"\| `(--[\w-]+)[^`]*` \| [^|]* \| ([^|]+) \|", row)
        if m and m.group(1) in options:
            shown = shown_default(options[m.group(1)], defaults)
            assert shown is not None and m.group(2).strip() in (shown, shown.split(",")[0]), row
            checked += 1
    assert checked >= 5
