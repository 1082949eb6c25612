"""Who may write a key's slots: the worker of the newest cycle.

A worker of the last cycle can outlive it for a while (stuck in a kernel call, ignoring
SIGTERM) while the new cycle's worker of the same rank starts. Both would write the same
two slots, and the leftover's older timeline could overwrite the new one's snapshots (or
be restored by the next cycle). The rule: each key has an owner file that records the
claiming worker's cycle, pid and start tick, and is ``flock``-ed by whoever writes or
restores. A worker claims the key when it restores or first writes; a writer checks the
owner under the lock before every write; a worker of an older cycle, or a second live
worker of the same cycle, is refused. A dead owner's claim is taken over.
"""

from __future__ import annotations

import enum
import fcntl
import os
import time
from dataclasses import dataclass
from pathlib import Path

from slurm_ft import procident

_POLL_S = 0.01


@dataclass(frozen=True)
class Claimant:
    cycle: int
    pid: int
    start_ticks: int | None

    def encode(self) -> bytes:
        return (
            f"{self.cycle} {self.pid} {self.start_ticks if self.start_ticks is not None else -1}\n".encode()
        )

    @classmethod
    def decode(cls, raw: bytes) -> Claimant | None:
        parts = raw.split()
        try:
            cycle, pid, ticks = (int(p) for p in parts)
        except ValueError:
            return None
        return cls(cycle, pid, ticks if ticks >= 0 else None)


class Verdict(enum.Enum):
    MINE = "mine"
    NEWER_CYCLE = "newer cycle"  # a worker of a later cycle owns the key: I am a leftover
    LIVE_TWIN = "live twin"  # another live worker of my cycle owns it


def decide(owner: Claimant | None, me: Claimant, owner_alive: bool) -> Verdict:
    """The rule, pure."""
    if owner is None or owner == me or owner.cycle < me.cycle:
        return Verdict.MINE
    if owner.cycle > me.cycle:
        return Verdict.NEWER_CYCLE
    return Verdict.LIVE_TWIN if owner_alive else Verdict.MINE


class KeyLock:
    """The key's owner file, locked (exclusive to write or claim, shared to read only)."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd = fd

    @classmethod
    def acquire(cls, path: Path, *, shared: bool = False, wait_s: float = 0.0) -> KeyLock | None:
        """The lock, or None when another process holds it for longer than ``wait_s``."""
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        deadline = time.monotonic() + wait_s
        mode = (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB
        while True:
            try:
                fcntl.flock(fd, mode)
                return cls(path, fd)
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    return None
                time.sleep(_POLL_S)

    def owner(self) -> Claimant | None:
        return Claimant.decode(os.pread(self._fd, 128, 0))

    def claim(self, me: Claimant) -> Verdict:
        """Take the key for ``me`` unless the rule refuses; the lock must be exclusive."""
        owner = self.owner()
        # only a same-cycle owner's life decides anything: /proc is read for nothing else
        alive = False
        if owner is not None and owner != me and owner.cycle == me.cycle:
            alive = procident.is_same(owner.pid, owner.start_ticks)
        verdict = decide(owner, me, alive)
        if verdict is Verdict.MINE and owner != me:
            data = me.encode()
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, data, 0)
        return verdict

    def release(self) -> None:
        os.close(self._fd)  # closing the only descriptor drops the flock

    def __enter__(self) -> KeyLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
