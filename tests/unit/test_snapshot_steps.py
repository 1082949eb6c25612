"""Which steps the framework callbacks snapshot."""

from __future__ import annotations

import pytest

from slurm_ft.integrations.steps import Every


def test_every_nth_step_once_even_when_the_hook_runs_again_for_it() -> None:
    every = Every(3)
    assert [s for s in (1, 2, 3, 3, 4, 5, 6, 6, 7, 9) if every.due(s)] == [3, 6, 9]


def test_a_resumed_step_is_not_snapshot_again() -> None:
    every = Every(1)
    every.resumed(41)
    assert [every.due(s) for s in (41, 42)] == [False, True]


def test_a_period_below_one_step_is_refused() -> None:
    with pytest.raises(ValueError, match="give a positive number of steps"):
        Every(0)
