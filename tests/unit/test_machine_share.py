"""The machine's shares among pytest-xdist workers (tests/support/machineshare.py), taken by
separate processes as the workers are: a heavy test's whole share waits for every part
held and keeps every part out while it runs, parts are held together, and a heavy test
waiting is not passed over by parts asked for after it."""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import sys
from pathlib import Path

from tests.support.machineshare import Share
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
HOLDER = """
import sys, time
from pathlib import Path
from tests.support.machineshare import Share, holding
with holding(Share[sys.argv[1]], Path(sys.argv[2])):
    Path(sys.argv[3]).touch()
    sys.stdin.read()  # held until the test closes our stdin
"""


def gate_taken(where: Path) -> bool:
    """A heavy test that waits for the machine holds its gate (looked at without waiting)."""
    fd = os.open(where / "gate", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        with contextlib.suppress(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return False
        return True
    finally:
        os.close(fd)


class Holder:
    def __init__(self, share: Share, where: Path, name: str) -> None:
        self.held = where.parent / f"{name}.held"
        self.proc = subprocess.Popen(
            [sys.executable, "-c", HOLDER, share.name, str(where), str(self.held)],
            stdin=subprocess.PIPE,
            cwd=ROOT,
        )

    def holds(self) -> bool:
        return self.held.exists()

    def waits(self) -> bool:
        """Blocked on a lock: /proc/locks lists a blocked request as ``N: -> FLOCK ... PID``."""
        blocked = (line.split() for line in Path("/proc/locks").read_text().splitlines() if " -> " in line)
        return any(str(self.proc.pid) in fields[5:6] for fields in blocked)

    def release(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        assert self.proc.wait(timeout=30) == 0


def test_parts_are_held_together_and_the_whole_waits_for_them(tmp_path: Path) -> None:
    where = tmp_path / "locks"
    where.mkdir()
    first, second = Holder(Share.PART, where, "first"), Holder(Share.PART, where, "second")
    wait_until(lambda: first.holds() and second.holds(), 30, message="two parts held at once")
    heavy = Holder(Share.WHOLE, where, "heavy")
    wait_until(lambda: gate_taken(where), 30, message="the heavy test waiting at the gate")
    first.release()
    late = Holder(Share.PART, where, "late")  # asked for after the heavy test: waits behind it
    wait_until(lambda: late.waits() or late.holds(), 30, message="the late part asked for")
    second.release()
    wait_until(heavy.holds, 30, message="the whole held once the parts are given back")
    assert not late.holds()
    heavy.release()
    wait_until(late.holds, 30, message="a part held once the whole is given back")
    late.release()
