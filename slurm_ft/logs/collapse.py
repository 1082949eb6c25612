"""Fold lines that many ranks printed alike into one line with their rank set (pure).

``--collapse``: lines with the same text (after the rank prefix) become one group,
shown as ``count  0-511,513-1023: text``, groups in the order of their first line.
``--collapse=numbers``: lines that differ only in their numbers (loss values, step
times) fold too; each number of the group is shown as its spread ``[lo..hi]``.

The scan counts whole lines (rank prefix included) with ``collections.Counter``, which
runs in C; the distinct (rank, text) pairs are then folded by text, and a window's lines
rendered, with C-level calls too: Python runs per window, not per line or per text. The
count table is bounded (:data:`MAX_DISTINCT` entries): a log with more distinct lines is
collapsed window by window, each window's groups printed before the next starts, and the
output says so; memory never grows with the file.
"""

from __future__ import annotations

import operator
import re
from collections import Counter, defaultdict, deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from enum import Enum
from itertools import accumulate, compress, repeat
from operator import itemgetter
from typing import cast

from slurm_ft import logline
from slurm_ft.logs.ranks import format_set, format_sets

MAX_DISTINCT = 200_000
# A number: -?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?, written to start with a character class
# (a minus sign only before a digit): the engine then skips to the next candidate in C,
# where an optional first character made it try a match at every byte (half the time).
NUMBER = re.compile(rb"([-\d](?:(?<=-)\d+|(?<!-)\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?)")


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

    def show(self) -> str:
        return self.lo_text if self.lo_text == self.hi_text else f"[{self.lo_text}..{self.hi_text}]"


@dataclass(slots=True)
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
class Folded:
    """A window's texts in order of first appearance, each with its line count and the
    ranks that printed it; never made into :class:`Group` objects (a log of mostly
    distinct lines costs no Python per line) and rendered all at once.

    A text is the mark and the text of a line; a line not in the rank format (a torn
    write) is kept whole as NUL + the line, a text of its own that no rank printed
    (ranks ``[None]``)."""

    texts: list[bytes]
    counts: list[int]
    ranks: list[list[int | None]]  # each text's ranks, no repeats, in no order
    digits: dict[int | None, bytes]  # each rank as its prefix writes it (None: b"")

    def render(self, count_width: int = 7) -> bytes:
        """``count ranks: text`` per text; a text one rank printed is shown as written,
        ``count line``. Both are ``count``, a middle and the text, so every line is made
        by one format over the window: the rank sets of the texts several ranks printed
        are written together (:func:`format_sets`; measured: a Python call per set cost
        more than folding the lines), and the middles picked in order by C-level calls."""
        alone = list(map(operator.eq, map(len, self.ranks), repeat(1)))  # one rank printed it
        singles = list(map(itemgetter(0), compress(self.ranks, alone)))
        shared = cast(list[list[int]], list(compress(self.ranks, map(operator.not_, alone))))
        sources = (iter(format_sets(shared)), iter(map(self.digits.__getitem__, singles)))
        middles = map(next, map(sources.__getitem__, alone))  # alone is 0 or 1
        texts = self.texts
        if None in singles:  # a whole line: no rank digits, the line without its NUL
            texts = [t[1:] if r == [None] else t for t, r in zip(texts, self.ranks, strict=True)]
        fmt = f"%{count_width}d %s%s\n".encode()
        return b"".join(map(fmt.__mod__, zip(self.counts, middles, texts, strict=True)))

    def groups(self) -> Iterator[Group]:
        """As groups (for JSON): one Python step per text, so only when asked."""
        for text, count, ranks in zip(self.texts, self.counts, self.ranks, strict=True):
            if ranks == [None]:
                yield Group(b"", text[1:], set(), count, unranked=count)
            else:
                yield Group(text[:2], text[2:], set(cast(list[int], ranks)), count)


@dataclass(frozen=True)
class Window:
    """One window's groups or folded texts, in order of first appearance; ``more`` says
    the count table filled up and another window follows."""

    items: list[Group | Folded]
    more: bool

    def groups(self) -> Iterator[Group]:
        for item in self.items:
            if isinstance(item, Folded):
                yield from item.groups()
            else:
                yield item


class Collapser:
    """Feed pieces of whole lines; take the windows with :meth:`take` and :meth:`finish`.

    Per line: one ``Counter`` update of the whole line. Per window (``max_distinct``
    pairs at most): the pairs folded by text (:meth:`_by_text`) into one :class:`Folded`,
    or, in numbers mode, into groups of texts alike but for their numbers.
    """

    def __init__(
        self,
        world_size: int,
        mode: Mode = Mode.EXACT,
        max_distinct: int = MAX_DISTINCT,
        hold_first: bool = False,
    ) -> None:
        width = logline.rank_width(world_size)
        self.prefix_length = width + len(logline.LINE_MARK)
        self.mode = mode
        self.max_distinct = max_distinct
        self.rank_of = {
            logline.rank_prefix(r, width, mark): r for r in range(world_size) for mark in logline.MARKS
        }
        self._digits: dict[int | None, bytes] = {r: f"{r:>{width}}".encode() for r in range(world_size)}
        self._digits[None] = b""
        self._counts: Counter[bytes] = Counter()
        self._ready: list[Window] = []
        # The second half of a log collapsed in another process (:mod:`halves`) keeps its
        # first window's count table as counted: it is joined to the first half's last.
        self._hold_first = hold_first
        self.held: Counter[bytes] | None = None

    def feed(self, pieces: Iterable[bytes]) -> None:
        counts = self._counts
        for piece in pieces:
            lines = piece.split(b"\n")
            lines.pop()
            counts.update(lines)  # whole lines: (rank, text) pairs, counted in C
            if len(counts) >= self.max_distinct:
                if self._hold_first and self.held is None:
                    self.held, counts = counts, Counter()
                    self._counts = counts
                    continue
                self._ready.append(Window(self._items(counts), more=True))
                counts.clear()

    def take(self) -> list[Window]:
        """The windows completed so far (a long log's collapse shows while it runs)."""
        ready, self._ready = self._ready, []
        return ready

    def finish(self) -> list[Window]:
        ready = self.take()
        if self._counts or not ready:
            ready.append(Window(self._items(self._counts), more=False))
            self._counts.clear()
        return ready

    def open_window(self) -> Counter[bytes]:
        """The window being counted, as counted (not folded), and a fresh one begun."""
        counts, self._counts = self._counts, Counter()
        return counts

    def joined(self, first: Counter[bytes], second: Counter[bytes], more: bool) -> list[Window]:
        """Two neighbouring windows' count tables, ``first`` the earlier: one window when
        their distinct lines fit the table (so a log of few distinct lines is one window
        however it was split), else each its own; ``more``: a window follows the second."""
        joined = first.copy()
        joined.update(second)
        if len(joined) <= self.max_distinct:
            return [Window(self._items(joined), more)]
        return [Window(self._items(first), True), Window(self._items(second), more)]

    def _by_text(
        self, counts: Counter[bytes]
    ) -> tuple[defaultdict[bytes, list[int | None]], dict[bytes, int]]:
        """The window's (rank, text) pairs folded by text: the ranks that printed each
        text, in order of first appearance, and the lines beyond one per pair (a rank
        repeating a line). C-level calls per distinct pair.

        The pairs are distinct whole lines, so a text's ranks never repeat: they are
        gathered in lists (measured: half the cost of sets, which allocate a table per
        text), and a text's lines are its pairs plus those extra lines."""
        pairs = list(counts)  # in order of first appearance
        p = self.prefix_length
        texts = list(map(itemgetter(slice(p - 2, None)), pairs))  # the mark and the text
        ranks = list(map(self.rank_of.get, map(itemgetter(slice(0, p)), pairs)))
        if None in ranks:  # not in the rank format (a torn write): keep the whole line
            for k in compress(range(len(ranks)), map(operator.is_, ranks, repeat(None))):
                texts[k] = b"\0" + pairs[k]
        by_text: defaultdict[bytes, list[int | None]] = defaultdict(list)
        deque(map(list.append, map(by_text.__getitem__, texts), ranks), maxlen=0)
        # pairs seen more than once are few (a rank repeating a line): Python for them;
        # expanding every pair's count into that many items cost a pass per line
        extra: dict[bytes, int] = {}
        values = counts.values()
        repeated = list(map(operator.gt, values, repeat(1)))
        for text, n in zip(compress(texts, repeated), compress(values, repeated), strict=True):
            extra[text] = extra.get(text, 0) + n - 1
        return by_text, extra

    def _items(self, table: Counter[bytes]) -> list[Group | Folded]:
        by_text, extra = self._by_text(table)
        texts = list(by_text)
        rank_sets = list(by_text.values())
        pairs = list(map(len, rank_sets))
        counts = list(map(operator.add, pairs, map(extra.get, texts, repeat(0)))) if extra else pairs
        if self.mode is Mode.NUMBERS:
            return list(_by_numbers(texts, counts, rank_sets))
        return [Folded(texts, counts, rank_sets, self._digits)]


def _by_numbers(texts: list[bytes], counts: list[int], rank_sets: list[list[int | None]]) -> list[Group]:
    """Texts that differ only in numbers become one group, with each number's spread.

    The window's texts are joined (a text holds no newline, and a number none either, so
    the matches in the whole are those of each text) and split at their numbers by one
    regular-expression pass: two passes per text cost more than the rest of the collapse
    (measured: 3.8 of 10.6 s on the per-rank-numbers file). Python runs once
    per template, and once per number of a template to find its spread.

    A template is the text with each number replaced by a NUL byte, which is unambiguous
    only in a text without NUL bytes: ``a\\0b`` and ``a5b`` would share one (and fold,
    or fail on their different counts of numbers). A text with a NUL byte (an unranked
    line is kept as NUL + the line) is templated as the tuple of its parts around the
    numbers instead, which no bytes template equals."""
    if not texts:
        return []
    parts = NUMBER.split(b"\n".join(texts))  # the text between numbers, a number, ...
    numbers = parts[1::2]  # every text's numbers, text after text
    templates: list[bytes | tuple[bytes, ...]] = list(b"\0".join(parts[0::2]).split(b"\n"))
    per_text = list(map(bytes.count, cast(list[bytes], templates), repeat(b"\0")))
    for k in compress(range(len(texts)), map(operator.contains, texts, repeat(b"\0"))):
        templates[k] = tuple(NUMBER.split(texts[k])[0::2])
        per_text[k] = len(templates[k]) - 1
    starts = [0, *accumulate(per_text)]  # where each text's numbers start in numbers
    members: defaultdict[bytes | tuple[bytes, ...], list[int]] = defaultdict(list)
    deque(map(list.append, map(members.__getitem__, templates), range(len(texts))), maxlen=0)
    out = []
    for idx in members.values():  # in order of first appearance
        first = texts[idx[0]]
        group = Group(b"", first[1:]) if first.startswith(b"\0") else Group(first[:2], first[2:])
        group.count = sum(map(counts.__getitem__, idx))
        ranks: set[int | None] = set().union(*map(rank_sets.__getitem__, idx))
        if None in ranks:
            group.unranked = group.count
            ranks.discard(None)
        group.ranks = cast(set[int], ranks)  # None was discarded
        group.template = tuple(NUMBER.split(group.text)[0::2])
        group.spreads = []
        firsts = list(map(starts.__getitem__, idx))
        for place in range(per_text[idx[0]]):  # the same count of numbers in every member
            column = list(map(numbers.__getitem__, map(operator.add, firsts, repeat(place))))
            values = list(map(float, column))
            lo, hi = min(values), max(values)  # as written: the first member that has it
            group.spreads.append(
                Spread(lo, hi, column[values.index(lo)].decode(), column[values.index(hi)].decode())
            )
        out.append(group)
    return out


def render(window: Window, count_width: int = 7, limit: int = MAX_DISTINCT) -> Iterator[bytes]:
    """``   2046 0-511,513-1023: text`` per group (``uniq -c`` style); a line one rank
    printed is shown as written, after its count."""
    for item in window.items:
        if isinstance(item, Folded):
            yield item.render(count_width)
            continue
        ranks = item.rank_set or "?"
        mark = (item.mark or logline.LINE_MARK).decode()
        yield f"{item.count:>{count_width}} {ranks}{mark}{item.shown_text}\n".encode(errors="replace")
    if window.more:
        yield (
            f"-- more than {limit} distinct lines: the lines above are collapsed among "
            "themselves, the collapse starts afresh below --\n"
        ).encode()
