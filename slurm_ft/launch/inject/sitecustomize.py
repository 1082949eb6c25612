"""Loaded by every Python worker of slurm-ft-launch (the launcher puts this directory first
on the workers' PYTHONPATH): arms ``faulthandler`` so that the launcher can ask for every
thread's Python stack when the job hangs, without a change to the training script. Then
it hands over to the ``sitecustomize`` it shadows, if there is one.
"""

from __future__ import annotations

import os
import sys


def _chain() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    ours = sys.modules.pop("sitecustomize", None)
    saved = list(sys.path)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    try:
        import sitecustomize  # noqa: F401 - the user's own, when there is one
    except ModuleNotFoundError as exc:
        if exc.name != "sitecustomize":
            raise
        if ours is not None:
            sys.modules["sitecustomize"] = ours
    finally:
        sys.path[:] = saved


def _arm() -> None:
    from _slurm_ft_stacks import arm  # type: ignore[import-not-found]  # beside this file

    arm()


_arm()
_chain()
