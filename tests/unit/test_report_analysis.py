"""The report's accounting as data: every second in exactly one bucket, causes, nodes, work lost."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurm_ft.progress.ledger import CycleEntry, Ledger, StopEntry
from slurm_ft.records import CycleOutcome, CycleRecord, Failure, FailureKind, OutcomeRecord
from slurm_ft.report import causes, jsonout, load, svg
from slurm_ft.report.analysis import analyse
from slurm_ft.report.load import StateFiles, UnhealthyRecord
from slurm_ft.statedir import StateDir
from tests.support import minischema

T0 = 1_700_000_000.0
RUN_A, RUN_B = "a" * 32, "b" * 32


def failure(t: float, node: str = "node1", rank: int = 3, kind: str = "worker", **kw) -> dict:
    f = Failure(kind=FailureKind(kind), node=node, node_rank=1, time=T0 + t, rank=rank, exit_code=1, **kw)
    return f.to_json()


def cycle(
    n: int, run: str, attempt: int, start: float, end: float | None, outcome: str, fail=None
) -> CycleRecord:
    return CycleRecord(
        cycle=n,
        attempt=attempt,
        restart=0,
        run_id=f"42-a{attempt}",
        run_uuid=run,
        start_time=T0 + start,
        nodes=["node0", "node1"],
        world_size=4,
        nproc_per_node=2,
        master_addr="node0",
        master_port=1,
        outcome=CycleOutcome(outcome),
        end_time=None if end is None else T0 + end,
        first_failure=fail,
    )


def outcome(run: str, attempt: int, t: float, code: int, word: str, unhealthy=()) -> OutcomeRecord:
    return OutcomeRecord(
        exit_code=code,
        outcome=word,
        reason=word,
        first_failure=None,
        cycles=0,
        first_cycle=None,
        last_cycle=None,
        attempt=attempt,
        job_id="42",
        run_id=f"42-a{attempt}",
        run_uuid=run,
        unhealthy_nodes=list(unhealthy),
        time=T0 + t,
    )


def entry(
    n: int, attempt: int, it0: int, it1: int | None, start: float, end: float | None = None
) -> CycleEntry:
    return CycleEntry(
        cycle=n,
        attempt=attempt,
        iteration_start=it0,
        iteration_end=it1,
        outcome="failed",
        progressed=it1 is not None and it1 > it0,
        started_at=T0 + start,
        ended_at=None if end is None else T0 + end,
    )


def two_attempts(ledger: Ledger | None = None) -> StateFiles:
    """Attempt 0: cycle 0 fails at 10 s (stopped by 11), cycle 1 starts at 12 and is
    preempted at 30 (its record ends at 31, the outcome at 32). Requeue: attempt 1's cycle 2
    runs 100 -> 150 and succeeds, outcome at 151."""
    return StateFiles(
        path=Path("/state"),
        cycles=[
            cycle(0, RUN_A, 0, 0, 11, "failed", failure(10, message="RuntimeError: boom")),
            cycle(1, RUN_A, 0, 12, 31, "signalled"),
            cycle(2, RUN_B, 1, 100, 150, "succeeded"),
        ],
        outcomes=[outcome(RUN_B, 1, 151, 0, "finished")],
        ledger=ledger,
    )


LEDGER = Ledger(
    cycles=[
        entry(0, 0, 0, 40, 0, 11),
        entry(1, 0, 40, 40, 12, 31),
        entry(2, 1, 40, 90, 100, 150),
    ],
    source="iteration-file:/ckpt/latest",
    seen_source="iteration-file:/ckpt/latest",
)


def test_every_second_goes_to_exactly_one_bucket():
    r = analyse(two_attempts(LEDGER))
    t = r.totals
    assert t.wall_clock_s == pytest.approx(151)
    assert t.progress_s == pytest.approx(10 + 50)  # cycle 0 until its failure, cycle 2
    assert t.no_progress_s == pytest.approx(19)  # cycle 1: 12 -> 31 (no failure recorded)
    assert t.unknown_progress_s == 0
    # Attempt 0's outcome record was not kept: it ends with its last cycle's record.
    assert t.restart_overhead_s == pytest.approx((12 - 10) + (151 - 150))
    assert t.between_attempts_s == pytest.approx(100 - 31)
    assert t.parts_s == pytest.approx(t.wall_clock_s)
    assert t.goodput_ratio == pytest.approx(60 / 151)
    assert (t.attempts, t.requeues, t.cycles, t.restarts, t.failures) == (2, 1, 3, 1, 2)
    assert t.work_lost_iterations == 0


def test_an_attempt_without_its_outcome_record_is_inferred_from_its_last_cycle():
    first, second = analyse(two_attempts(LEDGER)).attempts
    assert (first.outcome, first.exit_code, first.outcome_source) == ("signalled", None, "inferred")
    assert (first.start, first.end) == (T0, T0 + 31)
    assert (second.outcome, second.exit_code, second.outcome_source) == ("finished", 0, "record")


def test_without_a_progress_source_progress_is_unknown_not_zero():
    # The tracker records 0 -> 0 for every cycle when no iteration file is configured.
    blind = Ledger(cycles=[entry(n, 0, 0, 0, 0) for n in range(3)], source=None)
    r = analyse(two_attempts(blind))
    t = r.totals
    assert t.progress_s == 0 and t.no_progress_s == 0
    assert t.unknown_progress_s == pytest.approx(10 + 19 + 50)
    assert t.goodput_ratio is None
    assert t.goodput_upper_bound == pytest.approx(79 / 151)
    assert t.work_lost_iterations is None
    assert any("no progress source" in n for n in r.notes)


def test_work_lost_counts_checkpointed_iterations_the_next_cycle_did_not_resume_from():
    rolled_back = Ledger(
        cycles=[entry(0, 0, 0, 500, 0, 11), entry(1, 0, 400, 420, 12, 31), entry(2, 1, 420, 600, 100, 150)],
        source="iteration-file:/ckpt/latest",
        seen_source="iteration-file:/ckpt/latest",
    )
    assert analyse(two_attempts(rolled_back)).totals.work_lost_iterations == 100


def test_failure_time_outside_its_cycle_is_clamped():
    files = two_attempts(LEDGER)
    files.cycles[0].first_failure = failure(-50)  # another node's clock far behind
    t = analyse(files).totals
    assert t.parts_s == pytest.approx(t.wall_clock_s)
    assert t.progress_s == pytest.approx(11 + 50)  # no failure inside: the whole cycle


def test_causes_group_by_what_happened_and_nodes_that_failed_twice_are_named():
    files = StateFiles(
        path=Path("/s"),
        cycles=[
            cycle(0, RUN_A, 0, 0, 5, "failed", failure(4, message="RuntimeError: boom")),
            cycle(1, RUN_A, 0, 6, 9, "failed", failure(8, node="node2", message="RuntimeError: boom")),
            cycle(2, RUN_A, 0, 10, 15, "failed", failure(14, kind="lost-node", rank=None)),
            cycle(3, RUN_A, 0, 16, 20, "failed", failure(19, node="node2", kind="signal", detail="x")),
        ],
        outcomes=[
            outcome(RUN_A, 0, 21, 1, "restarts-exhausted"),
            outcome(RUN_B, 1, 90, 94, "unhealthy", unhealthy=["node3"]),
            outcome("c" * 32, 2, 95, 94, "unhealthy", unhealthy=["node3"]),
        ],
    )
    r = analyse(files)
    causes = {k.cause: (k.count, k.cycles, k.nodes) for k in r.top_causes}
    assert causes["worker exit code 1: RuntimeError: boom"] == (2, (0, 1), ("node1", "node2"))
    assert causes["lost launcher (heartbeat)"] == (1, (2,), ("node1",))
    # node1: a worker failure and a lost launcher; node3: unhealthy twice; node2's second
    # "failure" was a signal it received, which says nothing about the node.
    repeat = {n.node: (n.failures, n.cycles, n.unhealthy) for n in r.repeat_nodes}
    assert repeat == {"node1": (2, (0, 2), 0), "node3": (2, (), 2)}
    assert [a.cycles for a in r.attempts] == [(0, 1, 2, 3), (), ()]


def test_a_damaged_cycle_record_is_replaced_by_the_ledger_and_a_no_progress_stop_is_inferred():
    ledger = Ledger(
        cycles=[entry(0, 0, 7, 7, 0, 5), entry(1, 0, 7, 7, 6, 9)],
        source="iteration-file:/ckpt/latest",
        seen_source="iteration-file:/ckpt/latest",
        stopped=StopEntry(attempt=0, cycle=2, reason="no progress in the last 2 cycles", time=T0 + 10),
    )
    files = StateFiles(
        path=Path("/s"), cycles=[cycle(1, RUN_A, 0, 6, 9, "failed", failure(8))], ledger=ledger
    )
    r = analyse(files)
    assert [(c.cycle, c.source) for c in r.cycles] == [(0, "ledger"), (1, "record")]
    (attempt,) = r.attempts
    assert attempt.cycles == (0, 1)
    assert (attempt.outcome, attempt.reason) == ("no-progress", "no progress in the last 2 cycles")


def test_exception_line_prefers_the_record_message_then_a_traceback_ending_in_an_exception():
    tb = 'Traceback (most recent call last):\n  File "t.py", line 3\nValueError: bad shape\n'
    f = Failure(kind=FailureKind.WORKER, node="n", node_rank=0, time=0, traceback=tb)
    assert causes.exception_line(f) == "ValueError: bad shape"
    f2 = Failure(
        kind=FailureKind.WORKER, node="n", node_rank=0, time=0, message="KeyError: 'x'", traceback=tb
    )
    assert causes.exception_line(f2) == "KeyError: 'x'"
    f3 = Failure(
        kind=FailureKind.WORKER, node="n", node_rank=0, time=0, traceback='  File "t.py", line 3\n    foo()\n'
    )
    assert causes.exception_line(f3) is None


def test_loader_names_every_unusable_file_and_keeps_the_rest(tmp_path):
    state = StateDir(tmp_path)
    state.cycles_dir.mkdir()
    good = cycle(1, RUN_A, 0, 0, 5, "succeeded")
    (state.cycles_dir / "cycle1.json").write_text(json.dumps(good.to_json()))
    (state.cycles_dir / "cycle0.json").write_bytes(b"\xff\xfe")
    doc = good.to_json()
    doc["start_time"] = "yesterday"
    (state.cycles_dir / "cycle2.json").write_text(json.dumps(doc))
    (state.cycles_dir / "cycle3.json").write_text("[]")
    state.ledger.write_text('{"version": 1}')
    state.unhealthy_dir.mkdir()
    (state.unhealthy_dir / "node9.json").write_text(json.dumps({"reason": "nic: down", "time": T0}))
    files = load.load(state)
    assert [c.cycle for c in files.cycles] == [1]
    problems = {Path(u.path).name: u.problem for u in files.unreadable}
    assert problems == {
        "cycle0.json": "not UTF-8 text",
        "cycle2.json": "'start_time' has the wrong type ('yesterday')",
        "cycle3.json": "not a JSON object",
        "ledger.json": "ledger: missing 'cycles'",
    }
    assert files.unhealthy == [UnhealthyRecord("node9", "nic: down", T0)]


def test_kept_outcomes_of_every_attempt_are_read_once(tmp_path):
    state = StateDir(tmp_path)
    first, last = outcome(RUN_A, 0, 5, 143, "signal-SIGTERM"), outcome(RUN_B, 1, 9, 0, "finished")
    for rec in (first, last):
        path = state.attempt_outcome(rec.attempt, rec.run_uuid)
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps(rec.to_json()))
    state.outcome.write_text(json.dumps(last.to_json()))  # the latest is also outcome.json
    files = load.load(state)
    assert [o.run_uuid for o in files.outcomes] == [RUN_A, RUN_B]
    r = analyse(files)
    assert [(a.outcome, a.exit_code) for a in r.attempts] == [("signal-SIGTERM", 143), ("finished", 0)]


def test_json_of_a_synthetic_report_validates_against_the_shipped_schema():
    schema = json.loads(jsonout.schema_path().read_text())
    for files in (two_attempts(LEDGER), two_attempts(None), StateFiles(path=Path("/empty"))):
        assert minischema.errors(jsonout.to_json(analyse(files)), schema) == []
    assert minischema.errors({"report_version": 2}, schema)  # and the validator does reject


def test_the_printed_goodput_is_the_printed_progress_over_the_printed_wall_clock():
    """Issue 47: a 0.4 s run whose unrounded ratio the rounded durations contradicted."""
    files = StateFiles(
        path=Path("/state"),
        cycles=[cycle(0, RUN_A, 0, 0.0, 0.37444, "succeeded")],
        outcomes=[outcome(RUN_A, 0, 0.40006, 0, "finished")],
        ledger=Ledger(cycles=[entry(0, 0, 0, 40, 0.0, 0.37444)], source="iteration-file:/ckpt/latest"),
    )
    report = analyse(files)
    assert report.totals.goodput_ratio == pytest.approx(0.37444 / 0.40006)
    t = jsonout.published(report)["totals"]
    assert (t["progress_s"], t["wall_clock_s"]) == (0.374, 0.4)
    assert t["goodput_ratio"] == t["progress_s"] / t["wall_clock_s"] == t["goodput_upper_bound"]
    schema = json.loads(jsonout.schema_path().read_text())
    blind = jsonout.published(analyse(two_attempts(None)))
    assert blind["totals"]["goodput_ratio"] is None
    assert blind["totals"]["goodput_upper_bound"] == pytest.approx(
        blind["totals"]["unknown_progress_s"] / blind["totals"]["wall_clock_s"]
    )
    assert minischema.errors(jsonout.published(report), schema) == []


def test_a_long_queue_wait_is_drawn_broken_so_the_cycles_stay_visible():
    files = two_attempts(LEDGER)
    files.cycles[2] = cycle(2, RUN_B, 1, 36_000, 36_050, "succeeded")
    files.outcomes = [outcome(RUN_B, 1, 36_051, 0, "finished")]
    r = analyse(files)
    scale = svg.Scale(
        r.attempts[0].start, r.attempts[0].start + r.totals.wall_clock_s, [(T0 + 32, T0 + 36_000)]
    )
    assert scale.x(T0 + 36_000) - scale.x(T0 + 32) == pytest.approx(svg.COMPRESSED_W)
    assert scale.x(T0 + 36_051) == pytest.approx(svg.LEFT + svg.PLOT)
    xs = [scale.x(T0 + t) for t in (0, 10, 31, 32, 100, 36_000, 36_020, 36_051)]
    assert xs == sorted(xs)
    picture = svg.render(r)
    assert picture.count('class="cycle"') == 3 and "≈" in picture
    assert "10 h 00 min" in picture or "9 h 59 min" in picture  # the gap's true length


def test_a_cycle_without_an_end_is_counted_up_to_its_start_and_said_so():
    files = StateFiles(
        path=Path("/s"), cycles=[cycle(0, RUN_A, 0, 0, 5, "failed"), cycle(1, RUN_A, 0, 6, None, "running")]
    )
    r = analyse(files)
    assert r.totals.wall_clock_s == pytest.approx(6)
    assert r.totals.parts_s == pytest.approx(6)
    assert any(n.startswith("cycle 1 has no end") for n in r.notes)


def test_a_newer_launchers_failure_kind_is_kept_and_an_unknown_cycle_outcome_is_named(tmp_path):
    doc = cycle(0, RUN_A, 0, 0, 5, "failed").to_json()
    doc["first_failure"] = {
        "kind": "meteor-strike",
        "node": "node4",
        "node_rank": 4,
        "time": T0 + 4,
        "detail": "rank 7 silent",
    }
    state = StateDir(tmp_path)
    state.cycles_dir.mkdir()
    (state.cycles_dir / "cycle0.json").write_text(json.dumps(doc))
    (state.cycles_dir / "cycle1.json").write_text(json.dumps({**doc, "cycle": 1, "outcome": "teleported"}))
    files = load.load(state)
    assert [Path(u.path).name for u in files.unreadable] == ["cycle1.json"]
    assert "teleported" in files.unreadable[0].problem
    (c,) = analyse(files).cycles
    assert c.failure is not None
    assert (c.failure.kind, c.failure.node, c.failure.description) == (
        "meteor-strike",
        "node4",
        "node4 (node 4): rank 7 silent",
    )


def test_the_shipped_schema_names_every_failure_kind():
    schema = json.loads(jsonout.schema_path().read_text())
    described = schema["$defs"]["failure"]["properties"]["kind"]["description"]
    named = {word.strip(" ,") for word in described.split("(")[0].split()}
    assert named == {k.value for k in FailureKind}
