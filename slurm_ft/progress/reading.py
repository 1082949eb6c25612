"""Readings of a progress source, taken in a child process with a deadline.

The launcher must never hang on a dead checkpoint mount, so every look at a source runs in
``looking.py`` as a child that :mod:`slurm_ft.childprobe` abandons at the deadline. A
reading can be started early (while the workers are still being stopped) and collected
later: :class:`PendingReading`.

Two ways to turn looks into a :class:`Reading`:

* :func:`first` — one look, believed. Used whenever the reading cannot make the guard stop
  the job: a torn iteration file can only read lower than the truth, and a lower value
  recorded there is made good at the next cycle's end.
* :func:`settled` — several looks about a second apart, for a reading that could stop the
  job: any look that counts as progress wins (a torn value is never too high); otherwise
  the looks must all agree, or the reading is flagged.
"""

from __future__ import annotations

import ast
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from slurm_ft.childprobe import Child
from slurm_ft.progress import looking
from slurm_ft.progress.sources import Look
from slurm_ft.settingsyntax import SourceSpec

SCRIPT = str(Path(looking.__file__))
CONFIRM_LOOKS = 5
CONFIRM_SPACING_S = 0.2


@dataclass(frozen=True)
class Reading:
    """What the guard uses of a source at one moment.

    ``iteration`` is the step (for ``file:`` sources the ledger turns ``mark`` into a count
    of replacements). ``warning`` is set when the reading cannot be trusted; then it counts
    as no progress. ``present`` is False when the source does not exist: a source that never
    existed leaves the guard off. ``answered`` is False when the look did not answer in time
    (a hung or overloaded mount): the guard cannot tell, so such a reading judges nothing.
    """

    iteration: int
    warning: str | None = None
    present: bool = True
    mark: str | None = None
    answered: bool = True
    snapshot: int | None = None  # the job's newest snapshot step at that moment, if any

    @property
    def valid(self) -> bool:
        return self.warning is None


def _look_from_literal(item: object) -> Look:
    """A look as the child printed it; ValueError when it is not one."""
    if not (isinstance(item, tuple) and len(item) == 5):
        raise ValueError(f"not a look: {item!r}")
    present, step, mark, entry, problem = item
    texts = (mark, entry, problem)
    if (
        not isinstance(present, bool)
        or not isinstance(step, int)
        or not all(t is None or isinstance(t, str) for t in texts)
    ):
        raise ValueError(f"not a look: {item!r}")
    return Look(present, step, mark, entry, problem)


class PendingReading:
    """Looks at ``spec`` started now in a child; :meth:`looks` collects them once."""

    def __init__(
        self, spec: SourceSpec, timeout: float, *, looks: int = 1, spacing: float = CONFIRM_SPACING_S
    ) -> None:
        self.spec = spec
        self.timeout = timeout
        self.started = time.monotonic()
        self._stop_at = self.started + timeout + (looks - 1) * spacing
        args = [spec.kind, spec.path, str(looks), f"{spacing:g}"]
        if spec.pattern is not None:
            args.append(spec.pattern)
        self._child = Child(SCRIPT, args)
        self._result: list[Look] | str | None = None

    @property
    def pid(self) -> int | None:
        """The reader's process id (None when it could not start)."""
        return self._child.pid

    def done(self) -> bool:
        """True once :meth:`looks` would not wait."""
        return self._result is not None or self._child.done()

    def looks(self) -> list[Look] | str:
        """The looks, or a warning saying why there are none."""
        if self._result is None:
            self._result = self._collect()
        return self._result

    def abandon(self) -> None:
        """Stop the looks now (the child is killed unless it already answered)."""
        if self._result is None:
            self._child.collect(time.monotonic())
            self._result = f"progress source {self.spec}: the look was abandoned"

    def _collect(self) -> list[Look] | str:
        answer = self._child.collect(self._stop_at)
        where = f"progress source {self.spec}"
        if answer.error is not None:
            return f"{where} could not be read ({answer.error})"
        if answer.output is None:
            return f"{where} did not answer within {self.timeout:g} s (a hung mount?)"
        try:
            printed = ast.literal_eval(answer.output.decode("utf-8", errors="replace").strip())
            found = [_look_from_literal(x) for x in printed]
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return f"{where} could not be read (the reader exited {answer.returncode} without an answer)"
        return found or f"{where} could not be read (no look)"


def _warning(spec: SourceSpec, problem: str) -> str:
    return f"progress source {spec}: {problem}; counting as no progress"


def from_look(spec: SourceSpec, look: Look) -> Reading:
    if look.problem is not None:
        return Reading(0, _warning(spec, look.problem), look.present, look.mark)
    return Reading(look.step, None, look.present, look.mark)


def first(pending: PendingReading) -> Reading:
    got = pending.looks()
    if isinstance(got, str):
        return Reading(0, f"{got}; not judged", present=False, answered=False)
    return from_look(pending.spec, got[0])


def settled(pending: PendingReading, counts: Callable[[Reading], bool]) -> Reading:
    """The confirmed reading: the first look that ``counts`` as progress, else the last look
    when every look agreed, else a flagged reading."""
    got = pending.looks()
    if isinstance(got, str):
        return Reading(0, f"{got}; not judged", present=False, answered=False)
    readings = [from_look(pending.spec, x) for x in got]
    for r in readings:
        if r.valid and counts(r):
            return r
    last = readings[-1]
    if not last.valid:
        return last
    if all(x == got[-1] for x in got):
        return last
    n = len(got)
    return Reading(
        0,
        _warning(pending.spec, f"it read {last.iteration} but did not hold still through {n} reads"),
        last.present,
        last.mark,
    )
