"""The no-progress policy as data: iterations per cycle in, run/stop per cycle out."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from slurm_ft.config import ProgressSettings
from slurm_ft.progress import (
    INTERRUPTED,
    CycleEntry,
    Ledger,
    LedgerError,
    Reading,
    close_cycle,
    effective_policy,
    last_iteration,
    ledger_from_json,
    ledger_to_json,
    mark_stopped,
    open_cycle,
    provisional_view,
    reset_streak,
    revise_last,
    stop_reason,
    would_stop,
)

pytestmark = pytest.mark.timeout(30)

GARBAGE = "garbage"
FILE = "/ckpt/latest_checkpointed_iteration.txt"


def reading(value: int | str) -> Reading:
    if value == GARBAGE:
        return Reading(0, f"progress source iteration-file:{FILE}: it is empty; counting as no progress")
    assert isinstance(value, int)
    return Reading(value)


def settings(k: int = 2, m: int = 1, file: str | None = FILE) -> ProgressSettings:
    return ProgressSettings(
        checkpoint_iteration_file=file, max_no_progress_cycles=k, min_progress_iterations=m
    )


@dataclass(frozen=True)
class Case:
    name: str
    initial: int | str
    ends: list[int | str]  # the file's value at the end of each cycle (= start of the next)
    expected: str  # the decision before each cycle, r = run, s = stop; one more than ends when none stops
    k: int = 2
    m: int = 1


CASES = [
    Case("crash before the first checkpoint, K=2", 0, [0, 0, 0], "rrs"),
    Case("crash before the first checkpoint, K=1", 0, [0, 0], "rs", k=1),
    Case("crash before the first checkpoint, K=3", 0, [0, 0, 0, 0], "rrrs", k=3),
    Case("progress every cycle", 0, [100, 200, 300, 400, 500], "rrrrrr"),
    Case("progress then stuck", 0, [100, 100, 100, 100], "rrrs"),
    Case("alternating progress resets the streak", 0, [100, 100, 200, 200, 300, 300], "rrrrrrr"),
    Case("stuck after a resume from a checkpoint", 500, [500, 500], "rrs"),
    Case("a decrease counts as no progress", 100, [200, 150, 150], "rrrs"),
    Case("a decrease then progress resets", 100, [50, 60, 60, 60], "rrrrs"),
    Case("below min_progress_iterations", 0, [10, 20, 100], "rrs", m=50),
    Case("exactly min_progress_iterations is progress", 0, [50, 100, 150], "rrrr", m=50),
    Case("progress accumulated over cycles does not count", 0, [49, 98, 147], "rrs", m=50),
    Case("K=0 disables", 0, [0, 0, 0, 0, 0], "rrrrrr", k=0),
    Case("negative K disables", 0, [0, 0, 0, 0, 0], "rrrrrr", k=-1),
    Case("garbage at the end counts as no progress", 0, [GARBAGE, GARBAGE], "rrs"),
    Case("garbage then a valid end: progress against the last known", 0, [100, GARBAGE, 200, 200], "rrrrr"),
    Case("garbage at the start falls back to the last known iteration", GARBAGE, [0, 0], "rrs"),
    Case("one garbage end between progress is one strike", 0, [100, GARBAGE, 300, GARBAGE, 500], "rrrrrr"),
]


def simulate(case: Case) -> str:
    """Drive the pure functions the way node 0 does; the file is read once per boundary."""
    policy = settings(case.k, case.m)
    values = [case.initial, *case.ends]
    ledger = Ledger()
    decisions = ""
    for cycle in range(len(values)):
        reason = stop_reason(ledger, policy)
        decisions += "s" if reason else "r"
        if reason or cycle == len(case.ends):
            break
        ledger = open_cycle(ledger, cycle, 0, reading(values[cycle]), None, settings())
        ledger = close_cycle(ledger, reading(values[cycle + 1]), "worker-failed", policy, None)
    return decisions


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_policy_sequences(case: Case) -> None:
    assert simulate(case) == case.expected


def test_stop_reason_text_names_the_count_and_the_iteration() -> None:
    ledger = Ledger()
    for cycle in range(2):
        ledger = open_cycle(ledger, cycle, 0, reading(1200), None, settings())
        ledger = close_cycle(ledger, reading(1200), "worker-failed", settings(), None)
    assert stop_reason(ledger, settings()) == "no progress in the last 2 cycles (iteration stuck at 1200)"


def test_no_source_configured_judges_nothing() -> None:
    policy = settings(file=None)
    ledger = Ledger()
    for cycle in range(5):
        ledger = open_cycle(ledger, cycle, 0, reading(0), None, policy)
        ledger = close_cycle(ledger, reading(0), "worker-failed", policy, None)
    assert ledger.streak == 0
    assert [c.progressed for c in ledger.cycles] == [None] * 5
    assert stop_reason(ledger, policy) is None


@pytest.mark.parametrize(
    ("outcome", "end", "progressed"),
    [
        ("signal-SIGTERM", 0, False),
        ("signal-SIGTERM", 10, True),
        ("success", 10, True),
        ("success", 0, False),
        ("peer-lost", 10, True),
        ("unhealthy", 0, False),
    ],
)
def test_every_outcome_counts_by_the_same_rule(outcome: str, end: int, progressed: bool) -> None:
    ledger = open_cycle(Ledger(), 0, 0, reading(0), None, settings())
    ledger = close_cycle(ledger, reading(end), outcome, settings(), None)
    assert ledger.cycles[-1].progressed is progressed
    assert ledger.cycles[-1].outcome == outcome
    assert ledger.streak == (0 if progressed else 1)


def test_continuation_across_attempts_counts_in_total() -> None:
    """A crash at start-up on every attempt: one cycle per attempt, stopped at K in total."""
    policy = settings(k=3)
    ledger = Ledger()
    decisions = []
    for attempt, cycle in enumerate(range(4)):
        # Each attempt is a fresh launcher: the ledger goes through JSON between them.
        ledger = ledger_from_json(json.loads(json.dumps(ledger_to_json(ledger))))
        reason = stop_reason(ledger, policy)
        decisions.append(reason)
        if reason:
            ledger = mark_stopped(ledger, attempt, cycle, reason, None)
            break
        ledger = open_cycle(ledger, cycle, attempt, reading(0), None, settings())
        ledger = close_cycle(ledger, reading(0), "worker-failed", policy, None)
    assert decisions == [None, None, None, "no progress in the last 3 cycles (iteration stuck at 0)"]
    assert [c.attempt for c in ledger.cycles] == [0, 1, 2]
    assert ledger.stopped is not None and ledger.stopped.attempt == 3


def test_a_cycle_left_open_is_closed_as_interrupted() -> None:
    ledger = open_cycle(Ledger(), 4, 1, reading(300), 10.0, settings())
    assert ledger.open_cycle is not None
    view = provisional_view(ledger, settings(), reading(300))
    assert view.cycles[-1].outcome == INTERRUPTED
    assert view.streak == 1
    assert ledger.open_cycle is not None, "the view must not change the ledger it came from"
    view = provisional_view(ledger, settings(), reading(400))
    assert view.cycles[-1].progressed is True and view.streak == 0


def test_closing_a_cycle_that_was_never_opened_uses_the_last_known_iteration() -> None:
    ledger = open_cycle(Ledger(), 0, 0, reading(100), None, settings())
    ledger = close_cycle(ledger, reading(200), "worker-failed", settings(), None)
    ledger = close_cycle(ledger, reading(200), "worker-failed", settings(), None, cycle=1, attempt=0)
    assert [(c.cycle, c.iteration_start, c.iteration_end) for c in ledger.cycles] == [
        (0, 100, 200),
        (1, 200, 200),
    ]
    assert ledger.streak == 1


def test_reset_clears_streak_and_stop_and_keeps_history() -> None:
    ledger = Ledger()
    for cycle in range(2):
        ledger = open_cycle(ledger, cycle, 0, reading(7), None, settings())
        ledger = close_cycle(ledger, reading(7), "worker-failed", settings(), None)
    ledger = mark_stopped(ledger, 0, 2, "x", None)
    after = reset_streak(ledger, 123.0, note="fixed the data loader")
    assert (after.streak, after.stopped, len(after.cycles)) == (0, None, 2)
    assert after.resets[-1].streak_before == 2 and after.resets[-1].after_cycle == 1
    assert stop_reason(after, settings()) is None


def test_effective_policy_prefers_explicit_settings_over_the_recorded_ones() -> None:
    a = "iteration-file:/a/it.txt"
    recorded = Ledger(source=a, max_no_progress_cycles=5, min_progress_iterations=10)
    defaults = ProgressSettings()
    assert effective_policy(defaults, recorded, set()) == ProgressSettings(None, 5, 10, source=a)
    given = ProgressSettings("/b/it.txt", 3, 1)
    assert effective_policy(given, recorded, {"progress.max_no_progress_cycles"}) == ProgressSettings(
        None, 3, 10, source=a
    )
    # The source and its older spelling are one setting: either given explicitly wins.
    for key in ("progress.checkpoint_iteration_file", "progress.source"):
        assert effective_policy(given, recorded, {key}) == ProgressSettings("/b/it.txt", 5, 10)
    assert effective_policy(given, None, set()) == given


def test_last_iteration() -> None:
    assert last_iteration(Ledger()) is None
    ledger = Ledger(cycles=[CycleEntry(0, 0, 100, None, "worker-failed", False)])
    assert last_iteration(ledger) == 100
    ledger.cycles.append(CycleEntry(1, 0, 100, 250, "worker-failed", True))
    assert last_iteration(ledger) == 250


def test_ledger_json_round_trip() -> None:
    ledger = Ledger()
    ledger = open_cycle(ledger, 0, 0, reading(GARBAGE), 1.5, settings())
    ledger = close_cycle(ledger, reading(10), "signal-SIGTERM", settings(), 2.5)
    ledger = reset_streak(ledger, 3.0)
    ledger = mark_stopped(ledger, 1, 1, "why", 4.0)
    assert ledger_from_json(json.loads(json.dumps(ledger_to_json(ledger)))) == ledger


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ([], "expected a JSON object"),
        ({"cycles": [], "streak": 0}, "ledger: missing 'version'"),
        ({"version": 9, "cycles": [], "streak": 0}, "unsupported ledger version 9 (this slurm-ft reads 1)"),
        ({"version": 1, "cycles": {}, "streak": 0}, "ledger: 'cycles' has the wrong type ({})"),
        ({"version": 1, "cycles": [], "streak": -1}, "ledger: 'streak' is negative (-1)"),
        ({"version": 1, "cycles": [], "streak": True}, "ledger: 'streak' has the wrong type (True)"),
        ({"version": 1, "cycles": [7], "streak": 0}, "cycles[0]: expected an object"),
        (
            {"version": 1, "cycles": [{"cycle": 0, "attempt": 0}], "streak": 0},
            "cycles[0]: missing 'iteration_start'",
        ),
        (
            {"version": 1, "cycles": [{"cycle": 0, "attempt": 0, "iteration_start": "5"}], "streak": 0},
            "cycles[0]: 'iteration_start' has the wrong type ('5')",
        ),
    ],
)
def test_ledger_validation_names_what_is_wrong(doc: object, message: str) -> None:
    with pytest.raises(LedgerError) as info:
        ledger_from_json(doc)
    assert str(info.value) == message


ABSENT = Reading(0, present=False)


def test_a_source_that_never_existed_judges_nothing() -> None:
    """A trainer that writes nothing the guard can see is never stopped for it (MAX_REQUEUES
    in the template bounds it instead); the cycles are recorded, not judged."""
    ledger = Ledger()
    for cycle in range(4):
        ledger = open_cycle(ledger, cycle, 0, ABSENT, None, settings())
        ledger = close_cycle(ledger, ABSENT, "worker-failed", settings(), None)
    assert ledger.streak == 0
    assert [c.progressed for c in ledger.cycles] == [None] * 4
    assert stop_reason(ledger, settings()) is None


def test_judging_starts_once_the_source_has_existed() -> None:
    ledger = open_cycle(Ledger(), 0, 0, ABSENT, None, settings())
    ledger = close_cycle(ledger, reading(100), "worker-failed", settings(), None)
    assert ledger.cycles[-1].progressed is True
    for cycle in (1, 2):
        # The file disappears again (deleted by hand): now that counts against the job.
        ledger = open_cycle(ledger, cycle, 0, reading(100), None, settings())
        ledger = close_cycle(ledger, ABSENT, "worker-failed", settings(), None)
    assert stop_reason(ledger, settings()) == "no progress in the last 2 cycles (iteration stuck at 0)"


FILE_SOURCE = ProgressSettings(source="file:/ckpt/snapshot.pt")


def snapshot(mark: str) -> Reading:
    return Reading(0, mark=mark)


def test_a_file_source_counts_each_replacement_as_one_step() -> None:
    ledger = Ledger()
    marks = ["a", "b", "c", "c", "c"]  # replaced in cycles 0 and 1, then never again
    decisions = []
    for cycle in range(len(marks) - 1):
        reason = stop_reason(ledger, FILE_SOURCE)
        decisions.append(reason)
        if reason:
            break
        ledger = open_cycle(ledger, cycle, 0, snapshot(marks[cycle]), None, FILE_SOURCE)
        ledger = close_cycle(ledger, snapshot(marks[cycle + 1]), "worker-failed", FILE_SOURCE, None)
    assert [(c.iteration_start, c.iteration_end, c.progressed) for c in ledger.cycles] == [
        (0, 1, True),
        (1, 2, True),
        (2, 2, False),
        (2, 2, False),
    ]
    assert (
        stop_reason(ledger, FILE_SOURCE)
        == "no progress in the last 2 cycles (file:/ckpt/snapshot.pt not replaced)"
    )
    assert ledger_from_json(json.loads(json.dumps(ledger_to_json(ledger)))) == ledger


def test_a_file_source_that_appears_during_the_cycle_is_progress() -> None:
    ledger = open_cycle(Ledger(), 0, 0, ABSENT, None, FILE_SOURCE)
    ledger = close_cycle(ledger, snapshot("a"), "signal-SIGTERM", FILE_SOURCE, None)
    assert (ledger.cycles[-1].progressed, ledger.streak) == (True, 0)


def test_a_ledger_written_before_sources_reads_as_its_iteration_file() -> None:
    doc = {"version": 1, "cycles": [], "streak": 1, "iteration_file": FILE, "max_no_progress_cycles": 1}
    ledger = ledger_from_json(doc)
    assert (ledger.source, ledger.seen_source) == (f"iteration-file:{FILE}",) * 2
    policy = effective_policy(ProgressSettings(), ledger, set())
    assert stop_reason(ledger, policy) == "no progress in the last 1 cycles (no iteration read)"


def test_a_save_that_shows_only_at_the_next_start_revises_the_last_cycle() -> None:
    """The early look closed cycle 1 as no progress; the next start finds its save."""
    ledger = open_cycle(Ledger(), 0, 0, reading(100), None, settings())
    ledger = close_cycle(ledger, reading(100), "worker-failed", settings(), None)
    ledger = open_cycle(ledger, 1, 0, reading(100), None, settings())
    ledger = close_cycle(ledger, reading(100), "signal-SIGTERM", settings(), None)
    assert ledger.streak == 2
    revised = revise_last(ledger, settings(), reading(150))
    assert (revised.cycles[-1].iteration_end, revised.cycles[-1].progressed, revised.streak) == (150, True, 0)
    assert revised.cycles[0] == ledger.cycles[0]
    assert stop_reason(revised, settings()) is None
    for unchanged in (reading(100), reading(GARBAGE), ABSENT):
        assert revise_last(ledger, settings(), unchanged) == ledger


def test_revision_leaves_open_and_progressed_cycles_alone() -> None:
    ledger = open_cycle(Ledger(), 0, 0, reading(100), None, settings())
    assert revise_last(ledger, settings(), reading(200)) == ledger
    ledger = close_cycle(ledger, reading(150), "worker-failed", settings(), None)
    assert revise_last(ledger, settings(), reading(200)) == ledger


def test_a_file_source_revision_compares_marks() -> None:
    ledger = open_cycle(Ledger(), 0, 0, snapshot("a"), None, FILE_SOURCE)
    ledger = close_cycle(ledger, snapshot("a"), "signal-SIGTERM", FILE_SOURCE, None)
    assert revise_last(ledger, FILE_SOURCE, snapshot("a")) == ledger
    revised = revise_last(ledger, FILE_SOURCE, snapshot("b"))
    assert (revised.cycles[-1].progressed, revised.cycles[-1].mark_end, revised.streak) == (True, "b", 0)


def test_a_look_that_did_not_answer_judges_nothing() -> None:
    """A hung or overloaded mount is no evidence against the job: the cycle is not judged."""
    silent = Reading(
        0, "progress source ... did not answer within 5 s (a hung mount?); not judged", False, None, False
    )
    ledger = open_cycle(Ledger(), 0, 0, reading(100), None, settings(k=1))
    assert not would_stop(ledger, settings(k=1), silent)
    ledger = close_cycle(ledger, silent, "worker-failed", settings(k=1), None)
    assert (ledger.cycles[-1].progressed, ledger.streak) == (None, 0)
    assert ledger.cycles[-1].warnings == [f"end: {silent.warning}"]
    assert stop_reason(ledger, settings(k=1)) is None
