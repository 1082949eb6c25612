"""Arms ``faulthandler`` on the stack signal, writing to the rank's stack file: what lets
the launcher ask a hung worker for every thread's Python stack. Called at start-up by the
injected ``sitecustomize`` and by a standby worker when it becomes a cycle's worker (the
rank's file is named only then). A module of its own on the workers' ``PYTHONPATH`` so
both run the same code; standard library only.
"""

from __future__ import annotations

import os
from typing import IO

_stack_file: IO[str] | None = None


def arm() -> None:
    global _stack_file
    path = os.environ.get("SLURM_FT_STACK_FILE")
    signum = os.environ.get("SLURM_FT_STACK_SIGNAL")
    if not path or not signum:
        return
    try:
        import faulthandler

        _stack_file = open(path, "w")  # noqa: SIM115 - faulthandler writes to it until exit
        faulthandler.register(int(signum), file=_stack_file, all_threads=True, chain=False)
    except (OSError, ValueError, RuntimeError):
        _stack_file = None
