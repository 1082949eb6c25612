"""Which tests may share the machine with another pytest-xdist worker's test.

A test marked ``heavy`` (thousands of launcher threads, say) takes the two cores for
itself: beside it a timing-sensitive test in the other worker misses its heart-beats (a
launcher "silent for 6.0 s" while 2,048 launchers rendezvoused next door). So every test
holds a share of the machine while it runs: a heavy test the whole of it, any other test a
part that others may hold too. The shares are ``flock`` locks on files in a directory
the run's main process makes (:func:`made_for_this_run`) and names to its workers in the
environment they inherit, so that two runs on one machine do not wait on each other.

A gate comes first, so that a heavy test waiting for the machine is not passed over for
ever by the other worker's next test and the next: a shared taker passes the gate and
leaves it; a heavy one holds it until it holds the machine.
"""

from __future__ import annotations

import contextlib
import enum
import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


class Share(enum.Enum):
    WHOLE = "whole"
    PART = "part"


LOCKS_VAR = "SLURM_FT_TEST_MACHINE_LOCKS"


def lock_dir() -> Path | None:
    """This run's directory of locks; None where no run made one (a test run by hand)."""
    where = os.environ.get(LOCKS_VAR)
    return Path(where) if where else None


@contextlib.contextmanager
def made_for_this_run() -> Iterator[None]:
    """In the run's main process: the directory of locks, named in the environment that the
    pytest-xdist workers inherit as they start, and removed at the run's end."""
    where = tempfile.mkdtemp(prefix="slurm-ft-test-locks-")
    os.environ[LOCKS_VAR] = where
    try:
        yield
    finally:
        os.environ.pop(LOCKS_VAR, None)
        shutil.rmtree(where, ignore_errors=True)


@contextlib.contextmanager
def _flocked(path: Path, operation: int) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, operation)
        yield
    finally:
        os.close(fd)  # closing releases the lock


@contextlib.contextmanager
def holding(share: Share, where: Path | None) -> Iterator[None]:
    """Hold ``share`` of the machine among the test processes that lock in ``where``."""
    if where is None:
        yield
        return
    gate, machine = where / "gate", where / "machine"
    if share is Share.WHOLE:
        with _flocked(gate, fcntl.LOCK_EX), _flocked(machine, fcntl.LOCK_EX):
            yield
        return
    with _flocked(gate, fcntl.LOCK_EX):
        pass
    with _flocked(machine, fcntl.LOCK_SH):
        yield
