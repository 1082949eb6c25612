"""The goodput benchmark's arithmetic on made-up step logs (the Slurm runs are by hand)."""

from __future__ import annotations

import pytest

from benchmarks import goodput_timeline as tl
from benchmarks.goodput_timeline import Step


def run_with_one_kill() -> list[Step]:
    """1 step/s. Steps 1-12 at t=1..12; a kill at 12.5; the restart resumes from the
    checkpoint at step 10 and does steps 11-20 at t=20..29."""
    first = [Step(float(t), t) for t in range(1, 13)]
    second = [Step(19.0 + k, 10 + k) for k in range(1, 11)]
    return first + second


def test_the_pace_is_the_median_gap_between_consecutive_steps() -> None:
    assert tl.step_time(run_with_one_kill()) == pytest.approx(1.0)
    assert tl.step_time([]) is None


def test_a_run_is_kept_lost_and_down_and_the_parts_fill_the_wall_clock() -> None:
    steps = run_with_one_kill()
    segs = tl.segments(steps, kept=20, pace=1.0, start=0.0, end=30.0)
    assert [(s.kind, s.t0, s.t1) for s in segs] == [
        ("kept", 0.0, 10.0),
        ("lost", 10.0, 12.0),  # steps 11 and 12, done again after the restart
        ("down", 12.0, 19.0),
        ("kept", 19.0, 29.0),
        ("down", 29.0, 30.0),
    ]
    assert sum(s.t1 - s.t0 for s in segs) == pytest.approx(30.0)


def test_a_fault_costs_its_down_time_and_the_steps_done_again() -> None:
    [cost] = tl.fault_costs([("kill", "rank 1 on node2", 12.5, True)], run_with_one_kill(), 1.0)
    assert cost.down_s == pytest.approx(19.0 - 12.5)  # until step 11 began again
    assert cost.lost_steps == 2 and cost.lost_s == pytest.approx(2.0)
    assert cost.cost_s == pytest.approx(8.5)
    [missed] = tl.fault_costs([("kill", "x", 5.0, False)], run_with_one_kill(), 1.0)
    assert missed.cost_s is None


def test_a_restart_quicker_than_a_pause_is_found_by_the_step_going_back() -> None:
    """A warm restart: killed at 12.5, steps 11-28 again from t=13.8 (no pause of 3 steps),
    then a second fault at 30.9 with a pause: each fault ends at its own restart."""
    steps = [Step(float(t), t) for t in range(1, 13)]
    steps += [Step(12.8 + k, 10 + k) for k in range(1, 19)]  # steps 11-28 at t=13.8..30.8
    steps += [Step(40.0 + k, 25 + k) for k in range(1, 4)]
    first, second = tl.fault_costs([("kill", "r0", 12.5, True), ("kill", "r1", 30.9, True)], steps, 1.0)
    assert first.down_s == pytest.approx(13.8 - 1.0 - 12.5)
    assert first.lost_steps == 2
    assert second.down_s == pytest.approx(41.0 - 1.0 - 30.9) and second.lost_steps == 3


def test_a_warm_restart_at_the_step_reached_is_found_by_the_new_process() -> None:
    """With snapshots a restart resumes at the step reached, after a pause shorter than
    three steps: only the pid that logs the steps says so. Without it, the kill's down
    ran on to the next long pause (the 131.7 s of a 240 s check)."""
    steps = [Step(float(t), t, pid=100) for t in range(1, 13)]  # steps 1-12, t=1..12
    steps += [Step(13.5 + k, 12 + k, pid=200) for k in range(1, 11)]  # 13-22 from t=14.5
    steps += [Step(40.0 + k, 22 + k, pid=300) for k in range(1, 4)]  # a long pause later
    [cost] = tl.fault_costs([("kill", "r0", 12.2, True)], steps, 1.0)
    assert cost.down_s == pytest.approx(14.5 - 1.0 - 12.2) and cost.lost_steps == 0
    old_log = [Step(s.t, s.step) for s in steps]  # no pids: only the long pause is seen
    [blind] = tl.fault_costs([("kill", "r0", 12.2, True)], old_log, 1.0)
    assert blind.down_s == pytest.approx(41.0 - 1.0 - 12.2)


def test_a_fault_during_another_faults_recovery_is_said_to_share_its_restart() -> None:
    """A kill that lands while a requeue is still starting: both end at the same first
    step, so the kill's down is the rest of the preemption's, not a cost of its own."""
    steps = [Step(float(t), t, pid=1) for t in range(1, 11)]
    steps += [Step(40.0 + k, 10 + k, pid=2) for k in range(1, 4)]
    pre, kill = tl.fault_costs([("preempt", "batch", 10.5, True), ("kill", "r0", 30.0, True)], steps, 1.0)
    assert pre.during is None and pre.down_s == pytest.approx(41.0 - 1.0 - 10.5)
    assert kill.during == "preempt" and kill.down_s == pytest.approx(41.0 - 1.0 - 30.0)


def test_the_picture_has_one_row_per_run_and_a_mark_per_fault() -> None:
    steps = run_with_one_kill()
    segs = tl.segments(steps, 20, 1.0, 0.0, 30.0)
    faults = tl.fault_costs([("kill", "rank 1", 12.5, True)], steps, 1.0)
    picture = tl.svg([("slurm-ft", segs, faults, 0.0, 30.0), ("torchrun", segs, [], 0.0, 30.0)])
    assert picture.count('data-run="slurm-ft"') == 5 and picture.count('data-run="torchrun"') == 5
    assert picture.count('class="fault"') == 1 and "cost 8.5 s" in picture


def test_the_realistic_schedule_checkpoints_every_120_s_at_the_trainers_pace() -> None:
    import argparse

    from benchmarks.goodput import apply_realistic

    a = argparse.Namespace(step_time=0.2, ckpt_every=25, every=90.0, duration=300.0)  # as parsed
    apply_realistic(a, ["--schedule", "realistic", "--every=90"])
    assert (a.ckpt_every, a.every, a.duration) == (600, 90.0, 1200.0)  # --every was given


def test_steps_kept_by_a_persisted_snapshot_are_what_every_rank_persisted_before_the_deadline(
    tmp_path,
) -> None:
    from benchmarks.goodput import _persisted_step
    from slurm_ft import records
    from slurm_ft.statedir import StateDir

    state = StateDir(tmp_path)
    for node, step in (("node1", 1137), ("node2", 1136)):
        rec = records.SnapshotsPersisted(
            attempt=0,
            node=node,
            node_rank=0,
            run_uuid="u",
            time=0.0,
            why="signal SIGTERM",
            persisted=[f"the node's replicated copy (rank 0) step {step} -> /p/replicated.pt"],
        )
        records.write(state.snapshots_persisted(0, node), rec)
    steps = [Step(float(t), t) for t in range(1, 1200)]
    assert _persisted_step(state, steps, deadline=2000.0) == 1137
    assert _persisted_step(state, steps, deadline=1100.0) == 1100  # no further than reached by then
