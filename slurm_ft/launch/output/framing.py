"""Bytes of one worker's output stream -> whole, rank-prefixed lines (pure, no I/O).

The per-cycle log must be byte-exact, so nothing here decodes: lines are split on ``\\n``
only, and ``\\r`` progress bars or UTF-8 characters that straddle a read boundary pass
through untouched because the partial line is simply kept until its ``\\n`` arrives.

Throughput is the other constraint (GB/s from one Python thread): per-line Python work is
far too slow for 100-byte lines, so the common case prefixes a whole chunk of complete lines
with one ``bytes.replace`` that runs in C, over the whole chunk as read (no slice first),
and hands back pieces (:meth:`LineFramer.feed_parts`) that the writer passes to one
``writev`` instead of joining them: the chunk is copied once in user space, by the
replace. The per-line path is taken only when a line could exceed the cap, which with the
default sizes (read 1 MiB, cap 1 MiB) only happens for genuinely long lines.

The line format (rank prefix and marks) lives in ``slurm_ft.logline``, which the reader
(``slurm-ft-logs``) shares; concatenating a line's pieces (``": "`` then ``"+ "`` marks)
without their added ``\\n`` gives back the original line exactly.
"""

from __future__ import annotations

from typing import TypeAlias

from slurm_ft.logline import CONTINUATION_MARK, LINE_MARK, NOTE_MARK, rank_prefix

# What feed_parts hands out: pieces to write in order; one writev takes them all.
Part: TypeAlias = bytes | bytearray | memoryview


def utf8_cut(buf: bytes | bytearray, cap: int) -> int:
    """Cut position at most ``cap`` that does not split a UTF-8 character.

    Moves back over at most three continuation bytes (the longest UTF-8 sequence has
    three); bytes that are not UTF-8 at all are cut at ``cap``. Requires ``len(buf) > cap``.
    """
    for j in (cap, cap - 1, cap - 2, cap - 3):
        if j <= 0:
            break
        if buf[j] & 0xC0 != 0x80:
            return j
    return cap


class LineFramer:
    """Per-stream state: the unterminated tail of the last read, bounded by ``cap``.

    Memory per stream is at most ``cap`` bytes of pending data plus the output of one feed.
    """

    def __init__(self, global_rank: int, width: int, cap: int) -> None:
        if cap < 4:
            raise ValueError(f"line cap must be >= 4 bytes, got {cap}")
        self.cap = cap
        self.prefix = rank_prefix(global_rank, width, LINE_MARK)
        self.cont_prefix = rank_prefix(global_rank, width, CONTINUATION_MARK)
        self.note_prefix = rank_prefix(global_rank, width, NOTE_MARK)
        self._nl_prefix = b"\n" + self.prefix
        self._pending = bytearray()
        self._cont = False
        self.split_lines = 0

    @property
    def pending_bytes(self) -> int:
        return len(self._pending)

    def _piece(self, parts: list[Part], piece: bytes | bytearray) -> None:
        if not self._cont:
            self.split_lines += 1
        parts.append((self.cont_prefix if self._cont else self.prefix) + piece + b"\n")
        self._cont = True

    def _line(self, parts: list[Part], line: bytes | bytearray) -> None:
        """Emit one complete line (without its ``\\n``), in pieces if it exceeds the cap."""
        while len(line) > self.cap:
            cut = utf8_cut(line, self.cap)
            self._piece(parts, line[:cut])
            line = line[cut:]
        parts.append((self.cont_prefix if self._cont else self.prefix) + line + b"\n")
        self._cont = False

    def _spill(self, parts: list[Part]) -> None:
        """Keep the pending partial line within the cap by emitting leading pieces."""
        pending = self._pending
        if len(pending) <= self.cap:
            return
        start = 0
        while len(pending) - start > self.cap:
            view = pending[start : start + self.cap + 1]
            cut = utf8_cut(view, self.cap)
            self._piece(parts, view[:cut])
            start += cut
        del pending[:start]

    def feed_parts(self, data: bytes) -> tuple[list[Part], int]:
        """Framed output for ``data``: whole prefixed lines only (possibly none), as pieces
        to write in order, and how many lines that is (counted from lengths, because
        ``bytes.count`` is slow). The pieces are valid until the next call."""
        nl = data.rfind(b"\n")
        parts: list[Part] = []
        if nl < 0:
            self._pending += data
            self._spill(parts)
            return parts, len(parts)
        first = data.find(b"\n")
        cap = self.cap
        if not self._cont and len(self._pending) + first <= cap and nl - first - 1 <= cap:
            # One C-level replace prefixes every line of the chunk. It runs over the whole
            # chunk, so the tail after the last newline gets a prefix too; the view stops
            # before that prefix instead of slicing the chunk first (a copy).
            body = data.replace(b"\n", self._nl_prefix)
            width = len(self.prefix)
            end = len(body) - (len(data) - nl - 1) - width
            lines = 1 + (end - nl - 1) // width
            parts.append(self.prefix)
            if self._pending:
                parts.append(self._pending)
            parts.append(memoryview(body)[:end])
            self._pending = bytearray(data[nl + 1 :])
            if len(self._pending) > cap:
                extra: list[Part] = []
                self._spill(extra)
                return parts + extra, lines + len(extra)
            return parts, lines
        split = data[:nl].split(b"\n")
        self._line(parts, bytes(self._pending) + split[0] if self._pending else split[0])
        for line in split[1:]:
            self._line(parts, line)
        self._pending = bytearray(data[nl + 1 :])
        self._spill(parts)
        return parts, len(parts)

    def finish(self) -> tuple[bytes, int]:
        """End of stream: the unterminated last line, given the ``\n`` it never got."""
        if not self._pending:
            self._cont = False
            return b"", 0
        parts: list[Part] = []
        self._line(parts, bytes(self._pending))
        self._pending = bytearray()
        return b"".join(parts), len(parts)

    def note(self, message: str) -> bytes:
        """A launcher note about this stream, marked so that it cannot pass for output."""
        return self.note_prefix + message.replace("\n", " ").encode() + b"\n"
