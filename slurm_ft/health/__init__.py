"""Node health checks: NIC link state, storage paths and mounts, GPUs; bounded in time.

The launcher calls ``take_baseline`` once at start and ``run_checks`` before every
rendezvous; ``slurm-ft-healthcheck`` is a front end over the same two calls. Importing
this package must stay cheap (no torch, no rich, no pynvml until a GPU check runs).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from slurm_ft.health.nic import Baseline
from slurm_ft.health.result import Report, Result, Status
from slurm_ft.health.runner import CHECK_NAMES, run_checks, take_baseline, validate

if TYPE_CHECKING:
    from slurm_ft.health.gpu import NvmlAdapter, wait_for_release

__all__ = [
    "CHECK_NAMES",
    "Baseline",
    "NvmlAdapter",
    "Report",
    "Result",
    "Status",
    "run_checks",
    "take_baseline",
    "validate",
    "wait_for_release",
]


def __getattr__(name: str) -> object:
    """The GPU names load the GPU module on first use only (a health check without GPUs
    never imports it)."""
    if name in ("NvmlAdapter", "wait_for_release"):
        from slurm_ft.health import gpu

        return getattr(gpu, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
