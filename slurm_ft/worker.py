"""The trainer-side API: heart-beats, sections and a stop flag, for finer hang detection;
snapshots of the trainer's state in the node's memory, to resume from after a failure.

Everything here is optional. A trainer that never imports this module is still watched by
the launcher (silence of the whole job, iteration stalls); one that calls
:func:`heartbeat` and wraps its phases in :func:`section` is judged by the rank monitor
(``--rank-heartbeat-timeout``, ``--rank-section-timeouts``, ...), with the meaning of
NVIDIA ft_launcher's rank heart-beats and sections::

    from slurm_ft import worker

    for step, batch in enumerate(loader):
        with worker.section("step"):
            train_step(batch)
        worker.heartbeat()
        if worker.stop_requested():      # a forwarded SIGTERM/SIGUSR1: save, then leave
            save_checkpoint(step)
            break

Calls never block and never touch the network: the launcher gives each worker a small
shared-memory file (``SLURM_FT_WORKER_MONITOR``) and a call stores a timestamp in it
(well under 2 µs, see ``benchmarks/worker_api.py``). Outside the launcher every call is a
no-op. This module is the one place below ``cli/`` that reads the environment: it runs
inside the trainer, where the environment is its only input.

The layout of the file is defined here, once; the launcher reads it through
:func:`read_slot`.

Snapshots (``docs/guides/snapshots.md``): at a step boundary, after the optimizer step,
a trainer hands its state to :func:`snapshot`; at start it asks :func:`restore_snapshot`
for the newest one the node kept::

    restored = worker.restore_snapshot()
    if restored is not None:
        model.load_state_dict(restored.state["model"]); start = restored.step + 1
    ...
        worker.snapshot(step, {"model": model.state_dict(), "optim": optimizer.state_dict()})

The launcher names the node's snapshot area (``SLURM_FT_SNAPSHOT_DIR``) and its cap
(``SLURM_FT_SNAPSHOT_LIMIT``), and may name the step every rank resumes from
(``SLURM_FT_SNAPSHOT_STEP``; negative: none, the cycle resumes from elsewhere); without
an area both calls are no-ops. The environment is
read at the first call, not at import (a standby worker imports this module before it
is given a cycle's variables), and torch is imported only then.
"""

from __future__ import annotations

import mmap
import os
import signal
import struct
import time
from collections.abc import Mapping
from dataclasses import dataclass
from types import FrameType, TracebackType
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from slurm_ft.snapshot.session import Session

MONITOR_ENV = "SLURM_FT_WORKER_MONITOR"
SIGNALS_ENV = "SLURM_FT_FORWARDED_SIGNALS"
SNAPSHOT_DIR_ENV = "SLURM_FT_SNAPSHOT_DIR"
SNAPSHOT_LIMIT_ENV = "SLURM_FT_SNAPSHOT_LIMIT"
SNAPSHOT_STEP_ENV = "SLURM_FT_SNAPSHOT_STEP"
SNAPSHOT_PERSISTED_ENV = "SLURM_FT_SNAPSHOT_PERSISTED"  # the launchers' persist dir, if any

MAGIC = b"SFTWMON1"
SLOT_SIZE = 128
NAME_SIZE = 64
# offset: what (all timestamps are CLOCK_MONOTONIC seconds, the same clock on the whole node)
_HEARTBEAT = 8  # double: last heartbeat(), 0 = never
_SECTION_START = 16  # double: start of the current section, 0 = outside every section
_SECTION_END = 24  # double: end of the last section, 0 = no section yet
_NAME = 32  # NAME_SIZE bytes: the current section's name, NUL-padded
_DOUBLE = struct.Struct("<d")
_SLOT = struct.Struct(f"<8sddd{NAME_SIZE}s")


def _open_slot() -> mmap.mmap | None:
    path = os.environ.get(MONITOR_ENV)
    if not path:
        return None
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return mmap.mmap(fd, SLOT_SIZE)
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)


_slot = _open_slot()
_now = time.monotonic
_pack_double = _DOUBLE.pack_into


def heartbeat() -> None:
    """This rank is alive and making progress."""
    if _slot is not None:
        _pack_double(_slot, _HEARTBEAT, _now())


class section:
    """A named phase with its own timeout (``--rank-section-timeouts name=S``).

    Sections may nest; the innermost one is judged. Time outside every section is judged
    by ``--rank-out-of-section-timeout`` once the rank has used a section.
    """

    __slots__ = ("_name", "_outer")
    _stack: ClassVar[list[tuple[bytes, float]]] = []  # this process's open sections

    def __init__(self, name: str) -> None:
        self._name = name.encode()[:NAME_SIZE]
        self._outer: tuple[bytes, float] | None = None

    def __enter__(self) -> section:
        if _slot is not None:
            stack = section._stack
            if stack:
                self._outer = stack[-1]
            now = _now()
            stack.append((self._name, now))
            _slot[_NAME : _NAME + NAME_SIZE] = self._name.ljust(NAME_SIZE, b"\0")
            _pack_double(_slot, _SECTION_START, now)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if _slot is not None:
            section._stack.pop()
            if self._outer is not None:
                name, start = self._outer
                _slot[_NAME : _NAME + NAME_SIZE] = name.ljust(NAME_SIZE, b"\0")
                _pack_double(_slot, _SECTION_START, start)
            else:
                _pack_double(_slot, _SECTION_START, 0.0)
                _pack_double(_slot, _SECTION_END, _now())


_stop = False
_handlers_installed = False


def _on_stop_signal(signum: int, frame: FrameType | None) -> None:
    global _stop
    _stop = True


def stop_requested() -> bool:
    """True once the launcher forwarded a terminating signal (preemption, time limit, a
    failure elsewhere). The first call installs the handlers, so a trainer that never asks
    keeps the signals' default action; one that asks saves at its next step and exits,
    instead of doing it inside a signal handler."""
    global _handlers_installed
    if not _handlers_installed:
        _handlers_installed = True
        names = os.environ.get(SIGNALS_ENV, "")
        for text in filter(None, names.split(",")):
            try:
                signal.signal(int(text), _on_stop_signal)
            except (ValueError, OSError):  # not the main thread, or not a signal here
                pass
    return _stop


# --------------------------------------------------------------------------- snapshots


@dataclass(frozen=True)
class Restored:
    """A snapshot given back: the step it was taken after, the state as it was handed in
    (tensors on the CPU), and where it came from (``memory``, ``peer memory``, ``replica``)."""

    step: int
    state: dict[str, object]
    source: str


_session: Session | None = None
_session_read = False


def _snapshot_session() -> Session | None:
    global _session, _session_read
    if _session_read:
        return _session
    _session_read = True
    directory = os.environ.get(SNAPSHOT_DIR_ENV)
    if not directory:
        return None
    from pathlib import Path

    from slurm_ft.snapshot import session

    env = os.environ

    def number(name: str, default: int) -> int:
        try:
            return int(env.get(name, default))
        except ValueError:
            return default

    limit_text = env.get(SNAPSHOT_LIMIT_ENV, "")
    step_text = env.get(SNAPSHOT_STEP_ENV, "")
    placement = session.Placement(
        rank=number("RANK", 0),
        world_size=number("WORLD_SIZE", 1),
        local_rank=number("LOCAL_RANK", 0),
        local_world_size=number("LOCAL_WORLD_SIZE", 1),
        node_rank=number("GROUP_RANK", 0),
        cycle=number("SLURM_FT_CYCLE", 0),
    )
    settings = session.Settings(
        area=Path(directory),
        limit=int(limit_text) if limit_text.isdigit() else None,
        placement=placement,
        resume_step=int(step_text) if step_text.lstrip("-").isdigit() else None,
        persisted=Path(env[SNAPSHOT_PERSISTED_ENV]) if env.get(SNAPSHOT_PERSISTED_ENV) else None,
    )
    _session = session.Session(settings)
    return _session


def snapshot(step: int, state: Mapping[str, object], *, replicated: bool = False) -> bool:
    """Keep ``state`` (a state dict: tensors and small picklable values) as the state after
    ``step``, in the node's memory. Call it at a step boundary. ``replicated=True``: every
    rank holds the same state (DDP), so the node keeps one copy for all its ranks. True
    when kept; False when not (no launcher area, over the node's cap, shared memory full:
    said once on stderr, and training goes on)."""
    found = _snapshot_session()
    return found.snapshot(step, state, replicated=replicated) if found is not None else False


def restore_snapshot(*, mapped: bool = False) -> Restored | None:
    """The newest complete snapshot this rank (or its node's replicated copy) holds, or
    None. A snapshot of another world size or rank is refused (said once). ``mapped=True``
    gives tensors over the shared pages themselves, without a copy: only for state that is
    copied at once (``model.load_state_dict``) and never kept, since the next snapshots
    reuse those pages."""
    found = _snapshot_session()
    if found is None:
        return None
    from slurm_ft.snapshot import session

    loaded = found.restore(copy=not mapped) or session.restore_persisted(found)
    session.note_restore(found, loaded)
    return Restored(loaded.step, loaded.state, loaded.source) if loaded is not None else None


# ----------------------------------------------------------------------- launcher side


@dataclass(frozen=True)
class Slot:
    """One reading of a worker's slot; times are CLOCK_MONOTONIC seconds, 0 = never."""

    heartbeat: float
    section: str | None
    section_start: float
    section_end: float


def new_slot(path: str) -> None:
    """Create (or reset) a worker's slot before the worker starts."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, MAGIC + bytes(SLOT_SIZE - len(MAGIC)))
    finally:
        os.close(fd)


def in_section(path: str) -> bool:
    """Whether the worker of this slot file is inside a section right now."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(SLOT_SIZE)
    except OSError:
        return False
    if len(data) < _SLOT.size or data[: len(MAGIC)] != MAGIC:
        return False
    section_start: float = _DOUBLE.unpack_from(data, _SECTION_START)[0]
    return section_start != 0.0


def read_slot(view: mmap.mmap) -> Slot | None:
    """A consistent reading (the section is re-read if it changed while being read)."""
    for _ in range(3):
        magic, beat, start, end, name = _SLOT.unpack_from(view, 0)
        if magic != MAGIC:
            return None
        if _DOUBLE.unpack_from(view, _SECTION_START)[0] == start:
            text = name.rstrip(b"\0").decode(errors="replace") if start else None
            return Slot(beat, text, start, end)
    return Slot(beat, None, 0.0, end)
