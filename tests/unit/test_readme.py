"""The README and the docs are part of the product: the parts generated from code must
match the code, and the facts the tests pin must be on the page that now holds them."""

from __future__ import annotations

import re

from slurm_ft import config
from tests.support import docs

README = docs.README.read_text()


def test_settings_table_is_generated_from_config():
    render = docs.render_docs()
    settings = docs.page("reference/settings.md")
    assert render.render_settings(settings) == settings, "run: python scripts/lib/render_docs.py"
    for key, env, _ in config.describe_keys():
        assert f"`{key}`" in settings and f"`{env}`" in settings


def test_quick_start_is_exactly_the_two_commands():
    section = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    block = section.split("```bash", 1)[1].split("```", 1)[0]
    commands = [ln.split("#", 1)[0].strip() for ln in block.splitlines() if ln.split("#", 1)[0].strip()]
    assert commands == ["scripts/demo", "scripts/test"]
    assert (docs.REPO / ".ci" / "run").read_text().strip().endswith("exec scripts/test")


def test_every_exit_code_of_the_contract_is_documented():
    page = docs.page("reference/exit-codes.md")
    for code in ("0", "1", "2", "93", "94", "128+N"):
        assert re.search(rf"^\| {re.escape(code)} \|", page, re.M), code


def test_every_launcher_option_is_documented():
    from slurm_ft.cli.launchoptions import build_parser

    reference = docs.page("reference/slurm-ft-launch.md") + docs.page("reference/compat.md")
    for action in build_parser()._actions:
        for opt in action.option_strings:
            if opt.startswith("--") and "_" not in opt and opt != "--help":
                assert re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", reference), opt


def test_the_readme_links_into_the_docs():
    """The landing page points at pages that exist (the site build checks the pages' own links)."""
    targets = re.findall(r"\]\((docs/[^)#]+)(?:#[^)]*)?\)", README)
    assert len(targets) >= 10
    for target in targets:
        assert (docs.REPO / target).is_file(), target
