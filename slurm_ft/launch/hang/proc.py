"""The readings from /proc that the hang rules judge: the bytes a worker wrote and read,
and its process state (the held states the warm-up does not excuse)."""

from __future__ import annotations


def bytes_written(pid: int) -> int | None:
    """``wchar`` of /proc/<pid>/io: every byte the process passed to write(2), or None."""
    return _io_count(pid, b"wchar:")


def bytes_read(pid: int) -> int | None:
    """``rchar`` of /proc/<pid>/io: every byte read(2) returned to the process, or None."""
    return _io_count(pid, b"rchar:")


def _io_count(pid: int, field: bytes) -> int | None:
    try:
        with open(f"/proc/{pid}/io", "rb") as fh:
            for line in fh:
                if line.startswith(field):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


STOPPED_STATES = ("T", "t")  # /proc/<pid>/stat: stopped by a signal, stopped by a tracer
# A rank in these states is not compiling, loading or evaluating: stopped, or asleep in the
# kernel where no signal reaches it (a dead mount, a wedged driver) and reading nothing: a
# checkpoint load from a slow file system sleeps in D too, but its read bytes move. Seen in
# one at every look of a silence, the warm-up does not apply (:func:`learn.stopped_limit`).
# A rank in a collective spins (R) or sleeps interruptibly (S): never taken for held.
UNINTERRUPTIBLE = "D"
HELD_STATES = (*STOPPED_STATES, UNINTERRUPTIBLE)


def process_state(pid: int) -> str | None:
    """The state letter of /proc/<pid>/stat (after the command's closing parenthesis), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 1 :].split()
    return fields[0].decode(errors="replace") if fields else None
