"""A forked child that must not outlive its parent: ``PR_SET_PDEATHSIG``.

A parent killed with SIGKILL cannot clean up, so the kernel does it: the child asks for
SIGKILL when its parent dies. The request applies from the moment it is made, so a parent
that died between the fork and the request is checked for once after it. The launcher's
workers (``launch/workers/process.py``, before ``exec``) and ``slurm-ft-logs``'s collapsing
child (``logs/halves.py``) both use this one hook.
"""

from __future__ import annotations

import ctypes
import os
import signal
from collections.abc import Callable

PR_SET_PDEATHSIG = 1


def hook(parent_pid: int) -> Callable[[], None]:
    """What the child runs first after the fork (the C library is loaded before it)."""
    libc = ctypes.CDLL(None, use_errno=True)

    def die_with_parent() -> None:
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent_pid:  # it died before the request took
            os._exit(1)

    return die_with_parent
