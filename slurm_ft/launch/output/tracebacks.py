"""A worker's last Python traceback, found in the output the launcher already reads.

A crash says what happened only in the worker's own output: torch's ``@record`` error file
exists only for trainers that use it. The application log's reader keeps the end of every
worker's stream (:class:`StreamTail`), and when a worker fails its last traceback is parsed
from there (:func:`last_traceback`), so the cycle record, the console line and the report
can name the exception without anyone opening the cycle log.

Nothing is parsed on the busy path: a chunk costs one append to a bounded buffer (a
search of every chunk for the header had cost about three quarters of the framing
itself). A crash's traceback is the last thing its process writes, so the tail holds it.
Bounded: a traceback keeps at most :data:`MAX_LINES` lines and :data:`MAX_BYTES` bytes
(the frames nearest the error are kept, the oldest dropped). Lines are decoded leniently
(``replace``): this is for people to read; the log itself stays byte-exact.
"""

from __future__ import annotations

HEADER = b"Traceback (most recent call last):"
TAIL_BYTES = 128 * 1024
MAX_LINES = 60
MAX_BYTES = 16 * 1024
# A chained exception's links: the traceback goes on with another header after them.
_CHAIN_LINES = (
    "During handling of the above exception, another exception occurred:",
    "The above exception was the direct cause of the following exception:",
)


class StreamTail:
    """The last :data:`TAIL_BYTES` (or up to twice that) of one stream. One thread feeds
    it; :meth:`data` may be called from another (each step is one C call under the GIL)."""

    def __init__(self, limit: int = TAIL_BYTES) -> None:
        self.limit = limit
        self._buf = bytearray()

    def feed(self, data: bytes) -> None:
        if len(data) >= self.limit:
            self._buf = bytearray(memoryview(data)[-self.limit :])  # one copy
            return
        self._buf += data
        if len(self._buf) > 2 * self.limit:  # compact now and then: each byte moves twice at most
            del self._buf[: -self.limit]

    def data(self) -> bytes:
        return bytes(self._buf[-self.limit :])


def last_traceback(data: bytes) -> str | None:
    """The last Python traceback in ``data`` (header, frames, exception line), or None."""
    tail = TracebackTail()
    tail.feed(data)
    tail.end()
    return tail.last


class TracebackTail:
    """Fed one stream's bytes in order; :attr:`last` is the last complete traceback seen
    (header, frames, exception line) or None. Not thread-safe: one reader feeds it."""

    def __init__(self) -> None:
        self.last: str | None = None
        self._carry = b""  # the end of the last chunk, where a header may begin
        self._lines: list[str] | None = None  # the open traceback's lines
        self._size = 0
        self._dropped = 0
        self._partial = b""  # an unterminated line inside the open traceback

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        rest = bytes(data)  # no copy for the reader's bytes
        keep = len(HEADER) - 1
        while rest:
            if self._lines is None:
                # The last header only: an earlier one in the same chunk is not the last
                # traceback. The chunk is searched in place; only a header that straddles
                # two reads needs the few bytes carried over.
                at = rest.rfind(HEADER)
                if at >= 0:
                    rest = rest[at:]
                else:
                    seam = self._carry + rest[:keep]
                    at = seam.find(HEADER)
                    if at < 0:
                        self._carry = (self._carry + rest)[-keep:] if len(rest) < keep else rest[-keep:]
                        return
                    rest = seam[at:] + rest[keep:]
                self._carry = b""
                self._open()
            rest = self._take(rest)

    def end(self) -> None:
        """End of stream: a traceback cut short (the worker killed while printing it) still
        counts when it got past its header."""
        if self._lines is not None and len(self._lines) > 1:
            if self._partial:
                self._lines.append(self._partial.decode(errors="replace"))
            self._close()

    def _open(self) -> None:
        self._lines = []
        self._size = 0
        self._dropped = 0
        self._partial = b""

    def _take(self, data: bytes) -> bytes:
        """Lines of the open traceback; returns what follows it once it closed (ordinary
        output again), else b"" with an unterminated line kept for the next chunk."""
        data = self._partial + data
        self._partial = b""
        start = 0
        while self._lines is not None:
            end = data.find(b"\n", start)
            if end < 0:
                self._partial = data[start:][-MAX_BYTES:]
                return b""
            self._line(data[start:end].decode(errors="replace").rstrip("\r"))
            start = end + 1
        return data[start:]

    def _line(self, line: str) -> None:
        assert self._lines is not None
        if line.startswith(HEADER.decode()) and self._lines:
            self._open()  # a header inside a traceback: a new one begins (a chain's next link)
        self._lines.append(line)
        self._size += len(line) + 1
        while len(self._lines) > MAX_LINES or self._size > MAX_BYTES:
            dropped = self._lines.pop(1)  # keep the header
            self._size -= len(dropped) + 1
            self._dropped += 1
        if len(self._lines) > 1 and line and not line[0].isspace() and line not in _CHAIN_LINES:
            if line.startswith(HEADER.decode()):
                return
            self._close()

    def _close(self) -> None:
        assert self._lines is not None
        lines = self._lines
        if self._dropped:
            lines = [lines[0], f"  ... ({self._dropped} lines left out)", *lines[1:]]
        self.last = "\n".join(lines)
        self._lines = None
        self._carry = b""


def exception_line(traceback: str | None) -> str | None:
    """The traceback's last line, ``Type: text`` (what a failure's message says)."""
    if not traceback:
        return None
    last = traceback.rstrip("\n").rsplit("\n", 1)[-1].strip()
    return last or None
