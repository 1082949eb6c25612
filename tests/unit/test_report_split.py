"""The honest goodput: cycles cut by timed readings, and what each injected fault cost."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from slurm_ft import records
from slurm_ft.progress.ledger import Ledger
from slurm_ft.records import DrillRecord, ProgressReading
from slurm_ft.report import jsonout, load, svg
from slurm_ft.report.analysis import analyse
from slurm_ft.report.load import StateFiles
from slurm_ft.statedir import StateDir
from tests.support import minischema
from tests.unit.test_report_analysis import RUN_A, T0, cycle, entry, failure, outcome


def reading(t: float, step: int) -> ProgressReading:
    return ProgressReading(T0 + t, step, f"{step}:step_{step}")


def drill(t: float, fault: str = "kill", rank: int | None = 3, injected: bool = True) -> DrillRecord:
    return DrillRecord(
        fault=fault, time=T0 + t, node="node1", node_rank=1, rank=rank, cycle=None, signal="SIGKILL",
        pids=[123], job_id="42", injected=injected, problem=None if injected else "pid 1 ended",
    )  # fmt: skip


def job(readings: list[ProgressReading], drills: list[DrillRecord] = ()) -> StateFiles:
    """One attempt at 1 step/s with a checkpoint every 10 steps. Cycle 0 (0 -> 40 s) starts
    up in 5 s, checkpoints at steps 10, 20, 30 (15, 25, 35 s) and fails at 38 s (the
    fault at 37.5 s); cycle 1 (41 -> 80 s) resumes from 30, starts up in 5 s, checkpoints
    40, 50, 60 (56, 66, 76 s) and succeeds at 80 s with a final save of step 64."""
    ledger = Ledger(
        cycles=[entry(0, 0, 0, 30, 0, 40), entry(1, 0, 30, 64, 41, 80)],
        source="checkpoint-dir:/ckpt",
        seen_source="checkpoint-dir:/ckpt",
    )
    return StateFiles(
        path=Path("/state"),
        cycles=[
            cycle(0, RUN_A, 0, 0, 40, "failed", failure(38)),
            cycle(1, RUN_A, 0, 41, 80, "succeeded"),
        ],
        outcomes=[outcome(RUN_A, 0, 81, 0, "finished")],
        ledger=ledger,
        readings=readings,
        drills=list(drills),
    )


READINGS = [
    reading(15, 10),
    reading(25, 20),
    reading(35, 30),
    reading(56, 40),
    reading(66, 50),
    reading(76, 60),
]
READINGS.append(reading(80, 64))


def test_a_checkpoint_saved_as_the_workers_are_stopped_does_not_set_the_pace() -> None:
    """Step 32 saved at 39.5 s, after the failure at 38 s (a rank stopped, say, by a hang and
    saving as it is ended): not a step of training, and 2 steps in 4.5 s would slow the pace
    and back-date the start-ups away."""
    late_save = reading(39.5, 32)
    r = analyse(job([*READINGS[:3], late_save, *READINGS[3:]], [drill(37.5)]))
    assert r.totals.seconds_per_step == pytest.approx(1.0)
    c0, c1 = r.cycles
    assert c0.split is not None and c1.split is not None
    assert (c0.split.startup_s, c1.split.startup_s) == pytest.approx((5, 5))


def test_a_save_on_the_way_out_read_after_a_warm_restart_stays_with_its_cycle() -> None:
    """Cycle 1 starts 0.05 s after cycle 0 ends (a warm restart); step 32, saved as cycle
    0's workers were stopped, is read 0.5 s into cycle 1. It is cycle 0's: in cycle 1 it
    would be the first of its steps, 8 steps before step 40 with 15 s between them, its
    start-up counted as training in the pace."""
    ledger = Ledger(
        cycles=[entry(0, 0, 0, 30, 0, 40), entry(1, 0, 30, 64, 40.05, 80)],
        source="checkpoint-dir:/ckpt",
        seen_source="checkpoint-dir:/ckpt",
    )
    files = StateFiles(
        path=Path("/state"),
        cycles=[cycle(0, RUN_A, 0, 0, 40, "failed", failure(38)), cycle(1, RUN_A, 0, 40.05, 80, "succeeded")],
        outcomes=[outcome(RUN_A, 0, 81, 0, "finished")],
        ledger=ledger,
        readings=[*READINGS[:3], reading(40.55, 32), *READINGS[3:]],
        drills=[],
    )
    r = analyse(files)
    assert r.totals.seconds_per_step == pytest.approx(1.0)
    c1 = r.cycles[1]
    assert c1.split is not None
    # step 40 read at 56 s, 10 steps after the ledger's 30 at 1 s each: start-up to 46 s
    assert c1.split.startup_s == pytest.approx(46 - 40.05)


def test_a_cycle_is_cut_into_start_up_kept_lost_and_stopping() -> None:
    r = analyse(job(READINGS, [drill(37.5)]))
    c0, c1 = r.cycles
    assert c0.split is not None and c1.split is not None
    # the pace: 10 steps every 10 s; the first checkpoint (step 10 at 15 s) back-dates to 5 s
    assert r.totals.seconds_per_step == pytest.approx(1.0)
    assert (c0.split.startup_s, c0.split.kept_s, c0.split.lost_s, c0.split.stopping_s) == pytest.approx(
        (5, 30, 3, 2)
    )
    assert (c1.split.startup_s, c1.split.kept_s, c1.split.lost_s, c1.split.stopping_s) == pytest.approx(
        (5, 34, 0, 0)
    )
    t = r.totals
    assert (t.startup_s, t.progress_s, t.lost_work_s, t.stopping_s) == pytest.approx((10, 64, 3, 2))
    assert t.restart_overhead_s == pytest.approx(1 + 1)  # 40 -> 41, and 80 -> 81 (wind-down)
    assert t.parts_s == pytest.approx(t.wall_clock_s) == pytest.approx(81)
    # kept training = steps kept x the step time: 64 steps at 1 s each, over 81 s
    assert t.goodput_ratio == pytest.approx(64 / 81)
    assert t.split_cycles == 2


def test_a_fault_costs_detection_stop_restart_start_up_and_the_work_since_the_checkpoint() -> None:
    r = analyse(job(READINGS, [drill(37.5)]))
    [f] = r.faults
    assert (f.cycle, f.next_cycle, f.absorbed) == (0, 1, False)
    assert f.detection_s == pytest.approx(0.5)  # 37.5 -> the failure at 38
    assert f.stop_s == pytest.approx(2)  # 38 -> 40
    assert f.restart_s == pytest.approx(1)  # 40 -> 41
    assert f.startup_s == pytest.approx(5)  # 41 -> 46
    assert f.lost_work_s == pytest.approx(2.5)  # the checkpoint at 35 -> 37.5
    assert f.cost_s == pytest.approx(11)
    assert f.where == "rank 3 on node1"


def test_a_second_fault_in_a_failed_cycle_is_absorbed_and_a_failed_injection_is_listed() -> None:
    r = analyse(job(READINGS, [drill(37.5), drill(37.9, "hang"), drill(60, injected=False)]))
    first, second, missed = r.faults
    assert first.cost_s == pytest.approx(11)
    assert second.absorbed and second.cost_s is None
    assert not missed.injected and missed.cost_s is None and missed.cycle is None


def test_a_fault_that_ended_nothing_has_no_cost() -> None:
    r = analyse(job(READINGS, [drill(60)]))  # hit cycle 1, which then succeeded
    [f] = r.faults
    assert f.cycle == 1 and f.cost_s is None and not f.absorbed


def test_without_readings_the_old_buckets_stay_and_a_note_says_goodput_is_an_upper_bound() -> None:
    r = analyse(job([]))
    assert all(c.split is None for c in r.cycles)
    assert r.totals.progress_s == pytest.approx(38 + 39)
    assert r.totals.startup_s == 0 and r.totals.split_cycles == 0
    assert any("goodput is an upper bound" in n for n in r.notes)
    assert not any("upper bound" in n for n in analyse(job(READINGS)).notes)


def test_a_cycle_whose_readings_never_moved_keeps_the_ledgers_bucket() -> None:
    stuck = [reading(15, 10), reading(25, 20), reading(35, 30)]  # nothing moved in cycle 1
    files = job(stuck)
    assert files.ledger is not None
    files.ledger.cycles[1] = entry(1, 0, 30, 30, 41, 80)
    files.cycles[1] = cycle(1, RUN_A, 0, 41, 80, "failed", failure(79))
    r = analyse(files)
    assert r.cycles[0].split is not None and r.cycles[1].split is None
    assert r.totals.no_progress_s == pytest.approx(79 - 41)


def test_without_a_known_pace_the_start_up_is_not_back_dated() -> None:
    r = analyse(job([reading(15, 10), reading(56, 40)]))  # one reading a cycle: no pace
    assert r.totals.seconds_per_step is None
    assert r.cycles[0].split is not None and r.cycles[0].split.startup_s == pytest.approx(15)


def test_the_json_the_text_and_the_picture_show_the_split_and_the_faults(tmp_path: Path) -> None:
    r = analyse(job(READINGS, [drill(37.5), drill(60, injected=False)]))
    doc = jsonout.to_json(r)
    schema = json.loads(jsonout.schema_path().read_text())
    assert minischema.errors(doc, schema) == []
    assert doc["faults"][0]["cost_s"] == pytest.approx(11)
    assert doc["cycles"][0]["split"]["lost_work_s"] == pytest.approx(3)
    assert doc["totals"]["startup_s"] == pytest.approx(10)
    picture = svg.render(r)
    assert picture.count('class="part"') == 4 + 2  # cycle 0: all four parts; cycle 1: start-up, kept
    assert 'data-part="lost"' in picture and picture.count('class="fault"') == 2
    from io import StringIO

    from slurm_ft.report import text

    out = StringIO()
    text.render(r, out, width=200)
    shown = out.getvalue()
    assert "injected faults" in shown and "11.0 s" in shown and "not injected: pid 1 ended" in shown
    assert "start-up (until the first progress)" in shown and "training lost" in shown


def test_the_loader_reads_drills_and_readings_and_names_what_it_skips(tmp_path: Path) -> None:
    state = StateDir(tmp_path)
    records.write(state.cycle_record(0), cycle(0, RUN_A, 0, 0, 40, "failed", failure(38)))
    records.write(state.drills_dir / "1-kill.json", drill(37.5))
    (state.drills_dir / "2-kill.json").write_text('{"fault": "kill"}')
    for r in READINGS[:3]:
        records.append_reading(state.progress_readings, r)
    with state.progress_readings.open("a") as fh:
        fh.write('{"time": 1, "st')  # a torn last line
    files = load.load(state)
    assert [d.time for d in files.drills] == [T0 + 37.5]
    assert files.readings == READINGS[:3]
    problems = {Path(u.path).name: u.problem for u in files.unreadable}
    assert problems["2-kill.json"] == "missing 'time'"
    assert problems["readings.jsonl"] == "1 line(s) are not readings: skipped"


def test_with_readings_a_cycle_whose_ledger_reading_failed_and_nothing_moved_made_no_progress() -> None:
    files = job(READINGS, [drill(37.5), drill(45)])
    assert files.ledger is not None
    # cycle 1 (41 -> 80) is hit again at 45, before any checkpoint; its ledger end reading failed
    files.ledger.cycles[1] = entry(1, 0, 30, None, 41, 50)
    files.cycles[1] = cycle(1, RUN_A, 0, 41, 50, "failed", failure(46))
    files.cycles.append(cycle(2, RUN_A, 0, 51, 80, "succeeded"))
    files.ledger.cycles.append(entry(2, 0, 30, 64, 51, 80))
    r = analyse(files)
    assert r.cycles[1].progressed is False and r.cycles[1].split is None
    assert r.totals.goodput_ratio is not None  # no cycle's progress is unknown any more
    first, second = r.faults
    assert first.startup_s == pytest.approx(45 - 41)  # the next cycle's start-up, cut by the next fault
    assert first.cost_s == pytest.approx(0.5 + 2 + 1 + 4 + 2.5)
    assert second.lost_work_s == 0.0 and second.next_cycle == 2


def test_a_failed_cycle_without_a_checkpoint_starts_up_as_the_hang_judge_saw_and_loses_the_rest() -> None:
    """#44's run without snapshots, the crash at 787 s: the next cycle trained 118 s and made
    no checkpoint before a lost node ended it. The report charged those 118 s to the crash
    as start-up (start-up 118.5 s; lost work 0 for the lost node), the trainer's step log
    to the lost node as lost work (down 1.4 s after the crash). The cycle's start-up ends
    where the hang judge saw the workers' signs of life settle (the ledger's); the rest is
    lost, charged to the fault that ended it."""
    stuck = [reading(15, 10), reading(25, 20), reading(35, 30)]  # nothing moved in cycle 1
    files = job(stuck, [drill(37.5), drill(78.5)])
    assert files.ledger is not None
    files.ledger.cycles[1] = dataclasses.replace(entry(1, 0, 30, 30, 41, 80), startup=5.0)
    files.cycles[1] = cycle(1, RUN_A, 0, 41, 80, "failed", failure(79))
    r = analyse(files)
    c1 = r.cycles[1]
    assert c1.split is not None
    assert (c1.split.startup_s, c1.split.kept_s, c1.split.lost_s, c1.split.stopping_s) == pytest.approx(
        (5, 0, 33, 1)
    )
    first, second = r.faults
    assert (first.startup_s, second.lost_work_s) == pytest.approx((5, 78.5 - 46))
    assert r.totals.no_progress_s == 0 and r.totals.parts_s == pytest.approx(r.totals.wall_clock_s)
