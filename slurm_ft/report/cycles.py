"""The attempts and their cycles, from the records and the ledger: a cycle whose record is
unreadable is taken from the ledger, an attempt whose outcome record was not kept is
inferred from its last cycle. An attempt is one launcher run (one ``run_uuid``); its
number is Slurm's restart count. Its start is its first cycle's start (the launcher's own
start-up is not recorded) and its end its last record: the outcome, or the last cycle's
end when the outcome was not kept."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from slurm_ft import exitcodes
from slurm_ft.progress import CycleEntry, Ledger
from slurm_ft.records import CycleOutcome, CycleRecord, OutcomeRecord
from slurm_ft.report.causes import failure_view
from slurm_ft.report.load import StateFiles
from slurm_ft.report.views import AttemptView, CycleView

_NO_RUN = "attempt:"  # key prefix of cycles known only from the ledger (no run_uuid)


def progress_known(ledger: Ledger | None) -> bool:
    """Without a progress source the ledger records 0 -> 0 for every cycle: that is no data."""
    return ledger is not None and ledger.source is not None


def _cycle_view(rec: CycleRecord, entry: CycleEntry | None, known: bool) -> CycleView:
    progressed = None
    if known and entry is not None and entry.iteration_end is not None and entry.progressed is not None:
        progressed = entry.progressed
    end = rec.end_time
    if end is None and entry is not None and entry.ended_at is not None:
        end = entry.ended_at
    return CycleView(
        cycle=rec.cycle,
        attempt=rec.attempt,
        restart=rec.restart,
        start=float(rec.start_time),
        end=float(end) if end is not None else None,
        outcome=CycleOutcome(rec.outcome).value,
        nodes=tuple(rec.nodes),
        world_size=rec.world_size,
        failure=failure_view(rec.first_failure),
        progressed=progressed,
        iteration_start=entry.iteration_start if known and entry else None,
        iteration_end=entry.iteration_end if known and entry else None,
        source="record",
        learned_startup=entry.startup if entry else None,
    )


def _cycle_from_ledger(entry: CycleEntry, known: bool) -> CycleView | None:
    """A cycle whose record is unreadable, as far as the ledger saw it."""
    if entry.started_at is None:
        return None
    return CycleView(
        cycle=entry.cycle,
        attempt=entry.attempt,
        restart=-1,
        start=float(entry.started_at),
        end=float(entry.ended_at) if entry.ended_at is not None else None,
        outcome=entry.outcome or CycleOutcome.RUNNING.value,
        nodes=(),
        world_size=None,
        failure=None,
        progressed=entry.progressed if known and entry.iteration_end is not None else None,
        iteration_start=entry.iteration_start if known else None,
        iteration_end=entry.iteration_end if known else None,
        source="ledger",
        learned_startup=entry.startup,
    )


def cycle_views(files: StateFiles) -> tuple[list[CycleView], dict[int, str]]:
    """The cycle views and, for each, the attempt key (its run's uuid when known)."""
    ledger = files.ledger
    known = progress_known(ledger)
    entries = {e.cycle: e for e in (ledger.cycles if ledger else [])}
    views: list[CycleView] = []
    keys: dict[int, str] = {}
    for rec in files.cycles:
        views.append(_cycle_view(rec, entries.get(rec.cycle), known))
        keys[rec.cycle] = rec.run_uuid
    for number, entry in entries.items():
        if number in keys:
            continue
        view = _cycle_from_ledger(entry, known)
        if view is not None:
            views.append(view)
            keys[number] = _key_for_attempt(entry.attempt, number, files.cycles)
    views.sort(key=lambda c: (c.start, c.cycle))
    return views, keys


def _key_for_attempt(attempt: int, cycle: int, recs: Iterable[CycleRecord]) -> str:
    """The run of ``attempt`` whose recorded cycle is nearest to ``cycle`` (earlier ones
    first): a run's cycle numbers are consecutive."""
    same = [r for r in recs if r.attempt == attempt]
    if not same:
        return f"{_NO_RUN}{attempt}"
    return min(same, key=lambda r: (abs(r.cycle - cycle), r.cycle > cycle)).run_uuid


def _inferred_outcome(last: CycleView, ledger: Ledger | None) -> tuple[str, str]:
    """(outcome word, reason) for an attempt whose outcome record was not kept, from its
    last cycle, or from the ledger when the no-progress guard refused the next one."""
    stopped = ledger.stopped if ledger else None
    if stopped is not None and stopped.attempt == last.attempt and stopped.cycle > last.cycle:
        return exitcodes.describe(exitcodes.ExitCode.NO_PROGRESS), stopped.reason
    # Keyed by the record's text: a value this version does not know is shown as it is.
    words: dict[str, str] = {
        CycleOutcome.SUCCEEDED: "finished",
        CycleOutcome.SIGNALLED: "signalled",
        CycleOutcome.FAILED: "failed",
        CycleOutcome.LOST: "lost",
        CycleOutcome.RUNNING: "interrupted",
    }
    word = words.get(last.outcome, last.outcome)
    why = last.failure.description if last.failure else f"last cycle {last.cycle}: {last.outcome}"
    return word, f"{why} (outcome record not kept)"


def _names(value: object) -> tuple[str, ...]:
    """A record's list of node names (a hand-edited or damaged file may hold anything)."""
    return tuple(n for n in value if isinstance(n, str)) if isinstance(value, list) else ()


def attempt_views(files: StateFiles, cycles: list[CycleView], keys: dict[int, str]) -> list[AttemptView]:
    by_key: dict[str, list[CycleView]] = defaultdict(list)
    for c in cycles:
        by_key[keys[c.cycle]].append(c)
    outcomes: dict[str, OutcomeRecord] = {o.run_uuid: o for o in files.outcomes}
    # A ledger-only cycle belongs to its attempt's outcome when there is one.
    for o in files.outcomes:
        orphan = by_key.pop(f"{_NO_RUN}{o.attempt}", None)
        if orphan:
            by_key[o.run_uuid].extend(orphan)
    out: list[AttemptView] = []
    for key in set(by_key) | set(outcomes):
        cs = sorted(by_key.get(key, []), key=lambda c: c.cycle)
        rec = outcomes.get(key)
        times = [c.start for c in cs] + [c.end for c in cs if c.end is not None]
        if rec is not None:
            times.append(float(rec.time))
        if rec is not None:
            number, word, reason, code, source = rec.attempt, rec.outcome, rec.reason, rec.exit_code, "record"
        else:  # known from its cycles alone, so it has some
            number, code, source = cs[0].attempt, None, "inferred"
            word, reason = _inferred_outcome(cs[-1], files.ledger)
        nodes: list[str] = list(rec.nodes) if rec is not None and rec.nodes else []
        for c in cs:
            nodes += [n for n in c.nodes if n not in nodes]
        out.append(
            AttemptView(
                attempt=number,
                run_uuid=None if key.startswith(_NO_RUN) else key,
                start=min(times),
                end=max(times),
                outcome=word,
                exit_code=code,
                reason=reason,
                outcome_source=source,
                cycles=tuple(c.cycle for c in cs),
                nodes=tuple(nodes),
                unhealthy_nodes=tuple(rec.unhealthy_nodes) if rec is not None else (),
                lost_nodes=_names(rec.lost_nodes) if rec is not None else (),
            )
        )
    out.sort(key=lambda a: (a.start, a.attempt))
    return out
