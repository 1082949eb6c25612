"""The README is part of the product: the parts generated from code must match the code."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from slurm_ft import config

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()


def _render_settings_module():
    spec = importlib.util.spec_from_file_location("render_settings", REPO / "scripts/lib/render_settings.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_settings_table_is_generated_from_config():
    render = _render_settings_module()
    assert render.render(README) == README, "run: python scripts/lib/render_settings.py README.md"
    for key, env, _ in config.describe_keys():
        assert f"`{key}`" in README and f"`{env}`" in README


def test_quick_start_is_exactly_the_two_commands():
    section = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    block = section.split("```bash", 1)[1].split("```", 1)[0]
    commands = [ln.split("#", 1)[0].strip() for ln in block.splitlines() if ln.split("#", 1)[0].strip()]
    assert commands == ["scripts/demo", "scripts/test"]
    assert (REPO / ".ci" / "run").read_text().strip().endswith("exec scripts/test")


def test_every_exit_code_of_the_contract_is_documented():
    section = README.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    for code in ("0", "1", "2", "93", "94", "128+N"):
        assert re.search(rf"^\| {re.escape(code)} \|", section, re.M), code


def test_every_launcher_option_is_documented():
    from slurm_ft.cli.launchoptions import build_parser

    for action in build_parser()._actions:
        for opt in action.option_strings:
            if opt.startswith("--") and "_" not in opt and opt != "--help":
                assert re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", README), opt
