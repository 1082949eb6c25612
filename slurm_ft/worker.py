"""The trainer-side API: heart-beats, sections and a stop flag, for finer hang detection.

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
"""

from __future__ import annotations

import mmap
import os
import signal
import struct
import time
from dataclasses import dataclass
from types import FrameType, TracebackType
from typing import ClassVar

MONITOR_ENV = "SLURM_FT_WORKER_MONITOR"
SIGNALS_ENV = "SLURM_FT_FORWARDED_SIGNALS"

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
