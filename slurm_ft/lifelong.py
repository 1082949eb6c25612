"""Objects made to live as long as the process (modules, their classes and tables), kept
out of the cyclic collector's way (issue 45).

The collector's passes while such objects are made find nothing to free, and every full
pass afterwards walks them all again. Importing torch.distributed made 156,000 of them:
with the collector running the import took 0.81 s here where it takes 0.73 s paused, and
each full pass of the launcher afterwards took 45 ms (0.1 ms with them frozen), a pause
that could land in a restart. In the scale harness, whose peer processes each hold
torch's objects and 128 launchers, those passes were a fifth of the launchers' CPU in a
restart. So the collector is paused while they are made, and what exists then is frozen
(``gc.freeze``): a frozen object is never walked again, nor freed should it ever become
cyclic garbage, which nothing made for the process's life does.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


def pause() -> bool:
    """Pause the collector; whether this call paused it (False: it was paused already, by
    whoever resumes it)."""
    if not gc.isenabled():
        return False
    gc.disable()
    return True


def resume() -> None:
    """Freeze what exists and resume the collector, if it is paused."""
    if not gc.isenabled():
        gc.freeze()
        gc.enable()


def keep_what_exists() -> None:
    """Freeze what exists now, the collector running on: for a process that has just made
    what it lives with, before what it makes and drops over and over. The launcher, once it
    holds its first decision (its connections and threads, the job's placement), before
    its first workers: the collector's passes otherwise walked all of that again, little on
    a node of its own, but in the scale harness, whose peer process holds 128 launchers' in
    one heap, 0.4 s of the 4,096 launchers' CPU in a restart (11 %). Frozen objects are still
    freed when no one holds them; only one that later becomes cyclic garbage is not, and
    the cycles' objects (the workers', the ones a restart drops) are made after."""
    gc.freeze()


@contextlib.contextmanager
def made_for_life() -> Iterator[None]:
    """What is made inside lives as long as the process: the collector is paused meanwhile
    and what exists at the end is frozen, unless the collector was paused already (then
    its owner freezes at its own end)."""
    paused = pause()
    try:
        yield
    finally:
        if paused:
            resume()
