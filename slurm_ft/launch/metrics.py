"""The launcher's state as Prometheus textfile metrics, for node_exporter's textfile collector.

The loop builds a :class:`LauncherMetrics` snapshot whenever it likes (every watch tick is
fine) and hands it to :class:`PromFileWriter`, which writes only when the snapshot changed
and at most once per ``min_interval`` seconds, atomically (a scrape never sees half a file).
A change that arrives inside the interval is kept and written by the first ``update`` after
it, or by ``flush`` at exit. A write error never reaches the loop: it is reported once
through ``on_error`` and the write is tried again after the interval.

Names follow the Prometheus conventions: ``slurm_ft_launch_`` prefix, base units
(``_seconds``, ``_bytes``), ``_total`` for counters. Counters restart from 0 with a new
launcher (a new Slurm attempt), which ``rate()`` and ``increase()`` handle as a reset.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from slurm_ft import atomicfile

PREFIX = "slurm_ft_launch"


@dataclass(frozen=True)
class LauncherMetrics:
    job: str  # the job key (job id, or <array id>_<task>, or "standalone")
    node: str
    node_rank: int
    attempt: int
    cycle: int | None  # the global cycle number being run, None before the first
    restarts_used: int
    restart_budget: int
    workers_running: int
    last_failure_time: float | None = None
    last_failure_kind: str | None = None
    log_lines_lost: int = 0
    log_bytes_lost: int = 0
    store_values_ignored: int = 0  # store keys whose values were forged or malformed
    # node 0 only: (peer node name, seconds since its last heartbeat), in node-rank order
    peer_heartbeat_age_s: tuple[tuple[str, float], ...] = ()
    # standby workers (README: warm restarts); None: this launcher keeps none
    standby_ready: int | None = None
    standby_rss_bytes: int = 0
    standby_wait_cpu_s: float = 0.0
    warm_starts: int = 0


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    return repr(float(value)) if isinstance(value, float) else str(value)


def render(m: LauncherMetrics) -> str:
    """The text exposition format, one HELP and TYPE per family."""
    base = f'job="{_label(m.job)}",node="{_label(m.node)}"'
    lines: list[str] = []

    def family(name: str, kind: str, help_text: str, samples: list[tuple[str, float]]) -> None:
        if not samples:
            return
        lines.append(f"# HELP {PREFIX}_{name} {help_text}")
        lines.append(f"# TYPE {PREFIX}_{name} {kind}")
        for labels, value in samples:
            lines.append(f"{PREFIX}_{name}{{{base}{labels}}} {_number(value)}")

    family("node_rank", "gauge", "This launcher's node rank.", [("", m.node_rank)])
    family("attempt", "gauge", "Slurm restart count of the job (requeues so far).", [("", m.attempt)])
    family(
        "cycle",
        "gauge",
        "Global number of the cycle being run (continues across requeues).",
        [("", m.cycle)] if m.cycle is not None else [],
    )
    family("restarts_total", "counter", "In-job restarts used in this attempt.", [("", m.restarts_used)])
    family("restart_budget", "gauge", "In-job restarts allowed per attempt.", [("", m.restart_budget)])
    family(
        "workers_running", "gauge", "Worker processes of this node now running.", [("", m.workers_running)]
    )
    if m.last_failure_time is not None:
        kind = f',kind="{_label(m.last_failure_kind or "unknown")}"'
        family(
            "last_failure_timestamp_seconds",
            "gauge",
            "When the last cycle failure happened (Unix time), by failure kind.",
            [(kind, m.last_failure_time)],
        )
    family(
        "log_lost_lines_total",
        "counter",
        "Worker output lines the application log could not keep.",
        [("", m.log_lines_lost)],
    )
    family(
        "log_lost_bytes_total",
        "counter",
        "Worker output bytes the application log could not keep.",
        [("", m.log_bytes_lost)],
    )
    family(
        "store_values_ignored_total",
        "counter",
        "Store keys whose values were ignored: forged (not sealed) or not what the protocol allows.",
        [("", m.store_values_ignored)],
    )
    if m.standby_ready is not None:
        family(
            "standby_workers", "gauge", "Standby workers ready for the next cycle.", [("", m.standby_ready)]
        )
        family(
            "standby_resident_bytes",
            "gauge",
            "Resident memory of the ready standby workers, together.",
            [("", m.standby_rss_bytes)],
        )
        family(
            "standby_wait_cpu_seconds",
            "gauge",
            "CPU time the ready standby workers used while waiting, together.",
            [("", round(m.standby_wait_cpu_s, 2))],
        )
        family(
            "warm_starts_total", "counter", "Workers started from a standby worker.", [("", m.warm_starts)]
        )
    family(
        "peer_heartbeat_age_seconds",
        "gauge",
        "Node 0: seconds since each peer launcher's last heartbeat.",
        [(f',peer="{_label(peer)}"', age) for peer, age in m.peer_heartbeat_age_s],
    )
    return "\n".join(lines) + "\n"


class PromFileWriter:
    """Writes snapshots to ``path`` on change, at most once per ``min_interval`` seconds."""

    def __init__(
        self,
        path: str,
        *,
        min_interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        write: Callable[[str, bytes], None] = atomicfile.write_bytes,
        on_error: Callable[[str], None] | None = None,
    ) -> None:
        self.path = path
        self.min_interval = min_interval
        self._clock = clock
        self._write = write
        self._on_error = on_error
        self._written: LauncherMetrics | None = None
        self._pending: LauncherMetrics | None = None
        self._last_write: float | None = None
        self._failing = False
        self.writes = 0

    def update(self, snapshot: LauncherMetrics) -> bool:
        """Take the latest snapshot; True when it was written now."""
        self._pending = None if snapshot == self._written else snapshot
        if self._pending is None:
            return False
        now = self._clock()
        if self._last_write is not None and now - self._last_write < self.min_interval:
            return False
        return self._emit(now)

    def flush(self) -> bool:
        """Write a pending change now, whatever the interval (the launcher is exiting)."""
        if self._pending is None:
            return False
        return self._emit(self._clock())

    def _emit(self, now: float) -> bool:
        snapshot = self._pending
        assert snapshot is not None
        self._last_write = now
        try:
            self._write(self.path, render(snapshot).encode())
        except OSError as exc:
            if not self._failing and self._on_error is not None:
                self._on_error(f"cannot write metrics file {self.path}: {exc.strerror or exc}")
            self._failing = True
            return False
        self._failing = False
        self._written, self._pending = snapshot, None
        self.writes += 1
        return True
