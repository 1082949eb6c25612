"""When the replica pusher says replicas fall behind the trainer (pure policy)."""

from __future__ import annotations

from slurm_ft.launch.snapshots.peer import Pushed
from slurm_ft.launch.snapshots.replicas import LAPPED, behind


def test_replicas_fall_behind_when_one_lands_two_snapshots_late_or_three_copies_in_a_row_are_lapped() -> None:
    assert not behind(Pushed.KEPT, None, 7, 0)  # the key's first replica
    assert not behind(Pushed.KEPT, 6, 7, 0)  # the next snapshot: on time
    assert not behind(Pushed.KEPT, 5, 7, 0)  # one snapshot skipped: a copy took just over an interval
    assert behind(Pushed.KEPT, 4, 7, 0)  # two skipped: a lost node would have found no common step
    assert [behind(Pushed.SUPERSEDED, 6, 9, n) for n in range(1, LAPPED + 2)] == [False, False, True, False]
