"""Shared pieces of the application-log integration tests: real workers on real pipes."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from slurm_ft.launch.output.applog import AppLog, open_worker_pipe
from slurm_ft.launch.output.eventlog import EventLog
from tests.support.procs import MARKER_VAR, describe, new_marker, pids_with_marker
from tests.support.waiting import wait_until

WRITER = str(Path(__file__).with_name("applog_writer.py"))
REPO = str(Path(__file__).resolve().parents[2])


def worker_env(marker: str) -> dict[str, str]:
    env = dict(os.environ)
    env[MARKER_VAR] = marker
    env["PYTHONPATH"] = REPO
    return env


@dataclass
class Workers:
    """Spawns workers the way the launcher will: one pipe each for stdout+stderr."""

    marker: str
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def spawn(self, argv: list[str]) -> tuple[subprocess.Popen[bytes], int]:
        read_fd, write_fd = open_worker_pipe()
        try:
            proc = subprocess.Popen(argv, stdout=write_fd, stderr=write_fd, env=worker_env(self.marker))
        finally:
            os.close(write_fd)
        self.procs.append(proc)
        return proc, read_fd

    def spawn_writer(self, *args: str) -> tuple[subprocess.Popen[bytes], int]:
        return self.spawn([sys.executable, WRITER, *args])

    def wait_all(self, timeout: float = 60.0) -> list[int]:
        return [proc.wait(timeout) for proc in self.procs]


@pytest.fixture
def marker() -> Iterator[str]:
    tag = new_marker()
    yield tag
    left = pids_with_marker(tag)
    for pid in left:
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
    assert not left, f"orphan processes left behind: {describe(left)}"


@pytest.fixture
def workers(marker: str) -> Iterator[Workers]:
    group = Workers(marker)
    yield group
    for proc in group.procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


@dataclass
class Captured:
    lines: list[bytes]
    events: list[str]


def new_applog(path: Path | None, events_path: Path, **overrides: object) -> tuple[AppLog, EventLog]:
    events = EventLog(events_path, "node0", quiet=True)
    options: dict[str, object] = {
        "rank_width": 1,
        "line_cap": 1024 * 1024,
        "drain_timeout": 10.0,
        "tee": False,
        "tee_local_ranks": None,
        "events": events,
    }
    options.update(overrides)
    return AppLog(path, **options), events  # type: ignore[arg-type]


def read_events(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def by_rank(content: bytes, width: int = 1) -> dict[int, list[bytes]]:
    """Split a cycle file into each rank's lines (``": "`` records only), in file order."""
    out: dict[int, list[bytes]] = {}
    assert content.endswith(b"\n") or not content
    for record in content.split(b"\n")[:-1]:
        head, mark, body = record[:width], record[width : width + 2], record[width + 2 :]
        assert mark == b": ", f"unexpected record {record[:80]!r}"
        out.setdefault(int(head), []).append(body)
    return out


def wait_for_file_bytes(path: Path, needle: bytes, timeout: float = 20.0) -> None:
    wait_until(
        lambda: path.exists() and needle in path.read_bytes(), timeout, message=f"{needle!r} in {path}"
    )
