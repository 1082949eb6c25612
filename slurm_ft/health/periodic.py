"""The node's health check again while its workers train (``health.check_interval``).

Before a join the launcher asks "may this node take part?". A GPU can fail while the
cycle runs (an Xid that asks for a reset, uncorrected ECC errors, a GPU that falls off
the bus) and so can a mount; without a look during the cycle that shows up minutes later
as an NCCL timeout or a hang on every rank, naming no node. So the GPU check and the
storage probes (the NIC links have their own monitor, ``nicmonitor``) run again every
``interval`` seconds, as ft_launcher's ``--ft-node-health-check-interval`` does.

Same checks, same code: the launcher hands in its own run of ``runner.run_checks``. One
run at a time, in a daemon thread, and the next starts ``interval`` s after the last one
ended, so the checks never pile up whatever the interval. A run returns by the health
deadline (storage probes are children abandoned at the deadline; a wedged NVML is left
behind in its thread by the runner), and the launcher's watch never waits for one: it
polls for a finished report and is woken through ``wake_fd`` when one fails.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Sequence

from slurm_ft.health.result import Report, Result, Status

# The families that run while workers train; "nic" is the NIC monitor's business there.
IN_TRAINING: tuple[str, ...] = ("storage", "gpu")
COUNT_CHECK = "gpu:count"


def families(checks: Sequence[str]) -> list[str]:
    """The selected check families that also run while workers train, in their order."""
    return [c for c in checks if c in IN_TRAINING]


def gpus_seen(report: Report | None) -> int | None:
    """How many GPUs a report's count check found, when it passed: the count a GPU that
    falls off the bus during training is missed against, when Slurm gives none."""
    if report is None:
        return None
    for result in report.results:
        if result.name == COUNT_CHECK and result.status is Status.PASS:
            count = result.data.get("count")
            return count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else None
    return None


def expected_gpus(configured: int | None, seen: int | None) -> int | None:
    """The GPU count a run during training expects: the configured one (``health.gpus`` or
    Slurm's), else the one the check before the join found (None: any count)."""
    return configured if configured else seen


def unhealthy_detail(report: Report) -> str | None:
    """'<check>: <detail>' of a report's first failure; None when the node is healthy."""
    first = report.first_failure
    return None if first is None else f"{first.name}: {first.detail}"


class PeriodicCheck:
    """Runs ``run`` every ``interval`` s in a thread of its own; the watch polls it."""

    def __init__(
        self,
        run: Callable[[], Report],
        interval: float,
        *,
        node_name: str,
        now: float,
        wake_fd: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._run = run
        self.interval = interval
        self._node = node_name
        self._wake_fd = wake_fd
        self._clock = clock
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._failed: Report | None = None
        self._next = now + interval
        self.runs = 0  # finished runs
        self.last: Report | None = None

    @property
    def running(self) -> bool:
        with self._lock:
            return self._thread is not None

    def rebase(self, now: float) -> None:
        """For the start of each watch phase: the check before the join just ran, so the
        first run comes one interval after the workers started (a run still going on
        from the last cycle is left to finish; its answer still counts)."""
        with self._lock:
            if self._thread is None:
                self._next = now + self.interval

    def take_failed(self) -> Report | None:
        """A finished run's report that found the node unhealthy, once; else None."""
        with self._lock:
            failed, self._failed = self._failed, None
        return failed

    def poll(self, now: float) -> Report | None:
        """An unhealthy report when a run found one (once); otherwise starts the next run
        when it is due and none is running, and returns None at once."""
        failed = self.take_failed()
        if failed is not None:
            return failed
        with self._lock:
            if self._thread is not None or now < self._next:
                return None
            self._thread = threading.Thread(target=self._work, name="health-periodic", daemon=True)
            thread = self._thread
        thread.start()
        return None

    def _work(self) -> None:
        started = self._clock()
        try:
            report = self._run()
        except Exception as exc:  # a bug must not pass for a healthy node, nor kill the thread
            result = Result(
                "health", Status.FAIL, f"check crashed: {type(exc).__name__}: {exc}", self._clock() - started
            )
            report = Report((result,), self._node, self._clock() - started)
        with self._lock:
            self._thread = None
            self._next = self._clock() + self.interval
            self.last = report
            self.runs += 1  # after ``last``: a reader that sees the count sees the report
            if not report.healthy:
                self._failed = report
                if self._wake_fd is not None:  # under the lock: close() may not pass it
                    with contextlib.suppress(OSError):
                        os.write(self._wake_fd, b"h")

    def close(self) -> None:
        """Before the wake pipe closes: a run still going on must not write to its number,
        which the process may have given to another file by then."""
        with self._lock:
            self._wake_fd = None

    def join(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for a run in flight (tests, benchmarks); True when none is."""
        with self._lock:
            thread = self._thread
        if thread is not None:
            thread.join(timeout)
        return not self.running
