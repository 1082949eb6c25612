"""Run the selected check families concurrently under one overall deadline.

Each family runs in a daemon thread. The storage family bounds itself (its probes are
child processes killed at the deadline); the others read sysfs or NVML, which normally
answer at once, but a wedged GPU driver can stall NVML, so the runner never waits past
the deadline for any family: a family still running then is reported as timed out and
left behind in its daemon thread.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING

from slurm_ft.config import YAML_ROOT, ConfigError, HealthSettings
from slurm_ft.health import nic, storage
from slurm_ft.health.nic import Baseline
from slurm_ft.health.result import Report, Result, Status

if TYPE_CHECKING:
    from slurm_ft.health import gpu

CHECK_NAMES: tuple[str, ...] = ("nic", "storage", "gpu")

# Storage probes are killed this long before the overall deadline so their results are
# in before the runner stops waiting.
_STORAGE_MARGIN_S = 0.15
_JOIN_GRACE_S = 0.1


def validate(settings: HealthSettings) -> None:
    """Bad input the command reports with exit code 2, before any check runs."""
    unknown = [c for c in settings.checks if c not in CHECK_NAMES]
    if unknown:
        raise ConfigError(
            f"{YAML_ROOT}.health.checks: unknown check {unknown[0]!r} (known: {', '.join(CHECK_NAMES)})"
        )
    if not settings.checks:
        raise ConfigError(f"{YAML_ROOT}.health.checks: no checks selected")
    for path in settings.paths:
        if not path.startswith("/"):
            raise ConfigError(f"{YAML_ROOT}.health.paths: {path!r} is not an absolute path")
    for pattern in settings.nics:
        try:
            nic.validate_pattern(pattern)
        except nic.PatternError as exc:
            raise ConfigError(f"{YAML_ROOT}.health.nics: {exc}") from None
    if settings.gpus is not None and settings.gpus < 0:
        raise ConfigError(f"{YAML_ROOT}.health.gpus: must be >= 0, got {settings.gpus}")
    if settings.gpu_foreign_memory_tolerance_mib < 0:
        raise ConfigError(
            f"{YAML_ROOT}.health.gpu_foreign_memory_tolerance_mib: must be >= 0, "
            f"got {settings.gpu_foreign_memory_tolerance_mib}"
        )


def expand_paths(paths: list[str], node_name: str) -> list[str]:
    """``%n`` is this node's Slurm name, as in slurm.conf, for per-node paths in one config."""
    return [p.replace("%n", node_name) for p in paths]


def take_baseline(settings: HealthSettings) -> Baseline:
    """NIC snapshot for transition mode; cheap, sysfs only."""
    return nic.take_baseline(settings.sysfs_root, settings.nics)


def _gpu_check(
    expected: int | None, tolerance_mib: int | None, ours: frozenset[int], opener: gpu.Opener | None
) -> list[Result]:
    """The GPU family, imported only when selected: node checks without GPUs start faster."""
    from slurm_ft.health import gpu

    return gpu.check(expected, tolerance_mib, ours, opener or gpu.NvmlAdapter.open)


def run_checks(
    settings: HealthSettings,
    *,
    node_name: str,
    expected_gpus: int | None,
    baseline: Baseline | None = None,
    nvml_opener: gpu.Opener | None = None,
    own_pids: Collection[int] | None = None,
    started_at: float | None = None,
    near_paths: Sequence[str] = (),
    foreign_memory: bool = True,
) -> Report:
    """Run ``settings.checks``; returns by ``settings.deadline`` (plus a few ms).

    A failing or crashing check becomes a FAIL result, never an exception. Invalid
    settings raise ConfigError (call ``validate`` first to report them early).
    ``started_at`` (time.monotonic) lets a command count the deadline from its own start.
    ``near_paths``: directories the launcher writes into, probed by the storage family
    (bounded like ``settings.paths``) even when they do not exist yet. ``foreign_memory``
    False: GPU memory held by other processes is not judged (the launcher's check while
    its own workers hold the GPUs).
    """
    validate(settings)
    start = time.monotonic() if started_at is None else started_at
    deadline_at = start + settings.deadline
    expected = expected_gpus if expected_gpus is not None else settings.gpus
    ours = frozenset(own_pids) if own_pids is not None else frozenset({os.getpid()})

    jobs: dict[str, Callable[[], list[Result]]] = {
        "nic": lambda: nic.check(settings.sysfs_root, settings.nics, settings.nic_mode, baseline),
        "storage": lambda: storage.check(
            expand_paths(settings.paths, node_name),
            write_probe=settings.write_probe,
            discover_mounts=settings.discover_mounts,
            sysfs_root=settings.sysfs_root,
            proc_root=settings.proc_root,
            stop_at=deadline_at - _STORAGE_MARGIN_S,
            budget_s=settings.deadline,
            near_paths=near_paths,
        ),
        "gpu": lambda: _gpu_check(
            expected,
            settings.gpu_foreign_memory_tolerance_mib if foreign_memory else None,
            ours,
            nvml_opener,
        ),
    }
    selected = [name for name in CHECK_NAMES if name in settings.checks]
    outcome: dict[str, list[Result]] = {}

    def run_one(name: str) -> None:
        t0 = time.monotonic()
        try:
            outcome[name] = jobs[name]()
        except Exception as exc:  # a bug in one check must not hide the others
            outcome[name] = [
                Result(
                    name,
                    Status.FAIL,
                    f"check crashed: {type(exc).__name__}: {exc}",
                    time.monotonic() - t0,
                    {},
                )
            ]

    threads = {
        name: threading.Thread(target=run_one, args=(name,), name=f"health-{name}", daemon=True)
        for name in selected
    }
    for t in threads.values():
        t.start()
    for t in threads.values():
        t.join(max(0.0, deadline_at + _JOIN_GRACE_S - time.monotonic()))

    results: list[Result] = []
    for name in selected:
        done = outcome.get(name)
        if done is None:
            results.append(
                Result(
                    name,
                    Status.FAIL,
                    f"timed out after {settings.deadline:g} s",
                    time.monotonic() - start,
                    {"timed_out": True},
                )
            )
        else:
            results.extend(done)
    return Report(tuple(results), node_name, time.monotonic() - start)
