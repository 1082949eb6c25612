"""The open-files rule of node 0 (issue 45): what it needs, and the one line when it lacks it."""

from __future__ import annotations

from slurm_ft.launch.rendezvous.openfiles import OWN_FDS, Limits, needed, shortfall


def test_needed_counts_every_peer_connection_and_node0s_own() -> None:
    assert needed(1, 3) == 6 + OWN_FDS
    assert needed(2048, 3) == 2047 * 3 + 6 + OWN_FDS


def test_a_limit_that_holds_the_job_says_nothing() -> None:
    assert shortfall(2048, 3, Limits(1024, 65536, 65536)) is None
    assert shortfall(200, 3, Limits(1024, 1024, 1024)) is None


def test_a_limit_too_low_names_the_number_and_ulimit() -> None:
    line = shortfall(2048, 3, Limits(1024, 4096, 4096))
    need = needed(2048, 3)
    assert line is not None and "\n" not in line
    assert line.startswith(f"node 0 needs {need} open files for the store connections of 2048 launchers")
    assert "open-files limit is 4096" in line and f"ulimit -n {need}" in line


def test_raised_only_when_the_soft_limit_grew() -> None:
    assert Limits(1024, 65536, 65536).raised
    assert not Limits(65536, 65536, 65536).raised
