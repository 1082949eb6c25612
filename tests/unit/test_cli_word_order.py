"""Options anywhere among a command's words: ``slurm-ft-drill 48 --state-dir DIR kill --rank 1``
is read as people type it, in every command that takes positional words (issue #46)."""

from __future__ import annotations

import pytest

from slurm_ft.cli import drill, logs, progress, report
from slurm_ft.cli.usage import UsageError


@pytest.mark.parametrize(
    "argv",
    [
        ["48", "--state-dir", "/s", "kill", "--rank", "1"],
        ["--state-dir", "/s", "48", "kill", "--rank", "1"],
        ["--rank", "1", "48", "kill", "--state-dir", "/s"],
        ["48", "kill", "--rank", "1", "--state-dir", "/s"],
    ],
)
def test_the_drill_takes_its_options_between_the_job_and_the_fault(argv: list[str]) -> None:
    args = drill.build_parser().parse_args(argv)
    assert (args.words, args.state_dir, args.rank) == (["48", "kill"], "/s", 1)


def test_report_and_logs_take_the_job_after_their_options() -> None:
    args = report.build_parser().parse_args(["--json", "4242", "--summary"])
    assert (args.job, args.json, args.summary) == ("4242", True, True)
    args = logs.build_parser().parse_args(["--cycle", "3", "4242", "--rank", "0-3"])
    assert (args.job, args.cycle, args.rank) == ("4242", 3, "0-3")


@pytest.mark.parametrize(
    "argv",
    [
        ["--state-dir", "/s", "status", "--json"],
        ["status", "--state-dir", "/s", "--json"],
        ["status", "--json", "--state-dir", "/s"],
    ],
)
def test_progress_takes_the_common_options_before_or_after_its_subcommand(argv: list[str]) -> None:
    args = progress.build_parser().parse_args(argv)
    assert (args.command, args.state_dir, args.json) == ("status", "/s", True)


def test_progress_without_an_option_leaves_it_unset_and_a_stray_word_is_still_refused() -> None:
    args = progress.build_parser().parse_args(["check"])
    assert args.state_dir is None and args.max_no_progress_cycles is None
    with pytest.raises(UsageError, match="unrecognized arguments: extra"):
        report.build_parser().parse_args(["4242", "extra"])
