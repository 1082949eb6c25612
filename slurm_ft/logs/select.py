"""Select lines of a cycle's log: by rank, by a pattern, merged over per-node files.

Speed is the design constraint (a 1 GB cycle file, hundreds of MB/s, two loaded cores):
nothing here calls Python code per line of input. Files are read in blocks of whole
lines; a block starts with the ``\\n`` that ended the previous one, so every line of it
is ``\\n<prefix><text>`` and one regular expression (``ranks.line_finder``) or one
``bytes.find`` finds the wanted lines in C. Python runs once per *selected run* of lines
(a rank's lines come in runs: the launcher writes what one read of a pipe gave). Memory is
one block per file plus the output being built, whatever the file's size.

A pattern (``--grep``) is searched in the text a worker wrote, not in the rank prefix:
a hit is checked against its line's text (after the prefix), so ``--grep 17`` does not
pick every line of rank 17, and ``^``/``$`` anchor at the text's start and end (a pattern
with ``^`` is checked line by line, which is slower).
"""

from __future__ import annotations

import heapq
import re
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from slurm_ft import logline
from slurm_ft.logs import ranks as ranks_mod

BLOCK_SIZE = 1 << 20  # measured: 4 MiB blocks read a third slower (they leave the CPU's caches)
MERGE_BLOCK_SIZE = 256 << 10  # several files: smaller blocks interleave them more finely
_REGEX_CHARS = frozenset(".^$*+?{}[]\\|()")
# A pattern with one of these can match differently in a line's text than in the block
# around it (where the rank prefix and the newline precede the text).
_TEXT_START_SENSITIVE = ("^", "\\A", "\\Z", "\\B", "(?<")


def read_blocks(
    path: Path, block_size: int = BLOCK_SIZE, start: int = 0, end: int | None = None
) -> Iterator[bytes]:
    """Blocks of whole lines, each starting with ``\n`` and ending with ``\n``; an
    unterminated last line is given its ``\n``. ``start`` and ``end`` (None: the file's
    end, as it grows) are line starts (:func:`line_start`). OSError is the caller's to report.

    One reused buffer takes each read after the previous block's unfinished line, and each
    block is one copy out of it: a fresh ``read`` per block, sliced and joined to the
    carried line, cost three copies and a new allocation each time (measured: reading
    alone went from about 0.4-1 GB/s to 1.4 GB/s on a loaded machine).
    """
    buf = bytearray(2 * block_size)
    buf[0:1] = b"\n"
    have = 1  # bytes of buf in use: "\n" + the unfinished line carried over
    view = memoryview(buf)
    try:
        with open(path, "rb", buffering=0) as fh:
            if start:
                fh.seek(start)
            left = -1 if end is None else end - start  # bytes still to read; -1: all
            while left:
                if len(buf) - have < block_size:  # a line longer than a block: grow
                    view.release()
                    buf.extend(bytes(block_size))
                    view = memoryview(buf)
                want = block_size if left < 0 else min(block_size, left)
                n = fh.readinto(view[have : have + want])
                if not n:
                    break
                if left > 0:
                    left -= n
                filled = have + n
                cut = buf.rfind(b"\n", 0, filled)
                if cut <= 0:  # no line finished yet
                    have = filled
                    continue
                yield bytes(view[: cut + 1])
                carried = bytes(view[cut:filled])
                buf[: len(carried)] = carried
                have = len(carried)
            if have > 1:
                yield bytes(view[:have]) + b"\n"
    finally:
        view.release()


def _class_end(pattern: str, i: int) -> int:
    """Index after the character class that starts at ``pattern[i] == "["``; -1 if open."""
    k = i + 1
    if pattern[k : k + 1] == "^":
        k += 1
    if pattern[k : k + 1] == "]":  # a "]" first in a class is a literal
        k += 1
    while k < len(pattern):
        if pattern[k] == "\\":
            k += 2
        elif pattern[k] == "]":
            return k + 1
        else:
            k += 1
    return -1


def required_literal(pattern: str, shortest: int = 3) -> str | None:
    """The longest run of plain characters that every match of ``pattern`` contains, or
    None. Only for patterns without alternation, groups or flags (``|``, ``(``): there a
    run of single characters, none of them optional, appears in every match; an escaped
    punctuation character counts as itself, a class or ``\\d`` ends a run."""
    if "|" in pattern or "(" in pattern:
        return None
    best = run = ""
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        literal: str | None
        if c == "[":
            literal, i = None, _class_end(pattern, i)
            if i < 0:
                return None
        elif c == "\\":
            if i + 1 >= n:
                return None
            literal = pattern[i + 1] if not pattern[i + 1].isalnum() else None
            i += 2
        elif c in ".^$":
            literal, i = None, i + 1
        elif c in "*?+{":
            return None  # a quantifier on nothing, or a brace this scan does not read
        else:
            literal, i = c, i + 1
        q = pattern[i : i + 1]
        quantified = q in ("*", "?", "+", "{")
        optional = q in ("*", "?") or (q == "{" and re.match(r"\{[1-9]", pattern[i:]) is None)
        if q in ("*", "?", "+"):
            i += 1
        elif q == "{":
            k = pattern.find("}", i)
            if k < 0:
                return None
            i = k + 1
        if quantified and pattern[i : i + 1] in ("?", "+"):  # lazy or possessive
            i += 1
        if literal is None or optional:
            run = ""
            continue
        run += literal
        if len(run) > len(best):
            best = run
        if quantified:  # repeated: in every match, but the next token need not follow it
            run = ""
    return best if len(best) >= shortest else None


@dataclass(frozen=True)
class Selection:
    """What to keep. ``ranks`` None: every rank; ``pattern`` None: every line."""

    ranks: frozenset[int] | None = None
    pattern: str | None = None


class LineFilter:
    """A :class:`Selection` compiled for one cycle's prefix width: ``pieces(block)`` gives
    the selected lines of a block as a few byte strings of whole lines, in order."""

    def __init__(self, selection: Selection, world_size: int) -> None:
        width = logline.rank_width(world_size)
        self.prefix_length = width + len(logline.LINE_MARK)
        ranks = selection.ranks
        if ranks is not None and ranks >= frozenset(range(world_size)):
            ranks = None  # every rank of the cycle: no filter
        self.ranks = ranks
        self._keep_prefixes: frozenset[bytes] | None = None
        self._finder: re.Pattern[bytes] | None = None
        self._drop_finder: re.Pattern[bytes] | None = None
        if ranks is not None:
            self._keep_prefixes = frozenset(
                logline.rank_prefix(r, width, mark) for r in ranks for mark in logline.MARKS
            )
            others = set(range(world_size)) - ranks
            if len(ranks) <= len(others):
                self._finder = ranks_mod.line_finder(ranks, width)
            else:  # most ranks: find the few lines to leave out
                self._drop_finder = ranks_mod.line_finder(others, width)
        self._fixed: bytes | None = None
        self._regex: re.Pattern[bytes] | None = None
        self._per_line = False
        self._words: tuple[bytes, ...] = ()
        if selection.pattern is not None:
            text = selection.pattern
            if not (_REGEX_CHARS & set(text)):
                self._fixed = text.encode()
            else:
                self._regex = re.compile(text.encode(errors="surrogateescape"), re.MULTILINE)
                # what tells a text's start from a line's: checked line by line, on the text
                self._per_line = any(t in text for t in _TEXT_START_SENSITIVE)
                words = text.split("|")
                if all(w and not (_REGEX_CHARS & set(w)) for w in words):
                    # ``loss|NaN``: the regex engine tries every position for an
                    # alternation; each word is found by bytes.find instead
                    self._words = tuple(w.encode() for w in words)
                elif (needed := required_literal(text)) is not None and not self._per_line:
                    # ``[Ee]rror``: the engine tries every position when a pattern does
                    # not start with a literal; a text every match contains is found by
                    # bytes.find, and only its lines are matched
                    self._words = (needed.encode(),)
        self.everything = ranks is None and selection.pattern is None

    # ------------------------------------------------------------------ per block

    def pieces(self, block: bytes) -> list[bytes]:
        if self.everything:
            return [block[1:]] if len(block) > 1 else []
        if self._per_line:
            return self._line_by_line(block)
        if self._fixed is not None or self._regex is not None:
            return self._search(block)
        if self._finder is not None:
            return self._runs(block, self._finder)
        assert self._drop_finder is not None
        return self._gaps(block, self._drop_finder)

    @staticmethod
    def _runs(block: bytes, finder: re.Pattern[bytes]) -> list[bytes]:
        out: list[bytes] = []
        start = end = -1
        for m in finder.finditer(block):
            s, e = m.span()
            if s == end:
                end = e
                continue
            if start >= 0:
                out.append(block[start + 1 : end + 1])
            start, end = s, e
        if start >= 0:
            out.append(block[start + 1 : end + 1])
        return out

    @staticmethod
    def _gaps(block: bytes, finder: re.Pattern[bytes]) -> list[bytes]:
        out: list[bytes] = []
        keep_from = 1
        for m in finder.finditer(block):
            s, e = m.span()
            if s + 1 > keep_from:
                out.append(block[keep_from : s + 1])
            keep_from = e + 1
        if keep_from < len(block):
            out.append(block[keep_from:])
        return out

    def _wanted(self, block: bytes, start: int, end: int) -> bool:
        """Whether the line ``block[start:end]`` (no ``\\n``) passes the rank set and the
        pattern, checked against its text only."""
        p = self.prefix_length
        if self._keep_prefixes is not None and block[start : start + p] not in self._keep_prefixes:
            return False
        if self._fixed is not None:
            return block.find(self._fixed, start + p, end) >= 0
        if self._regex is not None:
            return self._regex.search(block[start + p : end]) is not None
        return True

    def _search(self, block: bytes) -> list[bytes]:
        out: list[bytes] = []
        fixed, regex, words = self._fixed, self._regex, self._words
        pos, n = 1, len(block)
        run_start = run_end = -1
        next_at = [-1] * len(words)  # each word's next hit at or after pos (n: none left)
        while pos < n:
            if fixed is not None:
                hit = block.find(fixed, pos)
            elif words:
                for k, word in enumerate(words):
                    if next_at[k] < pos:
                        found = block.find(word, pos)
                        next_at[k] = found if found >= 0 else n
                hit = min(next_at)
                if hit >= n:
                    hit = -1
            else:
                assert regex is not None
                m = regex.search(block, pos)
                hit = m.start() if m is not None else -1
            if hit < 0:
                break
            start = block.rfind(b"\n", 0, hit) + 1
            if start == 0:  # the block's leading newline itself
                start = 1
            end = block.find(b"\n", max(hit, start))
            if self._wanted(block, start, end):
                if start == run_end + 1:
                    run_end = end
                else:
                    if run_start >= 0:
                        out.append(block[run_start : run_end + 1])
                    run_start, run_end = start, end
            pos = end + 1
        if run_start >= 0:
            out.append(block[run_start : run_end + 1])
        return out

    def _line_by_line(self, block: bytes) -> list[bytes]:
        out: list[bytes] = []
        start = 1
        n = len(block)
        while start < n:
            end = block.find(b"\n", start)
            if self._wanted(block, start, end):
                out.append(block[start : end + 1])
            start = end + 1
        return out


# ---------------------------------------------------------------------- many files


@dataclass(frozen=True)
class Span:
    """Whole lines of one file, from ``start`` to ``end`` (None: its end, as it grows);
    ``length``: the bytes expected (what paces a merge)."""

    path: Path
    start: int
    end: int | None
    length: int


def line_start(path: Path, offset: int, size: int) -> int:
    """The first line start at or after ``offset`` in a file of ``size`` bytes (``size``
    when no line starts there)."""
    if offset <= 0:
        return 0
    with open(path, "rb", buffering=0) as fh:
        fh.seek(offset - 1)
        at = offset - 1
        while at < size:
            chunk = fh.read(64 << 10)
            if not chunk:
                break
            found = chunk.find(b"\n")
            if found >= 0:
                return min(size, at + found + 1)
            at += len(chunk)
    return size


def merged_blocks(paths: list[Path], sizes: list[int]) -> Iterator[bytes]:
    """The blocks of several whole files (see :func:`merged_spans`)."""
    return merged_spans([Span(p, 0, None, n) for p, n in zip(paths, sizes, strict=True)])


def merged_spans(spans: list[Span]) -> Iterator[bytes]:
    """The blocks of several files' spans, interleaved so that each is read at the pace of
    its length: the next block always comes from the span least far through, the first
    of them on a tie (each rank's lines stay in order, since a rank's lines are all in one
    node's file). A heap picks it, so a merge of the 4,096 per-node files of a big job
    costs a log of the files per block, not the files themselves (#45)."""
    if len(spans) == 1:
        one = spans[0]
        yield from read_blocks(one.path, start=one.start, end=one.end)
        return
    readers = [SpanReader(s, MERGE_BLOCK_SIZE) for s in spans]
    buf = bytearray(2 * MERGE_BLOCK_SIZE)
    sizes = [s.length for s in spans]
    done = [0] * len(spans)
    heap = [(0.0 if sizes[k] else 1.0, k) for k in range(len(spans))]
    heapq.heapify(heap)
    while heap:
        _, k = heap[0]
        block = readers[k].next_block(buf)
        if block is None:
            heapq.heappop(heap)
            continue
        done[k] += len(block) - 1
        heapq.heapreplace(heap, ((done[k] / sizes[k]) if sizes[k] else 1.0, k))
        yield block


class SpanReader:
    """One span read a block at a time (the blocks of :func:`read_blocks`), its file open
    only while a block is read: a merge of thousands of per-node files holds neither a
    descriptor per file (a soft open-files limit of 1,024 is common) nor a buffer per
    file, only each file's unfinished line. The merge's readers share one buffer (one
    reads at a time), which each read fills after the carried line, as
    :func:`read_blocks` does: a block is one copy out of it."""

    def __init__(self, span: Span, block_size: int) -> None:
        self.path = span.path
        self.offset = span.start
        self.left = -1 if span.end is None else span.end - span.start  # -1: to the end
        self.block_size = block_size
        self.carried = b""  # the unfinished line read so far
        self.at_end = False

    def next_block(self, buf: bytearray) -> bytes | None:
        """The next block of whole lines (``\\n`` first and last), None after the last."""
        while not self.at_end:
            have = 1 + len(self.carried)
            if len(buf) < have + self.block_size:
                buf.extend(bytes(have + self.block_size - len(buf)))
            buf[0:have] = b"\n" + self.carried
            with memoryview(buf) as view:
                filled = have + self._read_into(view[have : have + self.block_size])
                cut = buf.rfind(b"\n", 0, filled)
                if cut <= 0:  # no line finished yet
                    self.carried = bytes(view[1:filled])
                    continue
                self.carried = bytes(view[cut + 1 : filled])
                return bytes(view[: cut + 1])
        if self.carried:  # an unterminated last line, given its newline
            last, self.carried = self.carried, b""
            return b"\n" + last + b"\n"
        return None

    def _read_into(self, room: memoryview) -> int:
        """Up to a block of the span into ``room``; a short read that the file confirms is
        its end sets ``at_end`` (so a small file is opened once)."""
        want = len(room) if self.left < 0 else min(len(room), self.left)
        got = 0
        if want:
            with open(self.path, "rb", buffering=0) as fh:
                fh.seek(self.offset)
                while got < want:
                    n = fh.readinto(room[got:want])
                    if not n:
                        break
                    got += n
        if got < want or want == 0:
            self.at_end = True
        self.offset += got
        if self.left > 0:
            self.left -= got
        return got


# ---------------------------------------------------------------------- head / tail


def count_lines(pieces: Iterable[bytes]) -> int:
    return sum(p.count(b"\n") for p in pieces)


def head(pieces: Iterable[list[bytes]], n: int) -> Iterator[list[bytes]]:
    """The first ``n`` lines of a stream of piece lists."""
    left = n
    for batch in pieces:
        if left <= 0:
            return
        out = []
        for piece in batch:
            lines = piece.count(b"\n")
            if lines <= left:
                out.append(piece)
                left -= lines
                continue
            cut = -1
            for _ in range(left):
                cut = piece.find(b"\n", cut + 1)
            out.append(piece[: cut + 1])
            left = 0
            break
        yield out


class Tail:
    """The last ``n`` lines of what is fed, kept in whole pieces (memory: ``n`` lines plus
    one piece)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self._pieces: deque[tuple[bytes, int]] = deque()
        self._lines = 0

    def feed(self, pieces: Iterable[bytes]) -> None:
        for piece in pieces:
            lines = piece.count(b"\n")
            if not lines:
                continue
            self._pieces.append((piece, lines))
            self._lines += lines
            while self._pieces and self._lines - self._pieces[0][1] >= self.n:
                self._lines -= self._pieces.popleft()[1]

    def result(self) -> list[bytes]:
        out = [p for p, _ in self._pieces]
        extra = self._lines - self.n
        if out and extra > 0:
            first = out[0]
            cut = -1
            for _ in range(extra):
                cut = first.find(b"\n", cut + 1)
            out[0] = first[cut + 1 :]
        return [p for p in out if p] if self.n > 0 else []


def lines_of(pieces: Iterable[bytes]) -> Iterator[bytes]:
    """Each line (without its ``\\n``) of pieces of whole lines; per line, so only for
    what is shown (node prefixes, JSON), never for the scan."""
    for piece in pieces:
        parts = piece.split(b"\n")
        parts.pop()
        yield from parts
