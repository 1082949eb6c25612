"""Fold lines that many ranks printed alike into one line with their rank set (pure).

``--collapse``: lines with the same text (after the rank prefix) become one group,
shown as ``count  0-511,513-1023: text``, groups in the order of their first line.
``--collapse=numbers``: lines that differ only in their numbers (loss values, step
times) fold too; each number of the group is shown as its spread ``[lo..hi]``.

The scan counts whole lines (rank prefix included) with ``collections.Counter``, which
runs in C; the distinct (rank, text) pairs are then folded by text with C-level calls
too, and Python runs once per run of texts (rendering aside: once per text several ranks
printed). The count table is bounded (:data:`MAX_DISTINCT` entries): a log with more distinct lines
is collapsed window by window, each window's groups printed before the next starts, and
the output says so; memory never grows with the file.
"""

from __future__ import annotations

import functools
import operator
import re
from collections import Counter, defaultdict, deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from enum import Enum
from itertools import compress, groupby, repeat
from operator import itemgetter
from typing import cast

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
class Singles:
    """Consecutive lines (in order of first appearance) whose text only one rank printed:
    kept as the log's own lines with their counts, never made into :class:`Group` objects
    (a log of mostly distinct lines costs no Python per line)."""

    counts: list[int]
    lines: list[bytes]  # as in the log: rank prefix, mark, text

    def render(self, count_width: int = 7) -> bytes:
        fmt = f"%{count_width}d ".encode()
        return b"".join(map(b"".join, zip(map(fmt.__mod__, self.counts), self.lines, repeat(b"\n"))))

    def groups(self, rank_of: dict[bytes, int], prefix_length: int) -> Iterator[Group]:
        """As groups (for JSON): one Python step per line, so only when asked."""
        p = prefix_length
        for count, line in zip(self.counts, self.lines, strict=True):
            rank = rank_of.get(line[:p])
            if rank is None:
                yield Group(b"", line, set(), count, unranked=count)
            else:
                yield Group(line[p - 2 : p], line[p:], {rank}, count)


@dataclass(frozen=True)
class Shared:
    """Consecutive texts (in order of first appearance) that several ranks printed: one
    line each, ``count ranks: text``; kept as plain lists, rendered in one loop."""

    texts: list[bytes]  # the mark and the text; b"\\0" + the whole line when unranked
    counts: list[int]
    ranks: list[set[int | None]]

    def render(self, count_width: int = 7) -> bytes:
        fmt = f"%{count_width}d %s%s\n".encode()
        out = []
        for text, count, ranks in zip(self.texts, self.counts, self.ranks, strict=True):
            if text.startswith(b"\0"):
                text = b": " + text[1:]
            known = cast(set[int], ranks) if None not in ranks else {r for r in ranks if r is not None}
            shown = format_set(known)
            out.append(fmt % (count, shown.encode() or b"?", text))
        return b"".join(out)

    def groups(self) -> Iterator[Group]:
        for text, count, ranks in zip(self.texts, self.counts, self.ranks, strict=True):
            group = Group(b"", text[1:]) if text.startswith(b"\0") else Group(text[:2], text[2:])
            group.count = count
            group.ranks = {r for r in ranks if r is not None}
            group.unranked = count if None in ranks else 0
            yield group


@dataclass(frozen=True)
class Window:
    """One window's groups and single lines, in order of first appearance; ``more`` says
    the count table filled up and another window follows."""

    items: list[Group | Singles | Shared]
    more: bool

    def groups(self, rank_of: dict[bytes, int], prefix_length: int) -> Iterator[Group]:
        for item in self.items:
            if isinstance(item, Singles):
                yield from item.groups(rank_of, prefix_length)
            elif isinstance(item, Shared):
                yield from item.groups()
            else:
                yield item


class Collapser:
    """Feed pieces of whole lines; take the windows with :meth:`take` and :meth:`finish`.

    Per line: one ``Counter`` update of the whole line. Per window (``max_distinct``
    pairs at most): the pairs folded by text (:meth:`_by_text`); texts one rank printed
    are rebuilt as that rank's lines (:class:`Singles`), the rest listed with their rank
    sets (:class:`Shared`), both by C-level calls.
    """

    def __init__(self, world_size: int, mode: Mode = Mode.EXACT, max_distinct: int = MAX_DISTINCT) -> None:
        width = logline.rank_width(world_size)
        self.prefix_length = width + len(logline.LINE_MARK)
        self.mode = mode
        self.max_distinct = max_distinct
        self.rank_of = {
            logline.rank_prefix(r, width, mark): r for r in range(world_size) for mark in logline.MARKS
        }
        self._digits = [f"{r:>{width}}".encode() for r in range(world_size)]
        self._counts: Counter[bytes] = Counter()
        self._ready: list[Window] = []

    def feed(self, pieces: Iterable[bytes]) -> None:
        counts = self._counts
        for piece in pieces:
            lines = piece.split(b"\n")
            lines.pop()
            counts.update(lines)  # whole lines: (rank, text) pairs, counted in C
            if len(counts) >= self.max_distinct:
                self._ready.append(Window(self._items(), more=True))
                counts.clear()

    def take(self) -> list[Window]:
        """The windows completed so far (a long log's collapse shows while it runs)."""
        ready, self._ready = self._ready, []
        return ready

    def finish(self) -> list[Window]:
        ready = self.take()
        if self._counts or not ready:
            ready.append(Window(self._items(), more=False))
            self._counts.clear()
        return ready

    def _by_text(self) -> tuple[Counter[bytes], defaultdict[bytes, set[int | None]]]:
        """The window's (rank, text) pairs folded by text: lines per text and the ranks
        that printed it, in order of first appearance. C-level calls per distinct pair."""
        pairs = list(self._counts)  # in order of first appearance
        p = self.prefix_length
        texts = list(map(itemgetter(slice(p - 2, None)), pairs))  # the mark and the text
        ranks = list(map(self.rank_of.get, map(itemgetter(slice(0, p)), pairs)))
        if None in ranks:  # not in the rank format (a torn write): keep the whole line
            for k in compress(range(len(ranks)), map(operator.is_, ranks, repeat(None))):
                texts[k] = b"\0" + pairs[k]
        by_text: defaultdict[bytes, set[int | None]] = defaultdict(set)
        deque(map(set.add, map(by_text.__getitem__, texts), ranks), maxlen=0)
        # lines per text: one per pair, plus the other lines of pairs seen more than
        # once (few: a rank repeating a line), in Python; expanding every pair's count
        # into that many items cost a pass per line (measured: a third of this step)
        lines = Counter(texts)
        values = self._counts.values()
        repeated = list(map(operator.gt, values, repeat(1)))
        for text, n in zip(compress(texts, repeated), compress(values, repeated), strict=True):
            lines[text] += n - 1
        return lines, by_text

    def _items(self) -> list[Group | Singles | Shared]:
        lines, by_text = self._by_text()
        texts = list(by_text)
        counts = list(map(lines.__getitem__, texts))
        rank_sets = list(by_text.values())
        if self.mode is Mode.NUMBERS:
            return list(_by_numbers(texts, counts, rank_sets))
        alone = list(map(operator.eq, map(len, rank_sets), repeat(1)))  # one rank printed it
        items: list[Group | Singles | Shared] = []
        start = 0
        for is_alone, run in groupby(alone):  # runs: Python per run, not per text
            end = start + len(list(run))
            if is_alone:
                items.append(self._singles(texts[start:end], counts[start:end], rank_sets[start:end]))
            else:
                items.append(Shared(texts[start:end], counts[start:end], rank_sets[start:end]))
            start = end
        return items

    def _singles(self, texts: list[bytes], counts: list[int], rank_sets: list[set[int | None]]) -> Singles:
        """Texts one rank printed: each line rebuilt as written (rank digits, mark, text)."""
        ranks = list(map(set.pop, rank_sets))  # each holds one rank (and is not needed after)
        if None in ranks:  # a whole line kept as it was (not in the rank format)
            lines = [t[1:] if r is None else self._digits[r] + t for r, t in zip(ranks, texts, strict=True)]
        else:
            ranked = cast(list[int], ranks)  # no None in it
            lines = list(map(bytes.__add__, map(self._digits.__getitem__, ranked), texts))
        return Singles(counts, lines)


def _by_numbers(texts: list[bytes], counts: list[int], rank_sets: list[set[int | None]]) -> list[Group]:
    """Texts that differ only in numbers become one group, with each number's spread.
    The texts are templated, grouped and their numbers found by C-level calls; Python
    runs once per template."""
    templates = list(map(functools.partial(NUMBER.sub, b"\0"), texts))
    members: defaultdict[bytes, list[int]] = defaultdict(list)
    deque(map(list.append, map(members.__getitem__, templates), range(len(texts))), maxlen=0)
    values = list(map(NUMBER.findall, texts))
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
        group.template = tuple(NUMBER.split(group.text))
        group.spreads = []
        for column in zip(*map(values.__getitem__, idx), strict=True):
            lo, hi = min(column, key=float), max(column, key=float)
            group.spreads.append(Spread(float(lo), float(hi), lo.decode(), hi.decode()))
        out.append(group)
    return out


def render(window: Window, count_width: int = 7, limit: int = MAX_DISTINCT) -> Iterator[bytes]:
    """``   2046 0-511,513-1023: text`` per group (``uniq -c`` style); a line one rank
    printed is shown as written, after its count."""
    for item in window.items:
        if isinstance(item, Singles | Shared):
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
