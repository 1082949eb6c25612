"""Threads kept for the launcher's blocking store calls that must not block its caller: a
connection being made (``stores._client``) and a long store wait (``longwaits``) (issue 45).

Each such call used to start a thread of its own, or one per connection: 0.10-0.15 ms of a
launcher's CPU each here (a stack mapped, a clone, the interpreter's thread state), against
0.04 ms to hand a call to a thread that waits for one. A store succession started two per
survivor (its new connection, and that connection's first long wait), which the scale
harness's 4,094 survivors paid on two cores. A thread that finished its call waits for the
next one for as long as the process lives, so a process keeps as many as it ever ran at
once: a launcher a few (its connections, one wait each), a peer process of the harness a
few hundred.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable

NAME = "slurm-ft-store-call"

Call = Callable[[], None]

_idle: list[queue.SimpleQueue[Call]] = []  # each idle thread's inbox
_lock = threading.Lock()


def run(call: Call) -> None:
    """``call`` on a kept thread: an idle one, else a new one. ``call`` hands what it makes
    to its caller itself and raises nothing (what it would raise is lost)."""
    with _lock:
        inbox = _idle.pop() if _idle else None
    if inbox is None:
        inbox = queue.SimpleQueue()
        threading.Thread(target=_serve, args=(inbox,), name=NAME, daemon=True).start()
    inbox.put(call)


def idle() -> int:
    """How many kept threads wait for a call."""
    with _lock:
        return len(_idle)


def _serve(inbox: queue.SimpleQueue[Call]) -> None:
    while True:
        call = inbox.get()
        try:
            call()
        except BaseException:  # the call hands over its own outcome; this thread serves on
            pass
        del call  # an idle thread holds nothing of its last call alive
        with _lock:
            _idle.append(inbox)


def _forget_in_child() -> None:
    """A forked child has none of its parent's threads: their inboxes would take calls no
    one runs."""
    global _lock
    _idle.clear()
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_in_child)
