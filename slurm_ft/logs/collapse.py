"""Fold lines that many ranks printed alike into one line with their rank set (pure).

``--collapse``: lines with the same text (after the rank prefix) become one group,
shown as ``count  0-511,513-1023: text``, groups in the order of their first line.
``--collapse=numbers``: lines that differ only in their numbers (loss values, step
times) fold too; each number of the group is shown as its spread ``[lo..hi]``.

The scan counts whole lines (rank prefix included) with ``collections.Counter``, which
runs in C; Python runs once per *distinct* (rank, text) pair, when the groups are built.
The count table is bounded (:data:`MAX_DISTINCT` entries): a log with more distinct lines
is collapsed window by window, each window's groups printed before the next starts, and
the output says so; memory never grows with the file.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from enum import Enum

from slurm_ft import logline
from slurm_ft.logs.ranks import format_set

MAX_DISTINCT = 200_000
NUMBER = re.compile(rb"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


class Mode(str, Enum):
    EXACT = "exact"
    NUMBERS = "numbers"


@dataclass
class Spread:
    """The smallest and largest value seen at one number's place, as written."""

    lo: float
    hi: float
    lo_text: str
    hi_text: str

    def add(self, value: float, text: str) -> None:
        if value < self.lo:
            self.lo, self.lo_text = value, text
        if value > self.hi:
            self.hi, self.hi_text = value, text

    def show(self) -> str:
        return self.lo_text if self.lo_text == self.hi_text else f"[{self.lo_text}..{self.hi_text}]"


@dataclass
class Group:
    """Lines that fold together: where they came from and how many there were."""

    mark: bytes
    text: bytes  # the line's text; in numbers mode, the first line seen
    ranks: set[int] = field(default_factory=set)
    count: int = 0
    template: tuple[bytes, ...] | None = None  # numbers mode: the text around the numbers
    spreads: list[Spread] | None = None
    unranked: int = 0  # lines without a rank prefix

    @property
    def shown_text(self) -> str:
        if self.template is None or self.spreads is None:
            return self.text.decode(errors="replace")
        out = []
        for k, part in enumerate(self.template):
            out.append(part.decode(errors="replace"))
            if k < len(self.spreads):
                out.append(self.spreads[k].show())
        return "".join(out)

    @property
    def rank_set(self) -> str:
        return format_set(self.ranks)

    def to_json(self) -> dict[str, object]:
        doc: dict[str, object] = {
            "ranks": self.rank_set,
            "rank_count": len(self.ranks),
            "count": self.count,
            "kind": _MARK_NAMES.get(self.mark, "line"),
            "text": self.shown_text,
        }
        if self.spreads is not None:
            doc["spread"] = [{"lo": s.lo_text, "hi": s.hi_text} for s in self.spreads]
        return doc


_MARK_NAMES = {
    logline.LINE_MARK: "line",
    logline.CONTINUATION_MARK: "continuation",
    logline.NOTE_MARK: "note",
}


@dataclass(frozen=True)
class Window:
    """One window's groups, in order of first appearance; ``more`` says the count table
    filled up and another window follows."""

    groups: list[Group]
    more: bool


class Collapser:
    """Feed pieces of whole lines; take the groups with :meth:`windows`."""

    def __init__(self, world_size: int, mode: Mode = Mode.EXACT, max_distinct: int = MAX_DISTINCT) -> None:
        width = logline.rank_width(world_size)
        self.prefix_length = width + len(logline.LINE_MARK)
        self.mode = mode
        self.max_distinct = max_distinct
        self._rank_of = {
            logline.rank_prefix(r, width, mark): r for r in range(world_size) for mark in logline.MARKS
        }
        self._counts: Counter[bytes] = Counter()
        self._ready: list[Window] = []

    def feed(self, pieces: Iterable[bytes]) -> None:
        counts = self._counts
        for piece in pieces:
            lines = piece.split(b"\n")
            lines.pop()
            counts.update(lines)
            if len(counts) >= self.max_distinct:
                self._ready.append(Window(self._groups(), more=True))
                counts.clear()

    def take(self) -> list[Window]:
        """The windows completed so far (a long log's collapse shows while it runs)."""
        ready, self._ready = self._ready, []
        return ready

    def finish(self) -> list[Window]:
        ready = self.take()
        if self._counts or not ready:
            ready.append(Window(self._groups(), more=False))
            self._counts.clear()
        return ready

    def _groups(self) -> list[Group]:
        p = self.prefix_length
        rank_of = self._rank_of
        groups: dict[object, Group] = {}
        numbers = self.mode is Mode.NUMBERS
        for line, n in self._counts.items():
            rank = rank_of.get(line[:p])
            if rank is None:
                mark, text = b"", line
            else:
                mark, text = line[p - 2 : p], line[p:]
            if numbers:
                parts = NUMBER.split(text)
                template = tuple(parts)
                key: object = (mark, template)
            else:
                key = (mark, text)
            group = groups.get(key)
            if group is None:
                group = groups[key] = Group(mark, text)
                if numbers:
                    values = NUMBER.findall(text)
                    group.template = template
                    group.spreads = [Spread(float(v), float(v), v.decode(), v.decode()) for v in values]
            elif numbers:
                assert group.spreads is not None
                for spread, v in zip(group.spreads, NUMBER.findall(text), strict=False):
                    spread.add(float(v), v.decode())
            if rank is None:
                group.unranked += n
            else:
                group.ranks.add(rank)
            group.count += n
        return list(groups.values())


def render(window: Window, count_width: int = 7) -> Iterator[str]:
    """``   2046 0-511,513-1023: text`` per group (``uniq -c`` style)."""
    for g in window.groups:
        ranks = g.rank_set or "?"
        mark = (g.mark or logline.LINE_MARK).decode()
        yield f"{g.count:>{count_width}} {ranks}{mark}{g.shown_text}"
    if window.more:
        yield (
            f"-- more than {MAX_DISTINCT} distinct lines: the lines above are collapsed among "
            "themselves, the collapse starts afresh below --"
        )
