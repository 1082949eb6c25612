"""Every launcher write to its state dir, and the reads it makes there, bounded in time.

The state dir usually lives on the job's shared file system (``$SLURM_SUBMIT_DIR``), and a
write into an NFS or Lustre mount whose server died never returns: the launcher would then
neither restart, nor honour SIGTERM, nor exit, and the allocation would be held until the
time limit. So when the state dir is off local disks (``slurm_ft.health.storage.off_local_disk``)
every file operation here is made by a scribe child and waited for at most ``timeout``
seconds. On a local disk the launcher makes them itself, exactly as before.

When a write does not finish in time the state dir is *stalled*: what the cycle needs to go
on (the restart count, the decision, the ledger's verdict) is in the store and in memory
anyway, so nothing waits for it. The record is kept here (the newest version of each file)
and written, in order, once the child's stuck write returns (the mount answers again);
until then every write is kept at once and every read answers "not there". The agent
decides what a stall that does not end means for the attempt (``lifetime.finish``, README
"A file system that stops answering").
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slurm_ft import atomicfile
from slurm_ft import scribe_child as wire

if TYPE_CHECKING:
    from slurm_ft.scribe import Reply, Scribe

DEFAULT_TIMEOUT = 10.0


class StateDirStalled(Exception):
    """The state dir did not answer a read the launcher cannot go on without (the first
    cycle number at start): the node is unhealthy. The message names the node and path."""


_SETTLE_POLL_S = 0.05


class StateIO:
    """The state dir's file operations for one launcher (see the module docstring)."""

    def __init__(
        self,
        root: Path,
        node: str,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        on_event: Callable[[str], None] | None = None,
        scribe: bool | None = None,
    ) -> None:
        """``scribe`` None: a scribe child when ``root`` is off local disks."""
        self.root = root
        self.node = node
        self.timeout = timeout
        self._on_event = on_event
        self._scribed = scribe  # None: decided at the first use (reads mountinfo)
        self._scribe: Scribe | None = None
        self._lock = threading.RLock()
        self.pending: dict[Path, tuple[bytes, bool]] = {}
        self.stalled_on: Path | None = None  # the write that stopped answering (until it answers)
        # True once a signal arrived: a wait that began before it ends at once (the
        # signal's --term-timeout comes first); the way out's own waits are not cut short.
        self.interrupted: Callable[[], bool] = lambda: False
        self._said_stall = False

    # ------------------------------------------------------------------ state

    @property
    def scribed(self) -> bool:
        """Whether the state dir's files go through a scribe child (off local disks)."""
        if self._scribed is None:
            from slurm_ft.health.storage import off_local_disk

            self._scribed = off_local_disk(self.root)
        return self._scribed

    def _child(self) -> Scribe:
        if self._scribe is None:
            from slurm_ft.scribe import Scribe

            self._scribe = Scribe("statedir", stall_after=self.timeout, on_event=lambda _slot, _text: None)
        return self._scribe

    def stalled(self) -> bool:
        """A write to the state dir has not finished within the timeout and still has not."""
        return self._scribe is not None and self._scribe.stalled()

    def problem(self) -> str | None:
        """This node's state dir has stopped answering (the line that names it), else None."""
        if not self.stalled():
            return None
        assert self._scribe is not None
        what = self.stalled_on or self.root
        return (
            f"state dir {self.root} on {self.node} does not answer (a write of {what} "
            f"has not finished after {self._scribe.busy_for():.0f} s)"
        )

    def _event(self, text: str) -> None:
        if self._on_event is not None:
            self._on_event(text)

    def _abort(self) -> Callable[[], bool] | None:
        """For a wait beginning now: true once a signal arrives (None: one already has)."""
        return None if self.interrupted() else self.interrupted

    def _stalled(self, path: Path, abort: Callable[[], bool] | None) -> None:
        if abort is not None and abort():
            return  # cut short by a signal, not a mount that stopped answering
        self.stalled_on = path
        if not self._said_stall:
            self._said_stall = True
            self._event(
                f"ERROR: state dir {self.root} on {self.node} stopped answering (a write of {path} "
                f"has not finished after {self.timeout:g} s); the cycle goes on (the restart "
                "count, the decision and the ledger are kept in the store and in memory); "
                "records are written when it answers again"
            )

    def _recovered(self) -> bool:
        """The stuck write returned: write what was kept, in order. False while stalled."""
        if self.stalled():
            return False
        if self._said_stall and not self.pending:
            return True
        while self.pending:
            path, (data, backup) = next(iter(self.pending.items()))
            if not self._request_write(path, data, backup):
                return False
            del self.pending[path]
        if self._said_stall:
            self._said_stall = False
            self.stalled_on = None
            self._event(f"state dir {self.root} answers again; the records kept meanwhile are written")
        return True

    # ------------------------------------------------------------------ writes

    def _request_write(self, path: Path, data: bytes, backup: bool) -> bool:
        """One atomic write by the child; False (and the write kept) when it stalled."""
        reply = self._request(wire.OP_ATOMIC, path, data, wire.BACKUP if backup else 0)
        if reply is None:
            self.pending[path] = (data, backup)
            return False
        reply.raise_error(str(path))
        return True

    def write_bytes(self, path: Path, data: bytes, *, keep_backup: bool = False) -> None:
        """Replace ``path`` atomically (``atomicfile``'s way); on a stall, keep it for later.
        An error the file system answers with (full, read-only) is raised as ``OSError``."""
        if not self.scribed:
            atomicfile.write_bytes(path, data, keep_backup=keep_backup)
            return
        with self._lock:
            if not self._recovered():
                self.pending.pop(path, None)
                self.pending[path] = (data, keep_backup)  # the newest version, last in order
                return
            self._request_write(path, data, keep_backup)

    def write_json(self, path: Path, obj: Any, *, keep_backup: bool = False) -> None:
        data = (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode()
        self.write_bytes(path, data, keep_backup=keep_backup)

    def add_line(self, path: Path, line: bytes) -> None:
        """Append one whole line (a timed reading); dropped while the state dir is stalled."""
        if not self.scribed:
            atomicfile.append_line(path, line)
            return
        self._simple(wire.OP_ADDLINE, path, line)

    def mkdirs(self, path: Path) -> None:
        if not self.scribed:
            path.mkdir(parents=True, exist_ok=True)
            return
        self._simple(wire.OP_MKDIRS, path)

    def unlink(self, path: Path) -> None:
        if not self.scribed:
            path.unlink(missing_ok=True)
            return
        self._simple(wire.OP_UNLINK, path)

    def _simple(self, op: int, path: Path, data: bytes = b"") -> None:
        """A request worth no keeping: skipped while stalled, raised as OSError on error."""
        with self._lock:
            reply = self._ask(op, path, data)
            if reply is not None:
                reply.raise_error(str(path))

    def _ask(self, op: int, path: Path, data: bytes = b"", arg: int = 0) -> Reply | None:
        """One answered request of the child (under ``_lock``); None while the state dir
        is stalled, or when this request finds it so."""
        return self._request(op, path, data, arg) if self._recovered() else None

    def _request(self, op: int, path: Path, data: bytes, arg: int = 0) -> Reply | None:
        """The child's answer; None (and the stall said) when none came in time."""
        from slurm_ft.scribe import Stalled

        abort = self._abort()
        try:
            return self._child().request(op, str(path), data, arg, timeout=self.timeout, abort=abort)
        except Stalled:
            self._stalled(path, abort)
            return None

    # ------------------------------------------------------------------ reads

    def read_bytes(self, path: Path, *, tail: int = 0) -> bytes | None:
        """The file's bytes (``tail``: only its last so many); None when it is missing, or
        while the state dir is stalled. Other errors are raised as ``OSError``."""
        if not self.scribed:
            try:
                return wire.read_file(str(path), tail)
            except FileNotFoundError:
                return None
        with self._lock:
            if path in self.pending:
                data = self.pending[path][0]
                return data[-tail:] if tail > 0 else data
            reply = self._ask(wire.OP_READ, path, arg=tail)
            if reply is None or reply.missing:
                return None
            reply.raise_error(str(path))
            return reply.payload

    def list_names(self, directory: Path) -> list[str] | None:
        """The names in ``directory`` ([] when it is missing); None while stalled."""
        if not self.scribed:
            try:
                return os.listdir(directory)
            except FileNotFoundError:
                return []
        with self._lock:
            reply = self._ask(wire.OP_LIST, directory)
            if reply is None:
                return None
            if reply.missing:
                return []
            reply.raise_error(str(directory))
            return [n for n in os.fsdecode(reply.payload).split("\n") if n]

    def read_json(self, path: Path) -> dict[str, Any] | None:
        """Like ``records.read_json``: a dict, or None when missing, unreadable or stalled."""
        try:
            raw = self.read_bytes(path)
            doc = json.loads(raw.decode("utf-8")) if raw is not None else None
        except (OSError, ValueError):
            return None
        return doc if isinstance(doc, dict) else None

    def written_by(self, path: Path, run_uuid: str) -> bool:
        doc = self.read_json(path)
        return doc is not None and doc.get("run_uuid") == run_uuid

    # ------------------------------------------------------------------ the end

    def settle(self, budget: float) -> bool:
        """Write what is kept, waiting at most ``budget`` seconds for a stalled state dir to
        answer again; True when nothing is left unwritten."""
        if not self.scribed:
            return True
        deadline = time.monotonic() + budget
        with self._lock:
            while True:
                busy = self._scribe is not None and self._scribe.busy_for() > 0
                left = deadline - time.monotonic()
                if not busy and left > 0:
                    saved, self.timeout = self.timeout, min(self.timeout, left)
                    try:
                        if self._recovered() and not self.pending:
                            return True
                    finally:
                        self.timeout = saved
                if time.monotonic() >= deadline:
                    return not self.pending and not self.stalled()
                time.sleep(_SETTLE_POLL_S)

    def close(self, budget: float) -> None:
        """End the child within ``budget`` (SIGKILL and leave it behind when it is stuck)."""
        if self._scribe is not None:
            self._scribe.close(0.0 if self._scribe.stalled() else budget)


def unanswered(root: Path, node: str, timeout: float) -> str | None:
    """Before the launcher touches its state dir at start: a state dir off local disks
    that does not answer a look within ``timeout`` (its nearest existing part is listed by
    a child that is abandoned at the deadline) is named, with the node; else None."""
    from slurm_ft.health.storage import off_local_disk

    if not off_local_disk(root):
        return None
    from slurm_ft.childprobe import Child
    from slurm_ft.health.storage import PROBE_SCRIPT

    answer = Child(PROBE_SCRIPT, ["near", str(root)]).collect(time.monotonic() + timeout)
    if not answer.timed_out:
        return None
    return f"state dir {root} on {node} does not answer (no answer to a look within {timeout:g} s)"
