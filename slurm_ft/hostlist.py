"""Slurm hostlist expressions: ``node[01-04,07],login1`` <-> a list of host names.

Written here rather than taken from python-hostlist (GPL). The behaviour follows what
``scontrol show hostnames`` of Slurm 22.05 prints, which the unit tests compare against:

- items are separated by commas (and whitespace); empty items are skipped;
- a range takes its zero-padding width from its low bound: ``n[08-10]`` is n08 n09 n10,
  ``n[8-10]`` is n8 n9 n10, ``n[01-3]`` is n01 n02 n03;
- duplicates and the written order are kept: ``n[3,1,1]`` is n3 n1 n1;
- several bracket groups in one name vary in Slurm's order, which is not the plain
  odometer: the last group varies fastest, then the first, the second, ... and the
  second-to-last slowest (``a[1-2]b[1-2]c[1-2]`` is a1b1c1 a1b1c2 a2b1c1 a2b1c2 a1b2c1 ...).

Where Slurm 22.05 is lax or odd we are strict, because a node list we misread would start
a job on the wrong nodes: reversed ranges (``n[5-3]``), empty ranges, non-digits, nested or
unbalanced brackets are a :class:`HostlistError`. One extension: text after the last
bracket (``node[1-3].ib``) is kept as a suffix; Slurm 22.05 rejects it, newer tools accept it.

A size cap bounds every expansion before anything is allocated, so ``n[0-999999999]`` fails
at once instead of eating the node's memory.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from dataclasses import dataclass

DEFAULT_MAX_HOSTS = 65536

_RANGE_RE = re.compile(r"([0-9]+)(?:-([0-9]+))?")
_SEPARATORS = frozenset(", \t\n\r")
_FORBIDDEN_IN_NAME_RE = re.compile(r"[\[\],\s]")
_DIGITS = "0123456789"


class HostlistError(ValueError):
    """A hostlist expression or host name that cannot be used; the message says why."""


@dataclass(frozen=True)
class _Range:
    """One numeric range of a hostlist bracket; ``width`` keeps zero padding (node001)."""

    lo: int
    hi: int
    width: int

    @property
    def size(self) -> int:
        return self.hi - self.lo + 1

    def names(self) -> Iterable[str]:
        return (f"{v:0{self.width}d}" for v in range(self.lo, self.hi + 1))


@dataclass(frozen=True)
class _Item:
    """One comma-separated name: literal texts interleaved with bracket groups.

    ``texts`` has one more element than ``groups``: texts[0] group[0] texts[1] ... texts[-1].
    """

    texts: tuple[str, ...]
    groups: tuple[tuple[_Range, ...], ...]

    def count(self) -> int:
        n = 1
        for group in self.groups:
            n *= sum(r.size for r in group)
        return n

    def expand(self) -> list[str]:
        if not self.groups:
            return [self.texts[0]]
        values = [[name for r in group for name in r.names()] for group in self.groups]
        n = len(self.groups)
        if n == 1:
            head, tail = self.texts
            return [f"{head}{v}{tail}" for v in values[0]]
        # Slurm's nesting, outermost first: groups n-2, n-3, ..., 0, then n-1 innermost.
        order = [*range(n - 2, -1, -1), n - 1]
        slot = [order.index(i) for i in range(n)]
        out = []
        for combo in itertools.product(*(values[i] for i in order)):
            parts = [self.texts[0]]
            for i in range(n):
                parts.append(combo[slot[i]])
                parts.append(self.texts[i + 1])
            out.append("".join(parts))
        return out


def _parse_group(expr: str, body: str) -> tuple[_Range, ...]:
    ranges = []
    for part in body.split(","):
        m = _RANGE_RE.fullmatch(part)
        if m is None:
            what = "an empty range" if part == "" else f"range {part!r}"
            raise HostlistError(f"invalid hostlist {_shorten(expr)!r}: {what} in [{body}] is not N or N-M")
        lo_s, hi_s = m.group(1), m.group(2)
        lo = int(lo_s)
        hi = lo if hi_s is None else int(hi_s)
        if hi < lo:
            raise HostlistError(f"invalid hostlist {_shorten(expr)!r}: range {part} is reversed")
        ranges.append(_Range(lo, hi, len(lo_s)))
    return tuple(ranges)


def _parse(expr: str) -> list[_Item]:
    items: list[_Item] = []
    texts: list[str] = []
    groups: list[tuple[_Range, ...]] = []
    current: list[str] = []
    i, n = 0, len(expr)

    def finish_item() -> None:
        texts.append("".join(current))
        current.clear()
        if groups or texts[0]:
            items.append(_Item(tuple(texts), tuple(groups)))
        texts.clear()
        groups.clear()

    where = f"invalid hostlist {_shorten(expr)!r}"
    while i < n:
        ch = expr[i]
        if ch in _SEPARATORS:
            finish_item()
            i += 1
        elif ch == "[":
            close = expr.find("]", i + 1)
            nested = expr.find("[", i + 1)
            if close < 0:
                raise HostlistError(
                    f"invalid hostlist {_shorten(expr)!r}: '[' at position {i} is never closed"
                )
            if 0 <= nested < close:
                raise HostlistError(f"{where}: nested '[' at position {nested}")
            texts.append("".join(current))
            current.clear()
            groups.append(_parse_group(expr, expr[i + 1 : close]))
            i = close + 1
        elif ch == "]":
            raise HostlistError(
                f"invalid hostlist {_shorten(expr)!r}: ']' at position {i} has no matching '['"
            )
        else:
            current.append(ch)
            i += 1
    finish_item()
    return items


def count(expr: str) -> int:
    """How many names ``expr`` stands for, without expanding it."""
    return sum(item.count() for item in _parse(expr))


def expand(expr: str, *, max_hosts: int = DEFAULT_MAX_HOSTS) -> list[str]:
    """The host names of ``expr`` in Slurm's order, duplicates kept.

    Raises :class:`HostlistError` for malformed input and when the expression stands for
    more than ``max_hosts`` names (checked before expanding).
    """
    items = _parse(expr)
    total = 0
    for item in items:
        total += item.count()
        if total > max_hosts:
            raise HostlistError(
                f"hostlist {_shorten(expr)!r} stands for more than {max_hosts} hosts (the limit)"
            )
    return [name for item in items for name in item.expand()]


@dataclass
class _Run:
    """Consecutive numbers of one bracket: the first as written (its zero padding) and the
    first and last values."""

    lo_text: str
    lo: int
    hi: int


def compress(hosts: Iterable[str]) -> str:
    """A short expression that :func:`expand` (and Slurm) turns back into exactly ``hosts``.

    Order is kept, so only neighbouring names with the same prefix share a bracket; the
    numeric part is the run of digits at the end of a name (``node1.ib`` stays as it is,
    because Slurm 22.05 cannot read a suffix after a bracket).
    """
    out: list[str] = []
    # The bracket being built: its prefix and runs.
    prefix: str | None = None
    ranges: list[_Run] = []

    def flush() -> None:
        if prefix is None:
            return
        if len(ranges) == 1 and ranges[0].lo == ranges[0].hi:
            out.append(prefix + ranges[0].lo_text)
            return
        body = ",".join(
            r.lo_text if r.lo == r.hi else f"{r.lo_text}-{_format(r.hi, len(r.lo_text))}" for r in ranges
        )
        out.append(f"{prefix}[{body}]")

    for host in hosts:
        if not host or _FORBIDDEN_IN_NAME_RE.search(host):
            raise HostlistError(f"host name {host!r} cannot be written in a hostlist")
        head = host.rstrip(_DIGITS)
        digits = host[len(head) :]
        if not digits:
            flush()
            prefix, ranges = None, []
            out.append(host)
            continue
        value = int(digits)
        if head == prefix:
            last = ranges[-1]
            if value == last.hi + 1 and digits == _format(value, len(last.lo_text)):
                last.hi = value
            else:
                ranges.append(_Run(digits, value, value))
        else:
            flush()
            prefix, ranges = head, [_Run(digits, value, value)]
    flush()
    return ",".join(out)


def _format(value: int, width: int) -> str:
    return f"{value:0{width}d}"


def _shorten(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
