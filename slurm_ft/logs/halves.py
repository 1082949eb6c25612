"""``--collapse`` of a big cycle in two processes: a second core takes the log's second half.

Why: the collapse counts every line with C-level calls, yet the interpreter still pays for
each distinct line (hashing, folding by text), about 4 s a GB on this project's 2-core
machine: below the 300 MB/s the command is held to, and no per-line trick was left
(measured: docs/benchmarks.md, figure 9). A log's halves count independently, so a forked
child collapses the second half while this process collapses the first; the output is the
same as one process's but for where a long log's windows break.

The seam: the first half's last window and the second half's first are joined when their
distinct lines fit one count table (:meth:`Collapser.joined`), so a log of few distinct
lines is one window however it was cut. The child writes its first window as counted, then
its other windows rendered, into an unlinked temporary file (never into the output: only
this process writes there, in order); this process copies it after its own. If the child
fails in any way, this process collapses the second half itself: the output never depends
on the child. The child dies with this process (``PR_SET_PDEATHSIG``) and is always reaped.
"""

from __future__ import annotations

import array
import contextlib
import os
import shutil
import signal
import struct
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

from slurm_ft import parentdeath
from slurm_ft.logs import select
from slurm_ft.logs.collapse import Collapser, Window

# Below this a second process costs more than it saves (a fork, a temporary file) and the
# collapse takes a fraction of a second anyway.
MIN_BYTES = 32 << 20
_HEAD = struct.Struct("<QQB")  # pairs' bytes, pair count, whether more windows follow

Pieces = Callable[[bytes], list[bytes]]
Show = Callable[[list[Window], BinaryIO], None]


def cores() -> int:
    """The cores this process may run on (its affinity, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def worth_it(total_bytes: int, usable: int) -> bool:
    return usable >= 2 and total_bytes >= MIN_BYTES


def split(paths: list[Path], sizes: list[int]) -> tuple[list[select.Span], list[select.Span]]:
    """Each file cut at the first line start from its middle: the first halves (to the
    cut) and the second (from it to the end, as it grows)."""
    first: list[select.Span] = []
    second: list[select.Span] = []
    for path, size in zip(paths, sizes, strict=True):
        cut = select.line_start(path, size // 2, size)
        first.append(select.Span(path, 0, cut, cut))
        second.append(select.Span(path, cut, None, size - cut))
    return first, second


def collapse(
    paths: list[Path],
    sizes: list[int],
    pieces: Pieces,
    folder: Callable[[bool], Collapser],
    show: Show,
    out: BinaryIO,
) -> None:
    """Collapse the files into ``out`` with a child taking their second halves.

    ``pieces``: a block's selected lines; ``folder(hold_first)``: a fresh collapser;
    ``show``: writes windows (rendered or as JSON)."""
    first, second = split(paths, sizes)
    mine = folder(False)
    with contextlib.ExitStack() as stack:
        try:
            spool = stack.enter_context(tempfile.TemporaryFile())
            child = _fork_child(lambda: _second_half(second, pieces, folder(True), show, spool))
        except OSError:  # no room for the child's output, or no child: one process
            fold(mine, (pieces(b) for b in select.merged_blocks(paths, sizes)), show, out)
            return
        try:
            fold(mine, _of(first, pieces), show, out, finish=False)
            status = _reap(child)
            child = 0
            head = _read_head(spool) if status == 0 else None
            if head is None:  # the child failed: this process does its half too
                fold(mine, _of(second, pieces), show, out)
                return
            counts, more = head
            show(mine.joined(mine.open_window(), counts, more), out)
            shutil.copyfileobj(spool, out, 1 << 20)
        finally:
            if child:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child, signal.SIGKILL)
                _reap(child)


def fold(
    folder: Collapser, batches: Iterable[list[bytes]], show: Show, out: BinaryIO, finish: bool = True
) -> None:
    """Collapse ``batches`` of lines in this process, each window shown once it fills."""
    for batch in batches:
        folder.feed(batch)
        show(folder.take(), out)
    if finish:
        show(folder.finish(), out)


def _of(spans: list[select.Span], pieces: Pieces) -> Iterator[list[bytes]]:
    return (pieces(block) for block in select.merged_spans(spans))


def _fork_child(work: Callable[[], None]) -> int:
    """Run ``work`` in a forked child that ends with status 0 only when it completed."""
    die_with_parent = parentdeath.hook(os.getpid())
    pid = os.fork()
    if pid:
        return pid
    status = 1
    try:
        die_with_parent()
        work()
        status = 0
    except BaseException:  # any failure: the parent redoes the work
        status = 1
    finally:
        os._exit(status)


def _reap(pid: int) -> int:
    """The child's exit status (1 for a signal)."""
    while True:
        try:
            _, status = os.waitpid(pid, 0)
        except InterruptedError:
            continue
        except ChildProcessError:
            return 1
        code = os.waitstatus_to_exitcode(status)
        return code if code >= 0 else 1


def _second_half(
    spans: list[select.Span], pieces: Pieces, folder: Collapser, show: Show, spool: BinaryIO
) -> None:
    """The child's work: its first window as counted, then the rest rendered."""
    pending: list[Window] = []
    head_written = False
    for block in select.merged_spans(spans):
        folder.feed(pieces(block))
        pending += folder.take()
        if not head_written and folder.held is not None:
            _write_head(spool, folder.held, more=True)
            head_written = True
        if head_written and pending:
            show(pending, spool)
            pending = []
    if not head_written:
        _write_head(spool, folder.open_window(), more=False)
    else:
        show(pending + folder.finish(), spool)
    spool.flush()


def _write_head(spool: BinaryIO, counts: Counter[bytes], more: bool) -> None:
    pairs = b"\n".join(counts)
    spool.write(_HEAD.pack(len(pairs), len(counts), more))
    spool.write(pairs)
    spool.write(array.array("q", counts.values()).tobytes())


def _read_head(spool: BinaryIO) -> tuple[Counter[bytes], bool] | None:
    """The child's first window, the spool left at its rendered windows; None when the
    spool does not hold a whole head (a child that died before writing it)."""
    spool.seek(0)
    raw = spool.read(_HEAD.size)
    if len(raw) != _HEAD.size:
        return None
    size, n, more = _HEAD.unpack(raw)
    pairs = spool.read(size)
    counts = array.array("q")
    values = spool.read(n * counts.itemsize)
    if len(pairs) != size or len(values) != n * counts.itemsize:
        return None
    counts.frombytes(values)
    keys = pairs.split(b"\n") if n else []
    if len(keys) != n:
        return None
    return Counter(dict(zip(keys, counts, strict=True))), bool(more)
