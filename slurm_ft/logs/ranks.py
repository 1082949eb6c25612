"""Rank sets: ``0,17,100-131`` <-> a set of global ranks, and the regular expression that
finds their lines in a cycle log (pure).

Selecting lines by rank must run at disk speed on a 1 GB file, which one Python call per
line cannot (10 million lines). Instead the ranks become one regular expression over the
fixed-width prefixes (``logline``), searched over a whole block of lines in C; the
expression is built digit by digit, so ``100-131`` is `` 1(?:[0-2][0-9]|3[01])`` and the
engine never tries a list of alternatives one by one.
"""

from __future__ import annotations

import functools
import operator
import re
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from itertools import accumulate, chain, compress, islice, repeat

from slurm_ft import logline

# A rank set may be as large as the job; a written one as large as this (a typo such as
# 0-99999999 must not build a set of that size).
MAX_RANK = 10_000_000


class RankSetError(ValueError):
    """A rank list that cannot be read; the message says why."""


def parse(text: str, *, max_rank: int = MAX_RANK) -> frozenset[int]:
    """``"0,17,100-131"`` -> those ranks. Items are separated by commas (whitespace
    allowed), each a rank or an inclusive range ``lo-hi``; anything else is refused."""
    ranks: set[int] = set()
    items = [item.strip() for item in text.split(",")]
    if not any(items):
        raise RankSetError(f"no ranks in {text!r} (expected e.g. 0,17,100-131)")
    for item in items:
        if not item:
            continue
        lo_text, sep, hi_text = item.partition("-")
        lo_text, hi_text = lo_text.strip(), hi_text.strip()
        if not lo_text.isdigit() or (sep and not hi_text.isdigit()):
            raise RankSetError(f"not a rank or a range of ranks: {item!r} (expected e.g. 0,17,100-131)")
        lo = int(lo_text)
        hi = int(hi_text) if sep else lo
        if hi < lo:
            raise RankSetError(f"range {item!r} runs backwards")
        if hi > max_rank:
            raise RankSetError(f"rank {hi} in {item!r} is beyond any job ({max_rank} ranks at most)")
        ranks.update(range(lo, hi + 1))
    return frozenset(ranks)


def format_set(ranks: Iterable[int]) -> str:
    """The ranks as short hostlist-style ranges: ``0-511,513-1023`` (sorted, no repeats)."""
    values = sorted(ranks if isinstance(ranks, set | frozenset) else set(ranks))
    if len(values) <= 1:
        return str(values[0]) if values else ""
    if values[-1] - values[0] == len(values) - 1:  # one range: the common case, no loop
        return f"{values[0]}-{values[-1]}"
    out: list[str] = []
    start = prev = values[0]
    for r in values[1:]:
        if r == prev + 1:
            prev = r
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = r
    out.append(str(start) if start == prev else f"{start}-{prev}")
    return ",".join(out)


# Sets larger than this are formatted one by one (format_set finds a single range without
# a loop); smaller ones are formatted together by format_sets.
_BULK_MAX = 16
# Ranks below this are written from a table made once (a lookup, not a formatting).
_TABLE_SIZE = 1 << 16


@functools.cache
def _decimals() -> tuple[bytes, ...]:
    return tuple(b"%d" % r for r in range(_TABLE_SIZE))


def format_sets(sets: Sequence[Sequence[int]]) -> list[bytes]:
    """:func:`format_set` of each of many sets of ranks (each without repeats), as bytes.

    A collapse of per-rank numbers shows a million sets of a few ranks each, and one Python
    call per set cost more than folding the lines. Here the small sets are sorted and
    written by C-level calls over all of them; only a set with neighbouring ranks, which
    needs ranges, goes through :func:`format_set`. Neighbours are found as a step of 1
    between consecutive values of all the sets laid end to end (a step across two sets
    only costs a needless closer look).
    """
    big = list(compress(range(len(sets)), map(operator.gt, map(len, sets), repeat(_BULK_MAX))))
    small = list(sets)
    for k in big:
        small[k] = ()
    ordered = list(map(sorted, small))
    flat = list(chain.from_iterable(ordered))
    decimal = _decimals().__getitem__ if max(flat, default=0) < _TABLE_SIZE else b"%d".__mod__
    out = list(map(b",".join, map(map, repeat(decimal), ordered)))
    steps = list(map(operator.sub, islice(flat, 1, None), flat))
    if 1 in steps:
        ends = list(accumulate(map(len, ordered)))  # where each set ends in flat
        at = steps.index(1)
        while True:
            k = bisect_right(ends, at)  # the set that holds flat[at]
            out[k] = format_set(ordered[k]).encode()
            try:
                at = steps.index(1, ends[k])  # on from the next set
            except ValueError:
                break
    for k in big:
        out[k] = format_set(sets[k]).encode()
    return out


def _alternatives(strings: list[str]) -> str:
    """A regular expression matching exactly ``strings`` (all of one length, non-empty):
    first characters that lead to the same rest share a character class."""
    if len(strings[0]) == 1:
        return _char_class(sorted({s[0] for s in strings}))
    rest_by_first: dict[str, list[str]] = {}
    for s in strings:
        rest_by_first.setdefault(s[0], []).append(s[1:])
    firsts_by_rest: dict[str, list[str]] = {}
    for first, rests in sorted(rest_by_first.items()):
        firsts_by_rest.setdefault(_alternatives(sorted(set(rests))), []).append(first)
    branches = [_char_class(firsts) + rest for rest, firsts in firsts_by_rest.items()]
    return branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"


def _char_class(chars: list[str]) -> str:
    if len(chars) == 1:
        return re.escape(chars[0])
    if all(c.isdigit() for c in chars):
        digits = sorted(chars)
        runs: list[str] = []
        i = 0
        while i < len(digits):
            j = i
            while j + 1 < len(digits) and ord(digits[j + 1]) == ord(digits[j]) + 1:
                j += 1
            runs.append(digits[i] if i == j else f"{digits[i]}-{digits[j]}")
            i = j + 1
        return "[" + "".join(runs) + "]"
    return "[" + "".join(re.escape(c) for c in chars) + "]"


def prefix_pattern(ranks: Iterable[int], width: int) -> str:
    """The prefix text (right-aligned rank of ``width``, any mark) of every rank in ``ranks``,
    as a regular expression; matches nothing for an empty set."""
    texts = sorted({f"{r:>{width}}" for r in ranks if len(str(r)) <= width})
    if not texts:
        return "(?!)"
    marks = "".join(re.escape(m.decode()[0]) for m in logline.MARKS)
    return _alternatives(texts) + f"[{marks}] "


def line_finder(ranks: Iterable[int], width: int) -> re.Pattern[bytes]:
    """Finds, in a block that starts with ``\\n``, each line of ``ranks``: the match runs from
    the ``\\n`` before the line to the end of its text (its own ``\\n`` excluded)."""
    return re.compile(("\n" + prefix_pattern(ranks, width) + "[^\n]*").encode())
