"""The setting-string parsers that config and the launcher share (pure), and the rule
that keeps them cheap: a leaf module of stdlib imports, loaded by every command."""

from __future__ import annotations

import ast
import signal
import sys
from pathlib import Path

import pytest

from slurm_ft import settingsyntax
from slurm_ft.settingsyntax import (
    Std,
    StdSpecError,
    check_applog_prefix,
    looks_like_spec,
    parse_port_range,
    parse_section_timeouts,
    parse_signals,
    parse_std,
)


@pytest.mark.parametrize(
    ("text", "rank0", "rank1", "rank5"),
    [
        ("3", Std.ALL, Std.ALL, Std.ALL),
        ("0", Std.NONE, Std.NONE, Std.NONE),
        ("0:1,1:2", Std.OUT, Std.ERR, Std.NONE),
    ],
)
def test_parse_std(text: str, rank0: Std, rank1: Std, rank5: Std) -> None:
    spec = parse_std(text)
    assert (spec.of(0), spec.of(1), spec.of(5)) == (rank0, rank1, rank5)


@pytest.mark.parametrize("text", ["4", "a", "0:4", "0:1,0:2", "1:", ""])
def test_parse_std_errors(text: str) -> None:
    with pytest.raises(StdSpecError):
        parse_std(text)


def test_a_spec_is_told_from_a_script_name() -> None:
    assert looks_like_spec("3") and looks_like_spec("0:1,2:3")
    assert not looks_like_spec("train.py") and not looks_like_spec("3.py")


def test_section_timeouts() -> None:
    assert parse_section_timeouts(["checkpointing=600", " step = 2.5"]) == {"checkpointing": 600, "step": 2.5}
    for bad in ("step", "=5", "step=0", "step=x"):
        with pytest.raises(ValueError, match="expected name=SECONDS with SECONDS > 0"):
            parse_section_timeouts([bad])


def test_signal_lists() -> None:
    assert parse_signals(["SIGTERM", "usr1", "12", " "]) == [signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2]
    with pytest.raises(ValueError, match="unknown signal 'SIGNOPE'"):
        parse_signals(["SIGNOPE"])
    with pytest.raises(ValueError, match="SIGKILL cannot be forwarded"):
        parse_signals(["KILL"])


@pytest.mark.parametrize(
    ("prefix", "message"),
    [
        ("job.log", "must be an absolute path, got 'job.log'"),
        ("", "is empty"),
        ("/abs/dir/", "names a directory"),
    ],
)
def test_applog_prefix_rule(prefix: str, message: str) -> None:
    check_applog_prefix("/abs/job.log")
    with pytest.raises(ValueError, match=message):
        check_applog_prefix(prefix)


def test_port_ranges() -> None:
    assert parse_port_range("20000-29999") == (20000, 29999)
    assert parse_port_range("1024-1024") == (1024, 1024)
    for bad in ("x-y", "20000"):
        with pytest.raises(ValueError, match=f"^expected LOW-HIGH, got '{bad}'$"):
            parse_port_range(bad)
    for bad in ("10-5", "1000-2000", "3000-2000", "60000-70000"):
        with pytest.raises(ValueError, match="within 1024-65535"):
            parse_port_range(bad)


def test_the_module_is_a_stdlib_leaf() -> None:
    """config imports it at every start: nothing of slurm_ft, nothing outside the stdlib."""
    tree = ast.parse(Path(settingsyntax.__file__).read_text())
    imported = {
        (node.module or "") if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
    }
    tops = {name.split(".")[0] for name in imported}
    assert tops <= sys.stdlib_module_names | {"__future__"}, tops
